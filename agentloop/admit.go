package agentloop

import (
	"context"
	"fmt"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// MessageSource says where a user-side message that is about to enter the
// transcript comes from.
type MessageSource int

// The sources of messages AdmitMessage is asked about.
const (
	// SourcePrompt is a prompt of Run.
	SourcePrompt MessageSource = iota + 1
	// SourceSteering is a message taken from the steering queue.
	SourceSteering
	// SourceFollowUp is a message taken from the follow-up queue.
	SourceFollowUp
)

// String names the source as the wire does ("prompt", "steer",
// "follow_up").
func (s MessageSource) String() string {
	switch s {
	case SourcePrompt:
		return "prompt"
	case SourceSteering:
		return "steer"
	case SourceFollowUp:
		return "follow_up"
	}
	return fmt.Sprintf("source(%d)", int(s))
}

// AdmitInfo is what AdmitMessage sees.
type AdmitInfo struct {
	// Message is about to enter the transcript.
	Message *agentdv1.AgentMessage
	// Source says where it comes from.
	Source MessageSource
	// Messages is the run's transcript so far; read-only.
	Messages []*agentdv1.AgentMessage
	// Run is the run the message would join; a hook records what it
	// decided through it.
	Run Scope
}

// Admission is AdmitMessage's answer.
type Admission struct {
	// Drop keeps the message out of the transcript. A run whose prompts
	// are all dropped ends without calling the model; a dropped queued
	// message is as if it had never been queued.
	Drop bool
	// After are messages recorded right after an admitted message (a
	// record of the decision); ignored when Drop is set.
	After []*agentdv1.AgentMessage
}

// AdmitFunc decides whether a prompt, steering or follow-up message
// enters the transcript. It runs in the loop's goroutine just before the
// message would be delivered and may block (a client's hook); it must
// return promptly once ctx is cancelled. A returned error ends the run
// with it (a fatal error event, agent_end ERROR).
type AdmitFunc func(ctx context.Context, info AdmitInfo) (Admission, error)

// StopInfo is what BeforeStop sees.
type StopInfo struct {
	// Message is the answer the run would end with.
	Message *agentdv1.AssistantMessage
	// Messages is the run's transcript so far; read-only.
	Messages []*agentdv1.AgentMessage
	// Run is the run about to end; a hook records what it decided
	// through it.
	Run Scope
}

// BeforeStopFunc is asked when a run would end normally: the model
// answered without tool calls and no steering or follow-up message waits.
// Messages it returns continue the run as follow-ups do; none lets it
// end. It is not asked when ShouldStopAfterTurn ends the run, nor after a
// failed or aborted answer. A returned error ends the run with it.
type BeforeStopFunc func(ctx context.Context, info StopInfo) ([]*agentdv1.AgentMessage, error)

// admit asks AdmitMessage about each message and returns what enters the
// transcript, in order (each admitted message followed by its After
// messages), and how many of msgs were admitted.
func (r *run) admit(msgs []*agentdv1.AgentMessage, source MessageSource) ([]*agentdv1.AgentMessage, int, error) {
	if r.cfg.AdmitMessage == nil || len(msgs) == 0 {
		return msgs, len(msgs), nil
	}
	var out []*agentdv1.AgentMessage
	n := 0
	for _, m := range msgs {
		r.recordMu.Lock()
		seen := r.messages
		r.recordMu.Unlock()
		a, err := safeAdmit(r.ctx, r.cfg.AdmitMessage, AdmitInfo{Message: m, Source: source, Messages: seen, Run: scope{r}})
		if err != nil {
			return nil, 0, err
		}
		if a.Drop {
			continue
		}
		out = append(out, m)
		out = append(out, a.After...)
		n++
	}
	return out, n, nil
}

// takeQueued drains q and admits what it took; when every message taken
// is dropped it drains again, so a dropped message never takes the place
// of one still waiting (one-at-a-time mode).
func (r *run) takeQueued(q *Queue, source MessageSource) ([]*agentdv1.AgentMessage, error) {
	for {
		msgs := q.Drain()
		if len(msgs) == 0 {
			return nil, nil
		}
		out, n, err := r.admit(msgs, source)
		if err != nil || n > 0 {
			return out, err
		}
	}
}

// beforeStop asks BeforeStop whether the run that would end now goes on.
func (r *run) beforeStop() ([]*agentdv1.AgentMessage, error) {
	last := r.lastAssistant
	if r.cfg.BeforeStop == nil || r.ctx.Err() != nil || last == nil || len(toolCalls(last)) > 0 {
		return nil, nil
	}
	r.recordMu.Lock()
	seen := r.messages
	r.recordMu.Unlock()
	return safeStop(r.ctx, r.cfg.BeforeStop, StopInfo{Message: last, Messages: seen, Run: scope{r}})
}

func safeAdmit(ctx context.Context, f AdmitFunc, info AdmitInfo) (a Admission, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("admitMessage panicked: %v", p)
		}
	}()
	return f(ctx, info)
}

func safeStop(ctx context.Context, f BeforeStopFunc, info StopInfo) (msgs []*agentdv1.AgentMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("beforeStop panicked: %v", p)
		}
	}()
	return f(ctx, info)
}
