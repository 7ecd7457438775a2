package agent

import (
	"context"
	"fmt"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

// Context returns exactly what the session's next model call would
// receive: the transcript path after transformContext, convertToLlm and
// the replay rules for the session's model, the system prompt and the
// tools. It does not call the model.
func (a *Agent) Context(ctx context.Context, sessionID string) (*agentdv1.Context, error) {
	sess, err := a.store.GetSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	kit, err := a.toolKit(sess.Config, nil)
	if err != nil {
		return nil, refuse(ErrPrecondition, "session %q: its tools cannot be used now: %v", sessionID, err)
	}
	path, err := a.store.Path(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	model, _, _, _ := a.modelFor(sess.Config) // a model no longer usable still names itself
	state := agentloop.State{SystemPrompt: sess.Config.GetSystemPrompt(), Messages: transcriptMessages(path), Tools: kit.set}
	c, failures := agentloop.BuildContext(ctx, state, agentloop.Config{Model: model})
	for _, f := range failures {
		a.opts.Logger.WarnContext(ctx, "context pipeline fell back", "session", sessionID, "err", f)
	}
	return c, nil
}

// AppendMessages appends messages to an idle session's transcript without
// running the agent, and returns the stored entries. The messages must be
// ones a conversation can hold: a tool result must answer a call of the
// last answer before it that has no result yet (a *FieldError naming the
// message otherwise). ErrBusy while a run is active.
func (a *Agent) AppendMessages(ctx context.Context, sessionID string, msgs []*agentdv1.AgentMessage) ([]*agentdv1.Entry, error) {
	release, err := a.hold(sessionID)
	if err != nil {
		return nil, err
	}
	defer release()
	path, err := a.store.Path(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if err := checkToolResults(transcriptMessages(path), msgs); err != nil {
		return nil, err
	}
	entries := make([]*agentdv1.Entry, len(msgs))
	for i, m := range msgs {
		entries[i] = &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: m}}
	}
	if err := a.appendEntries(ctx, sessionID, entries...); err != nil {
		return nil, err
	}
	return entries, nil
}

// hold reserves an idle session for AppendMessages; release frees it.
func (a *Agent) hold(sessionID string) (release func(), err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.bySession[sessionID]; r != nil {
		return nil, refuse(ErrBusy,
			"session %q is running run %q: AppendMessages needs an idle session; use Steer or FollowUp, or wait for agent_end", sessionID, r.id)
	}
	if a.appending[sessionID] {
		return nil, refuse(ErrConflict, "session %q is being appended to by another call; retry", sessionID)
	}
	a.appending[sessionID] = true
	return func() {
		a.mu.Lock()
		delete(a.appending, sessionID)
		a.mu.Unlock()
	}, nil
}

// checkToolResults refuses tool results that answer no open call: each
// must answer, once, a call of the last answer before it (on the path or
// earlier in the batch) that did not fail, with the call's tool name.
func checkToolResults(path, batch []*agentdv1.AgentMessage) error {
	open := map[string]string{} // call id → tool name
	consider := func(m *agentdv1.AgentMessage) {
		a := m.GetAssistant()
		if a == nil {
			return
		}
		clear(open)
		if provider.IsFailedAnswer(a) {
			return // replay leaves it out: its calls cannot be answered
		}
		for _, b := range a.GetContent() {
			if tc := b.GetToolCall(); tc != nil {
				open[tc.GetId()] = tc.GetName()
			}
		}
	}
	for _, m := range path {
		consider(m)
		if tr := m.GetToolResult(); tr != nil {
			delete(open, tr.GetToolCallId())
		}
	}
	for i, m := range batch {
		consider(m)
		tr := m.GetToolResult()
		if tr == nil {
			continue
		}
		field := fmt.Sprintf("messages[%d].tool_result", i)
		name, ok := open[tr.GetToolCallId()]
		if !ok {
			return invalid(field+".tool_call_id", "%q answers no tool call of the last answer that is still waiting for a result; append the assistant message with that call first, and answer each call once",
				truncate(tr.GetToolCallId(), 70))
		}
		if tr.GetToolName() != name {
			return invalid(field+".tool_name", "%q, but call %q is to %q", truncate(tr.GetToolName(), 70), tr.GetToolCallId(), name)
		}
		delete(open, tr.GetToolCallId())
	}
	return nil
}
