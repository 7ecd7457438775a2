package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// A call is in doubt when it started (a ToolCallStarted entry, written and
// committed before a side-effecting tool runs) and agentd stopped, or lost
// the run's lease, before its result was stored: its effect may or may not
// have happened. The repair of the interrupted run stores a ToolInDoubt
// entry for it instead of the "No result provided" a call that never
// started gets, and the session takes no run until ResolveInDoubt
// answered each such call (docs/ARCHITECTURE.md §3).

// SkippedInDoubtText is the result the model gets for a call in doubt
// that ResolveInDoubt skipped without a message of its own.
const SkippedInDoubtText = "The call was not retried: agentd stopped while it ran, so whether it took effect is unknown."

// IdempotencyKey is the key a call's effect is deduplicated by, the same
// for every attempt of the call: the ToolCallStarted entry, the
// tool_call_requested and approval_requested events and the _meta of an
// MCP tools/call carry it.
func IdempotencyKey(sessionID, runID, toolCallID string) string {
	return sessionID + "/" + runID + "/" + toolCallID
}

// idempotentTool is a tool that hands a call's idempotency key to whoever
// carries out its effect (an MCP server, a client).
type idempotentTool interface {
	ExecuteIdempotent(ctx context.Context, call agentloop.Call, key string) (agentloop.Result, error)
}

// durableTool is a side-effecting tool of a run: each call's start is
// stored, and committed, before the tool runs, so a crash during the call
// leaves it in doubt rather than unanswered.
type durableTool struct {
	agentloop.Tool
	run *Run
}

// Execute implements [agentloop.Tool].
func (t durableTool) Execute(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
	return t.executeKeyed(ctx, call, IdempotencyKey(t.run.sessionID, t.run.id, call.ID))
}

// executeKeyed records the call's start with key, then runs it with key.
func (t durableTool) executeKeyed(ctx context.Context, call agentloop.Call, key string) (agentloop.Result, error) {
	if err := t.run.recordStart(ctx, t.Definition().GetName(), call, key); err != nil {
		return agentloop.Result{}, fmt.Errorf("the call did not run: agentd could not record its start: %w", err)
	}
	if k, ok := t.Tool.(idempotentTool); ok {
		return k.ExecuteIdempotent(ctx, call, key)
	}
	return t.Tool.Execute(ctx, call)
}

// recordStart appends the ToolCallStarted entry of a call and returns once
// it is committed.
func (r *Run) recordStart(ctx context.Context, name string, call agentloop.Call, key string) error {
	e := &agentdv1.Entry{RunId: r.id, Payload: &agentdv1.Entry_ToolCallStarted{ToolCallStarted: &agentdv1.ToolCallStarted{
		ToolCallId: call.ID, ToolName: name, IdempotencyKey: key, Arguments: call.Args,
	}}}
	err := r.a.appendEntries(ctx, r.writer, r.sessionID, e)
	if errors.Is(err, persistence.ErrFenced) {
		r.leaseLost()
	}
	return err
}

// sideEffecting reports whether a tool of a kit may change something
// outside agentd: every tool but the built-ins that only read, server
// tools that say they only read, and the tools of MCP servers the
// operator marked read-only. Client tools always may.
func sideEffecting(t agentloop.Tool) bool {
	switch t := t.(type) {
	case sessionTool:
		return !readOnly(t.Tool)
	case clientTool:
		return true
	}
	return !readOnly(t)
}

// keyedTool is a read-only tool of a run that takes idempotency keys (the
// tool of a read-only MCP server): its calls carry their key too, though
// their start is not recorded.
type keyedTool struct {
	idempotentTool
	agentloop.Tool
	run *Run
}

// Execute implements [agentloop.Tool].
func (t keyedTool) Execute(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
	return t.ExecuteIdempotent(ctx, call, IdempotencyKey(t.run.sessionID, t.run.id, call.ID))
}

// ReadOnly reports that the tool only reads.
func (t keyedTool) ReadOnly() bool { return true }

