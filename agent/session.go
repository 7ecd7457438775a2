package agent

import (
	"context"
	"fmt"

	"github.com/agentd/agentd/agent/contextview"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/provider"
)

// Context returns exactly what the session's next model call would
// receive (from leafEntryID instead of the leaf when it is set), with its
// token accounting: the compacted transcript path after
// the context policies and blocks, convertToLlm and the replay rules for
// the session's model, the system prompt and the tools. The context hook
// is not asked, and tool results carry no details (the model never sees
// them). It does not call the model.
func (a *Agent) Context(ctx context.Context, sessionID, leafEntryID string) (*ContextReport, error) {
	sess, err := a.store.GetSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	path, err := a.contextPathTo(ctx, sessionID, leafEntryID)
	if err != nil {
		return nil, err
	}
	stored, err := a.storedMCPTools(ctx, sessionID, leafEntryID, sess.Config, path)
	if err != nil {
		return nil, err
	}
	kit, err := a.toolKit(sess.Tenant, sess.Config, nil, a.contextMCPTools(ctx, sess.Config, stored))
	if err != nil {
		return nil, toolsUnusable(sessionID, err)
	}
	model, _, _, _ := a.modelFor(sess.Config) // a model no longer usable still names itself
	// A run with the session's default output schema offers the
	// finalizer tool, where its model answers through it.
	if out, err := newRunOutput(sess.Config, nil, model, len(kit.set.Definitions()) > 0, a.opts.Now); err == nil {
		if set, err := out.withTool(a.schemas, kit.set); err == nil {
			kit.set = set
		}
	}
	sh := newShaper(sess.Config, model)
	logFailure := func(stage string, err error) {
		a.opts.Logger.WarnContext(ctx, "context pipeline fell back", "session", sessionID, "stage", stage, "err", err)
	}
	shaped := sh.policies(contextview.FromPath(path), nil, logFailure)
	c := sh.assemble(shaped, kit.set)
	rep := &ContextReport{Context: c, MessageTokens: make([]int64, len(c.GetMessages())), ContextWindow: model.ContextWindow,
		CompactionThreshold: sh.threshold()}
	for i, m := range c.GetMessages() {
		rep.MessageTokens[i] = contextview.MessageTokens(m)
	}
	// The estimate a run's compaction decision uses, over the same items.
	est := sh.estimate(shaped)
	rep.TotalTokens = est.Total
	rep.WouldCompact = sh.wouldCompact(est)
	return rep, nil
}

// contextPathTo returns the part of the path to entry leaf (the session's
// leaf when empty) that a model context is built from: after a
// compaction, the summary's kept entries and what follows.
func (a *Agent) contextPathTo(ctx context.Context, sessionID, leaf string) ([]*agentdv1.Entry, error) {
	if leaf == "" {
		return a.store.ContextPath(ctx, sessionID)
	}
	full, err := a.store.PathTo(ctx, sessionID, leaf)
	if err != nil {
		return nil, err
	}
	return full[persistence.ContextStart(full):], nil
}

// AppendMessages appends messages to an idle session's transcript without
// running the agent, and returns the stored entries. The messages must be
// ones a conversation can hold: a tool result must answer a call of the
// last answer before it that has no result yet (a *FieldError naming the
// message otherwise). ErrBusy while a run is active.
func (a *Agent) AppendMessages(ctx context.Context, sessionID string, msgs []*agentdv1.AgentMessage) ([]*agentdv1.Entry, error) {
	release, err := a.hold(ctx, sessionID, "AppendMessages")
	if err != nil {
		return nil, err
	}
	defer release()
	// A tool result answers a call of the latest answer, and a call in
	// doubt is one of its calls too (no run starts while one is open), so
	// what follows that answer decides; a long session costs no more.
	tail, err := a.store.PathSinceAnswer(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if err := checkNotInDoubt(sessionID, "AppendMessages", tail); err != nil {
		return nil, err
	}
	if err := checkToolResults(transcriptMessages(tail), msgs); err != nil {
		return nil, err
	}
	entries := make([]*agentdv1.Entry, len(msgs))
	for i, m := range msgs {
		entries[i] = &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: m}}
	}
	if err := a.appendEntries(ctx, a.store, sessionID, entries...); err != nil {
		return nil, err
	}
	a.sessionChanged(ctx, sessionID, ChangeAppended, func(c *Change) { c.Entries = entries })
	return entries, nil
}

// hold reserves an idle session for op (AppendMessages, UpdateSession,
// Compact); release frees it.
func (a *Agent) hold(ctx context.Context, sessionID, op string) (release func(), err error) {
	remote, err := a.remoteRun(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	runID := ""
	if r := a.bySession[sessionID]; r != nil {
		runID = r.id
	} else if remote != nil {
		runID = remote.ID
	}
	if runID != "" {
		return nil, refuse(agentdv1.ErrorReason_ERROR_REASON_SESSION_BUSY,
			"session %q is running run %q: %s needs an idle session; use Steer or FollowUp, or wait for agent_end", sessionID, runID, op)
	}
	if a.appending[sessionID] {
		return nil, refuse(agentdv1.ErrorReason_ERROR_REASON_CONCURRENT_CHANGE, "session %q is being changed by another call; retry", sessionID)
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
