package provider

import (
	"context"
	"errors"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// AbortedMessage is the error text of a call cancelled by its context, the
// same words the faux provider and pi use.
const AbortedMessage = "Request was aborted"

// blockState is what the emitter knows of a block beyond its content
// (which its [Partial] holds).
type blockState struct {
	kind   BlockKind
	closed bool
	// args accumulates a tool call's JSON, parsed when the call ends.
	args strings.Builder
}

// Emitter is the shared half of every adapter: it turns "a block started, a
// delta arrived, the block ended" into Events with the right ContentIndex and
// keeps the partial message, so an abort or a broken stream still yields a
// complete assistant message holding what had arrived. Adapters only map
// their wire format onto its methods.
//
// Every method returning bool reports whether the consumer still wants
// events; once false, the adapter must stop reading and return.
type Emitter struct {
	yield   func(Event) bool
	model   Model
	now     func() time.Time
	blocks  []*blockState
	partial Partial
	stopped bool
	started bool
	ended   bool
	// Usage is filled by the adapter as the wire reports it; cost is
	// computed from the model's price at the end.
	Usage TokenUsage
	// ResponseID is the provider's id for this response.
	ResponseID string
}

// TokenUsage is the token counts an adapter collects while streaming.
type TokenUsage struct {
	Input, Output, CacheRead, CacheWrite, Total int64
}

// NewEmitter returns an emitter that yields to yield. now may be nil.
func NewEmitter(model Model, yield func(Event) bool, now func() time.Time) *Emitter {
	if now == nil {
		now = time.Now
	}
	return &Emitter{yield: yield, model: model, now: now}
}

func (e *Emitter) send(ev Event) bool {
	e.partial.Add(ev)
	if e.stopped {
		return false
	}
	if !e.yield(ev) {
		e.stopped = true
		return false
	}
	return true
}

func (e *Emitter) header() *agentdv1.AssistantMessage {
	return &agentdv1.AssistantMessage{
		Api: e.model.API, Provider: e.model.Provider, Model: e.model.ID,
		Usage:     &agentdv1.Usage{Cost: &agentdv1.Cost{}},
		Timestamp: timestamppb.New(e.now()),
	}
}

// Start yields the start event once; later calls are no-ops.
func (e *Emitter) Start() bool {
	if e.started {
		return !e.stopped
	}
	e.started = true
	return e.send(Event{Type: EventStart, Message: e.header()})
}

// Started reports whether the start event was sent.
func (e *Emitter) Started() bool { return e.started }

// Ended reports whether a terminal event was sent.
func (e *Emitter) Ended() bool { return e.ended }

// Blocks is the number of content blocks opened so far.
func (e *Emitter) Blocks() int { return len(e.blocks) }

func (e *Emitter) open(b *blockState, ev Event) (int, bool) {
	if !e.Start() {
		return -1, false
	}
	idx := len(e.blocks)
	e.blocks = append(e.blocks, b)
	ev.ContentIndex = idx
	return idx, e.send(ev)
}

// BeginText opens a text block and returns its content index.
func (e *Emitter) BeginText() (int, bool) {
	return e.open(&blockState{kind: BlockText}, Event{Type: EventTextStart})
}

// BeginThinking opens a thinking block; redacted blocks carry no text, only
// the encrypted payload set later with SetSignature.
func (e *Emitter) BeginThinking(redacted bool) (int, bool) {
	return e.open(&blockState{kind: BlockThinking}, Event{Type: EventThinkingStart, Redacted: redacted})
}

// BeginToolCall opens a tool call block.
func (e *Emitter) BeginToolCall(id, name string) (int, bool) {
	return e.open(&blockState{kind: BlockToolCall}, Event{Type: EventToolCallStart, ToolCallID: id, ToolName: name})
}

var deltaTypes = [...]EventType{BlockText: EventTextDelta, BlockThinking: EventThinkingDelta, BlockToolCall: EventToolCallDelta}

// Delta appends s to the open block at idx. Deltas to unknown or closed
// blocks are ignored: a confused wire stream never corrupts another block.
func (e *Emitter) Delta(idx int, s string) bool {
	if idx < 0 || idx >= len(e.blocks) || s == "" {
		return !e.stopped
	}
	b := e.blocks[idx]
	if b.closed {
		return !e.stopped
	}
	if b.kind == BlockToolCall {
		b.args.WriteString(s)
	}
	return e.send(Event{Type: deltaTypes[b.kind], ContentIndex: idx, Delta: s})
}

// AppendSignature adds to the block's signature without an event (Anthropic
// streams thinking signatures as deltas).
func (e *Emitter) AppendSignature(idx int, s string) {
	if idx >= 0 && idx < len(e.blocks) {
		e.partial.blocks[idx].signature += s
	}
}

// SetSignature replaces the block's signature.
func (e *Emitter) SetSignature(idx int, s string) {
	if idx >= 0 && idx < len(e.blocks) {
		e.partial.blocks[idx].signature = s
	}
}

// SetThoughtSignature sets a tool call's Gemini thought signature.
func (e *Emitter) SetThoughtSignature(idx int, s string) {
	if idx >= 0 && idx < len(e.blocks) {
		e.partial.blocks[idx].thoughtSignature = s
	}
}

// SetToolCallID replaces a tool call's id before it ends (the Responses API
// learns the item id after the call id).
func (e *Emitter) SetToolCallID(idx int, id string) {
	if idx >= 0 && idx < len(e.blocks) {
		e.partial.blocks[idx].id = id
	}
}

// Text returns what the block at idx has accumulated.
func (e *Emitter) Text(idx int) string {
	if idx < 0 || idx >= len(e.blocks) {
		return ""
	}
	if e.blocks[idx].kind == BlockToolCall {
		return e.blocks[idx].args.String()
	}
	return e.partial.blocks[idx].text.String()
}

// End closes the block at idx with its end event. Closing twice is a no-op.
func (e *Emitter) End(idx int) bool {
	if idx < 0 || idx >= len(e.blocks) {
		return !e.stopped
	}
	b := e.blocks[idx]
	if b.closed {
		return !e.stopped
	}
	b.closed = true
	pb := &e.partial.blocks[idx]
	switch b.kind {
	case BlockText:
		return e.send(Event{Type: EventTextEnd, ContentIndex: idx, Signature: pb.signature})
	case BlockThinking:
		return e.send(Event{Type: EventThinkingEnd, ContentIndex: idx, Signature: pb.signature})
	default:
		raw := b.args.String()
		if strings.TrimSpace(raw) == "" {
			raw = "{}"
		}
		call := &agentdv1.ToolCall{Id: pb.id, Name: pb.name, Arguments: ParseToolArguments(raw), ThoughtSignature: pb.thoughtSignature}
		ok := e.send(Event{Type: EventToolCallEnd, ContentIndex: idx, ToolCall: call})
		// The final message gets its own copy: the event's call travels on
		// (to the event log, to clients) while the consumer may change the
		// message's.
		pb.call = proto.Clone(call).(*agentdv1.ToolCall)
		return ok
	}
}

// EndAll closes every open block in index order.
func (e *Emitter) EndAll() bool {
	for i := range e.blocks {
		if !e.End(i) {
			return false
		}
	}
	return !e.stopped
}

// HasToolCalls reports whether a tool call block was opened.
func (e *Emitter) HasToolCalls() bool {
	for _, b := range e.blocks {
		if b.kind == BlockToolCall {
			return true
		}
	}
	return false
}

func (e *Emitter) final(stop agentdv1.StopReason, errMsg string) *agentdv1.AssistantMessage {
	m := e.header()
	m.Content = e.partial.Content()
	u := e.Usage
	if u.Total == 0 {
		u.Total = u.Input + u.Output + u.CacheRead + u.CacheWrite
	}
	m.Usage = &agentdv1.Usage{Input: u.Input, Output: u.Output, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite, TotalTokens: u.Total}
	ComputeCost(e.model.Price, m.Usage)
	m.StopReason = stop
	m.ErrorMessage = errMsg
	m.ResponseId = e.ResponseID
	return m
}

// Done closes open blocks and ends the stream successfully.
func (e *Emitter) Done(stop agentdv1.StopReason) {
	if e.ended {
		return
	}
	if !e.Start() || !e.EndAll() {
		return
	}
	e.ended = true
	m := e.final(stop, "")
	if IsFailedAnswer(m) {
		e.send(Event{Type: EventError, Message: m})
		return
	}
	e.send(Event{Type: EventDone, Message: m})
}

// Fail ends the stream with an ERROR message carrying errMsg and the partial
// content. retryAfter is the provider's requested wait, 0 when none.
func (e *Emitter) Fail(errMsg string, retryAfter time.Duration) {
	if e.ended {
		return
	}
	e.ended = true
	e.send(Event{Type: EventError, Message: e.final(agentdv1.StopReason_STOP_REASON_ERROR, errMsg), RetryAfter: retryAfter})
}

// Abort ends the stream with an ABORTED message keeping the partial content.
func (e *Emitter) Abort() {
	if e.ended {
		return
	}
	e.ended = true
	e.send(Event{Type: EventError, Message: e.final(agentdv1.StopReason_STOP_REASON_ABORTED, AbortedMessage)})
}

// FailOrAbort ends the stream as ABORTED when ctx was cancelled and as
// ERROR with errMsg otherwise: a cancelled request surfaces as a transport
// error from the SDK, and the caller's intent wins. A passed deadline is a
// timeout, an ERROR the retry policy may retry.
func (e *Emitter) FailOrAbort(ctx context.Context, errMsg string, retryAfter time.Duration) {
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		e.Abort()
	case ctx.Err() != nil:
		e.Fail(TimedOutPrefix+errMsg, 0)
	default:
		e.Fail(errMsg, retryAfter)
	}
}