// durableTools wraps the side-effecting tools of run r's kit in
// durableTool, and gives the others that take idempotency keys theirs.
func durableTools(r *Run, list []agentloop.Tool) []agentloop.Tool {
	out := make([]agentloop.Tool, len(list))
	for i, t := range list {
		out[i] = t
		if sideEffecting(t) {
			out[i] = durableTool{Tool: t, run: r}
		} else if k, ok := t.(idempotentTool); ok {
			out[i] = keyedTool{idempotentTool: k, Tool: t, run: r}
		}
	}
	return out
}

// inDoubtOn returns the ToolInDoubt entries of path that no later tool
// result answers, in path order.
func inDoubtOn(path []*agentdv1.Entry) []*agentdv1.Entry {
	var open []*agentdv1.Entry
	for _, e := range path {
		if d := e.GetToolInDoubt(); d != nil {
			open = append(open, e)
			continue
		}
		if tr := e.GetMessage().GetToolResult(); tr != nil && len(open) > 0 {
			for i, o := range open {
				if o.GetToolInDoubt().GetToolCallId() == tr.GetToolCallId() {
					open = append(open[:i:i], open[i+1:]...)
					break
				}
			}
		}
	}
	return open
}

func inDoubtCalls(entries []*agentdv1.Entry) []*agentdv1.ToolInDoubt {
	out := make([]*agentdv1.ToolInDoubt, len(entries))
	for i, e := range entries {
		out[i] = e.GetToolInDoubt()
	}
	return out
}

// inDoubtRefusal refuses a new run, or a change that would hide the
// calls, of a session with calls in doubt.
func inDoubtRefusal(sessionID, op string, doubt []*agentdv1.Entry) *Error {
	ids := make([]string, len(doubt))
	for i, e := range doubt {
		ids[i] = e.GetToolInDoubt().GetToolCallId()
	}
	return refuse(agentdv1.ErrorReason_ERROR_REASON_TOOL_CALLS_IN_DOUBT,
		"session %q has %d tool call(s) in doubt (%s): they started and never finished because agentd stopped, so their effect is unknown; "+
			"decide each with ResolveInDoubt (retry, skip or supply its result) before %s", sessionID, len(ids), strings.Join(ids, ", "), op).
		with("session_id", sessionID, "tool_call_ids", strings.Join(ids, ","))
}

// checkNotInDoubt refuses op on a session whose context path (what a run
// and a compaction read) holds calls in doubt.
func checkNotInDoubt(sessionID, op string, path []*agentdv1.Entry) error {
	if doubt := inDoubtOn(path); len(doubt) > 0 {
		return inDoubtRefusal(sessionID, op, doubt)
	}
	return nil
}

// checkStartInDoubt refuses a run of a session with calls in doubt on its
// current path, whichever entry the run hangs below: path is the run's
// context path, which is the session's own unless the request names
// another place. A retried request whose run was stored before the doubt
// arose gets that run (errStoredRun).
func (a *Agent) checkStartInDoubt(ctx context.Context, r *Run, req StartRequest, path []*agentdv1.Entry) error {
	if req.ParentEntryID != "" || req.FromRoot {
		var err error
		if path, err = a.store.ContextPath(ctx, r.sessionID); err != nil {
			return err
		}
	}
	err := checkNotInDoubt(r.sessionID, "a new run", path)
	if err == nil || req.RequestID == "" {
		return err
	}
	if _, gerr := a.store.GetRun(ctx, r.id); gerr == nil {
		return errStoredRun
	}
	return err
}

