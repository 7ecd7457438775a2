package agentloop

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Sink receives the events of a run in order, one call at a time (never
// concurrently). The loop never retains or mutates an event, nor any message
// in it, after passing it, so the sink may keep both. The loop sets the
// event's oneof and time; session_id, run_id, seq and MessageEnd.entry_id are
// left for the sink to stamp. An error returned by the sink (say the store
// failed) aborts the run: the loop cancels tools, still offers agent_end, and
// Run returns the error wrapped.
//
// The context passed to the sink carries the run's values but is never
// cancelled by an abort, so the sink can still persist the ABORTED message
// and agent_end of an aborted run.
type Sink func(ctx context.Context, ev *agentdv1.AgentEvent) error

// emitter serializes events from the loop and from concurrent tools into the
// sink, and remembers the first sink failure.
type emitter struct {
	mu     sync.Mutex
	sink   Sink
	ctx    context.Context
	now    func() time.Time
	cancel context.CancelCauseFunc
	err    error
	closed bool
}

// SinkError is returned by Run and Continue when the sink failed; the run
// was stopped because of it.
type SinkError struct {
	// Event names the event the sink refused.
	Event string
	// Err is what the sink returned.
	Err error
}

// Error names the refused event so logs show where the run stopped.
func (e *SinkError) Error() string {
	return fmt.Sprintf("agentloop: sink failed on %s: %v", e.Event, e.Err)
}

// Unwrap exposes the sink's own error to errors.Is and errors.As.
func (e *SinkError) Unwrap() error { return e.Err }

func (e *emitter) stamp(ev *agentdv1.AgentEvent) {
	if ev.Time == nil {
		ev.Time = timestamppb.New(e.now())
	}
}

// send delivers one event; after a sink failure it delivers nothing and
// returns the failure.
func (e *emitter) send(ev *agentdv1.AgentEvent) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return e.err
	}
	if e.closed {
		return errClosed
	}
	e.stamp(ev)
	if err := e.call(ev); err != nil {
		e.err = &SinkError{Event: eventName(ev), Err: err}
		e.cancel(e.err)
		return e.err
	}
	return nil
}

// final delivers agent_end even after a sink failure and closes the emitter.
func (e *emitter) final(ev *agentdv1.AgentEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.closed = true
	e.stamp(ev)
	if err := e.call(ev); err != nil && e.err == nil {
		e.err = &SinkError{Event: eventName(ev), Err: err}
	}
}

func (e *emitter) failure() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

func (e *emitter) call(ev *agentdv1.AgentEvent) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sink panicked: %v", p)
		}
	}()
	return e.sink(e.ctx, ev)
}

var errClosed = fmt.Errorf("agentloop: event after agent_end")

// eventName is the name of ev's kind, the event oneof's field name
// ("message_update"), so a new event type needs no code here.
func eventName(ev *agentdv1.AgentEvent) string {
	m := ev.ProtoReflect()
	if fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("event")); fd != nil {
		return string(fd.Name())
	}
	return "unknown"
}

func evAgentStart() *agentdv1.AgentEvent {
	return &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_AgentStart{AgentStart: &agentdv1.AgentStart{}}}
}

func evTurnStart(turn uint32) *agentdv1.AgentEvent {
	return &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_TurnStart{TurnStart: &agentdv1.TurnStart{Turn: turn}}}
}

func evMessageStart(m *agentdv1.AgentMessage) *agentdv1.AgentEvent {
	return &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_MessageStart{MessageStart: &agentdv1.MessageStart{Message: m}}}
}

func evMessageEnd(m *agentdv1.AgentMessage) *agentdv1.AgentEvent {
	return &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_MessageEnd{MessageEnd: &agentdv1.MessageEnd{Message: m}}}
}

func evUpdate(u *agentdv1.MessageUpdate) *agentdv1.AgentEvent {
	return &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_MessageUpdate{MessageUpdate: u}}
}

// deltaEvent holds every object of one text or thinking delta event, so the
// hot path of streaming costs a single allocation per delta. The pointers
// handed to the sink point into it; the block stays alive as long as the sink
// keeps any of them.
type deltaEvent struct {
	ev     agentdv1.AgentEvent
	evWrap agentdv1.AgentEvent_MessageUpdate
	update agentdv1.MessageUpdate
	ts     timestamppb.Timestamp
	text   agentdv1.MessageUpdate_TextDelta
	textD  agentdv1.TextDelta
}

type thinkingDeltaEvent struct {
	ev     agentdv1.AgentEvent
	evWrap agentdv1.AgentEvent_MessageUpdate
	update agentdv1.MessageUpdate
	ts     timestamppb.Timestamp
	wrap   agentdv1.MessageUpdate_ThinkingDelta
	delta  agentdv1.ThinkingDelta
}

type toolCallDeltaEvent struct {
	ev     agentdv1.AgentEvent
	evWrap agentdv1.AgentEvent_MessageUpdate
	update agentdv1.MessageUpdate
	ts     timestamppb.Timestamp
	wrap   agentdv1.MessageUpdate_ToolCallDelta
	delta  agentdv1.ToolCallDelta
}

func setTime(ts *timestamppb.Timestamp, t time.Time) {
	ts.Seconds = t.Unix()
	ts.Nanos = int32(t.Nanosecond())
}

func (e *emitter) textDelta(index int, delta string) *agentdv1.AgentEvent {
	d := &deltaEvent{}
	d.textD.ContentIndex = uint32(index)
	d.textD.Delta = delta
	d.text.TextDelta = &d.textD
	d.update.Delta = &d.text
	d.evWrap.MessageUpdate = &d.update
	d.ev.Event = &d.evWrap
	setTime(&d.ts, e.now())
	d.ev.Time = &d.ts
	return &d.ev
}

func (e *emitter) thinkingDelta(index int, delta string) *agentdv1.AgentEvent {
	d := &thinkingDeltaEvent{}
	d.delta.ContentIndex = uint32(index)
	d.delta.Delta = delta
	d.wrap.ThinkingDelta = &d.delta
	d.update.Delta = &d.wrap
	d.evWrap.MessageUpdate = &d.update
	d.ev.Event = &d.evWrap
	setTime(&d.ts, e.now())
	d.ev.Time = &d.ts
	return &d.ev
}

func (e *emitter) toolCallDelta(index int, delta string) *agentdv1.AgentEvent {
	d := &toolCallDeltaEvent{}
	d.delta.ContentIndex = uint32(index)
	d.delta.Delta = delta
	d.wrap.ToolCallDelta = &d.delta
	d.update.Delta = &d.wrap
	d.evWrap.MessageUpdate = &d.update
	d.ev.Event = &d.evWrap
	setTime(&d.ts, e.now())
	d.ev.Time = &d.ts
	return &d.ev
}

func evToolStart(id, name string, call *agentdv1.ToolCall) *agentdv1.AgentEvent {
	return &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_ToolExecutionStart{ToolExecutionStart: &agentdv1.ToolExecutionStart{
		ToolCallId: id, ToolName: name, Arguments: call.GetArguments(),
	}}}
}

func evToolEnd(r *agentdv1.ToolResultMessage) *agentdv1.AgentEvent {
	return &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_ToolExecutionEnd{ToolExecutionEnd: &agentdv1.ToolExecutionEnd{Result: r}}}
}

func evError(stage, msg string, fatal bool) *agentdv1.AgentEvent {
	return &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_Error{Error: &agentdv1.AgentError{Message: msg, Stage: stage, Fatal: fatal}}}
}