// InDoubt returns the calls of the session in doubt, in transcript order.
func (a *Agent) InDoubt(ctx context.Context, sessionID string) ([]*agentdv1.ToolInDoubt, error) {
	path, err := a.store.ContextPath(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	return inDoubtCalls(inDoubtOn(path)), nil
}

// InDoubtDecision is how ResolveInDoubt decides a call in doubt.
type InDoubtDecision struct {
	// Action is RETRY, SKIP or SUPPLY.
	Action agentdv1.InDoubtAction
	// Message is what the model sees for SKIP; empty gives
	// SkippedInDoubtText.
	Message string
	// Result is the call's result for SUPPLY.
	Result ToolResult
}

// ResolveInDoubt decides the call in doubt toolCallID of an idle session
// and stores the tool result that answers it: an error result for SKIP,
// the given one for SUPPLY, the result of running the call again (with
// its arguments and idempotency key, under the confinement of the
// session's runs, its start recorded first) for RETRY. It returns the
// stored entry and the calls still in doubt. A session with an active run
// is refused with ERROR_REASON_SESSION_BUSY, a call not in doubt with
// ERROR_REASON_NOT_IN_DOUBT; a RETRY of a client tool, of a tool the
// session no longer has or of a call whose arguments were redacted or no
// longer validate, with ERROR_REASON_FAILED_PRECONDITION saying to SKIP or
// SUPPLY instead. A RETRY cut off (the request cancelled, agentd stopped)
// stores no result: the call stays in doubt.
func (a *Agent) ResolveInDoubt(ctx context.Context, sessionID, toolCallID string, d InDoubtDecision) (*agentdv1.Entry, []*agentdv1.ToolInDoubt, error) {
	release, err := a.hold(ctx, sessionID, "ResolveInDoubt")
	if err != nil {
		return nil, nil, err
	}
	defer release()
	path, err := a.store.ContextPath(ctx, sessionID)
	if err != nil {
		return nil, nil, err
	}
	doubt := inDoubtOn(path)
	at := -1
	for i, e := range doubt {
		if e.GetToolInDoubt().GetToolCallId() == toolCallID {
			at = i
			break
		}
	}
	if at < 0 {
		return nil, nil, refuse(agentdv1.ErrorReason_ERROR_REASON_NOT_IN_DOUBT,
			"tool call %q of session %q is not in doubt; the calls in doubt are in the refusal of Prompt and the transcript's tool_in_doubt entries", truncate(toolCallID, 70), sessionID).
			with("tool_call_id", toolCallID)
	}
	call := doubt[at].GetToolInDoubt()
	result := &agentdv1.ToolResultMessage{ToolCallId: call.GetToolCallId(), ToolName: call.GetToolName()}
	switch d.Action {
	case agentdv1.InDoubtAction_IN_DOUBT_ACTION_SKIP:
		text := d.Message
		if text == "" {
			text = SkippedInDoubtText
		}
		result.Content, result.IsError = []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: text}}}}, true
	case agentdv1.InDoubtAction_IN_DOUBT_ACTION_SUPPLY:
		if len(d.Result.Content) == 0 {
			return nil, nil, invalid("content", "required with IN_DOUBT_ACTION_SUPPLY: the result the model sees")
		}
		result.Content, result.Details, result.IsError = d.Result.Content, d.Result.Details, d.Result.IsError
	case agentdv1.InDoubtAction_IN_DOUBT_ACTION_RETRY:
		res, err := a.retryInDoubt(ctx, sessionID, path, doubt[at])
		if err != nil {
			return nil, nil, err
		}
		result.Content, result.Details, result.IsError = res.Content, res.Details, res.IsError
	default:
		return nil, nil, invalid("action", "must be IN_DOUBT_ACTION_RETRY, IN_DOUBT_ACTION_SKIP or IN_DOUBT_ACTION_SUPPLY")
	}
	result.Timestamp = timestamppb.New(a.opts.Now())
	entry := &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: result}}}}
	// Not the request's context: a retried call ran, its result must not
	// be lost to a client that gave up at the last moment.
	if err := a.appendEntries(context.WithoutCancel(ctx), a.store, sessionID, entry); err != nil {
		return nil, nil, err
	}
	return entry, inDoubtCalls(append(doubt[:at:at], doubt[at+1:]...)), nil
}

// retryInDoubt runs a call in doubt again, as a run of the session would
// run it now: the session's tools (built-ins in its workspace, bash in its
// sandbox, its MCP servers) within the tenant's ceiling, the start
// recorded first with the call's idempotency key. The resolver's RETRY is
// the call's approval; a tool its policy denies now is not retried.
func (a *Agent) retryInDoubt(ctx context.Context, sessionID string, path []*agentdv1.Entry, e *agentdv1.Entry) (agentloop.Result, error) {
	call := e.GetToolInDoubt()
	name := call.GetToolName()
	instead := func(format string, args ...any) error {
		return refuse(agentdv1.ErrorReason_ERROR_REASON_FAILED_PRECONDITION, "tool call %q of session %q cannot be retried: %s; resolve it with IN_DOUBT_ACTION_SKIP or IN_DOUBT_ACTION_SUPPLY",
			call.GetToolCallId(), sessionID, fmt.Sprintf(format, args...)).with("tool_call_id", call.GetToolCallId())
	}
	if e.GetRedaction() != nil {
		return agentloop.Result{}, instead("its arguments were redacted")
	}
	sess, err := a.store.GetSession(ctx, sessionID)
	if err != nil {
		return agentloop.Result{}, err
	}
	cfg := sess.Config
	for _, t := range cfg.GetTools() {
		if t.GetName() == name && t.GetExecutor() == agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT {
			return agentloop.Result{}, instead("%s is a client tool, which agentd cannot run; run it in the client with idempotency key %q and pass its result with IN_DOUBT_ACTION_SUPPLY",
				name, call.GetIdempotencyKey())
		}
	}
	key := call.GetIdempotencyKey()
	if key == "" {
		key = IdempotencyKey(sessionID, call.GetRunId(), call.GetToolCallId())
	}
	// A stand-in run: the workspace and the writer the tools use, never
	// registered, so no event is published.
	r := &Run{a: a, id: call.GetRunId(), sessionID: sessionID, tenant: sess.Tenant, ctx: ctx, writer: a.store}
	defer func() {
		if r.ws != nil {
			r.ws.Close()
		}
	}()
	var offered mcpTools
	if len(cfg.GetMcpServers()) > 0 && a.opts.MCP != nil {
		stored, err := a.storedMCPTools(ctx, sessionID, "", cfg, path)
		if err != nil {
			return agentloop.Result{}, err
		}
		offered, _ = a.runMCPTools(ctx, sessionID, cfg, stored)
	}
	kit, err := a.toolKit(sess.Tenant, cfg, r, offered)
	if err != nil {
		return agentloop.Result{}, toolsUnusable(sessionID, err)
	}
	if kit.policies[name] == agentdv1.ApprovalPolicy_APPROVAL_POLICY_DENY {
		return agentloop.Result{}, instead("the session's approval policy denies %s", name)
	}
	tool, ok := kit.set.Tool(name)
	if !ok {
		return agentloop.Result{}, instead("the session has no tool %q now", name)
	}
	args, err := kit.set.ValidateArguments(name, call.GetArguments())
	if err != nil {
		return agentloop.Result{}, instead("%v", err)
	}
	if tr, ok := tool.(tracedTool); ok {
		tool = tr.Tool
	}
	c := agentloop.Call{ID: call.GetToolCallId(), Args: args, Update: func([]*agentdv1.ContentBlock, *structpb.Value) {}, Run: retryScope{}}
	var res agentloop.Result
	switch t := tool.(type) {
	case durableTool:
		res, err = t.executeKeyed(ctx, c, key)
	case keyedTool:
		// Read-only now (its server was marked so since): no start.
		res, err = t.ExecuteIdempotent(ctx, c, key)
	default:
		res, err = tool.Execute(ctx, c)
	}
	if ctx.Err() != nil {
		return agentloop.Result{}, fmt.Errorf("the retry of tool call %q was cut off (%w); it stays in doubt", call.GetToolCallId(), context.Cause(ctx))
	}
	if err != nil {
		// As the loop does: a tool's error is its error result.
		return agentloop.Result{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: err.Error()}}}}, IsError: true}, nil
	}
	return res, nil
}

// retryScope is the scope of a retried call: there is no run to add
// events or messages to.
type retryScope struct{}

// Emit implements [agentloop.Scope]: a retry has no event log.
func (retryScope) Emit(*agentdv1.AgentEvent) error { return nil }

// Record implements [agentloop.Scope].
func (retryScope) Record(*agentdv1.AgentMessage) error {
	return errors.New("a retried tool call cannot add messages to the transcript")
}
