package service

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Defaults for how long a run waits for a client.
const (
	DefaultClientToolTimeout = 10 * time.Minute
	DefaultApprovalTimeout   = 10 * time.Minute
)

// waitKind says what a pending tool call waits for.
type waitKind int

const (
	waitClientResult waitKind = iota + 1
	waitApproval
)

// String names what a call waits for, for error messages.
func (k waitKind) String() string {
	if k == waitApproval {
		return "approval"
	}
	return "client tool result"
}

// pendingCall is one tool call waiting for a client's answer.
type pendingCall struct {
	kind   waitKind
	answer chan any // buffered: one answer
	// state is "waiting", "answered", "timed out" or "abandoned".
	state string
}

// pendingCalls are the tool calls of one run that wait for a client. Calls
// stay known after they stop waiting, so a late or duplicate answer gets a
// precise refusal rather than "unknown".
type pendingCalls struct {
	mu    sync.Mutex
	calls map[string]*pendingCall
}

func (p *pendingCalls) open(id string, kind waitKind) *pendingCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls == nil {
		p.calls = map[string]*pendingCall{}
	}
	c := &pendingCall{kind: kind, answer: make(chan any, 1), state: "waiting"}
	p.calls[id] = c
	return c
}

// stop records why a call no longer waits, unless it was answered.
func (p *pendingCalls) stop(c *pendingCall, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.state == "waiting" {
		c.state = why
	}
}

// deliver hands an answer to a waiting call.
func (p *pendingCalls) deliver(sessionID, id string, kind waitKind, v any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.calls[id]
	if c == nil || c.kind != kind {
		return status.Errorf(codes.NotFound, "tool call %q of session %q is not waiting for a %s", id, sessionID, kind)
	}
	if c.state != "waiting" {
		return status.Errorf(codes.FailedPrecondition, "tool call %q of session %q no longer waits for a %s: it was %s", id, sessionID, kind, c.state)
	}
	c.state = "answered"
	c.answer <- v
	return nil
}

// clientTool is a tool the client runs: the run asks for it with
// tool_call_requested and waits for SubmitToolResult.
type clientTool struct {
	def     *agentdv1.Tool
	run     *runHandle
	timeout time.Duration
	now     func() time.Time
}

// Definition implements agentloop.Tool.
func (t clientTool) Definition() *agentdv1.Tool { return t.def }

// Execute implements agentloop.Tool.
func (t clientTool) Execute(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
	id, args := call.ID, call.Args
	if t.run == nil {
		return agentloop.Result{}, fmt.Errorf("client tool %s cannot run outside a run", t.def.GetName())
	}
	c := t.run.pending.open(id, waitClientResult)
	timer := time.NewTimer(t.timeout)
	defer timer.Stop()
	if err := call.Run.Emit(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_ToolCallRequested{ToolCallRequested: &agentdv1.ToolCallRequested{
		ToolCallId: id, ToolName: t.def.GetName(), Arguments: args, Deadline: timestamp(t.now().Add(t.timeout)),
	}}}); err != nil {
		t.run.pending.stop(c, "abandoned")
		return agentloop.Result{}, err
	}
	select {
	case a := <-c.answer:
		r := a.(*agentdv1.SubmitToolResultRequest)
		return agentloop.Result{Content: r.GetContent(), Details: r.GetDetails(), IsError: r.GetIsError()}, nil
	case <-timer.C:
		t.run.pending.stop(c, "timed out")
		return agentloop.Result{}, fmt.Errorf("the client did not return a result for %s within %v (client_tool_timeout)", t.def.GetName(), t.timeout)
	case <-ctx.Done():
		t.run.pending.stop(c, "abandoned when the run was aborted")
		return agentloop.Result{}, fmt.Errorf("the run was aborted while waiting for the client's result of %s", t.def.GetName())
	}
}

// gatedTool asks for approval (or applies a deny policy) before the tool it
// wraps runs, and records the decision as an ApprovalNotice in the
// transcript before the tool runs or is refused. The wait happens when the
// call executes, so in parallel mode a call waiting for approval does not
// hold back the other calls of its batch.
type gatedTool struct {
	agentloop.Tool
	policy         agentdv1.ApprovalPolicy
	run            *runHandle
	timeout        time.Duration
	includeInModel bool
	now            func() time.Time
}

// Execute implements agentloop.Tool.
func (g gatedTool) Execute(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
	id, args := call.ID, call.Args
	name := g.Definition().GetName()
	if g.policy == agentdv1.ApprovalPolicy_APPROVAL_POLICY_DENY {
		if err := g.record(call.Run, id, agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED, "policy", "the session's approval policy denies "+name); err != nil {
			return agentloop.Result{}, err
		}
		return agentloop.Result{}, fmt.Errorf("Tool call denied by policy: %s is not allowed in this session", name)
	}
	if g.run == nil {
		return agentloop.Result{}, fmt.Errorf("tool %s needs approval, which needs a run", name)
	}
	c := g.run.pending.open(id, waitApproval)
	timer := time.NewTimer(g.timeout)
	defer timer.Stop()
	if err := call.Run.Emit(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_ApprovalRequested{ApprovalRequested: &agentdv1.ApprovalRequested{
		ToolCallId: id, ToolName: name, Arguments: args, Deadline: timestamp(g.now().Add(g.timeout)),
	}}}); err != nil {
		g.run.pending.stop(c, "abandoned")
		return agentloop.Result{}, err
	}
	select {
	case a := <-c.answer:
		d := a.(*agentdv1.ResolveApprovalRequest)
		by := d.GetDecidedBy()
		if by == "" {
			by = "user"
		}
		if err := g.record(call.Run, id, d.GetDecision(), by, d.GetReason()); err != nil {
			return agentloop.Result{}, err
		}
		if d.GetDecision() != agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED {
			text := "The user denied this tool call"
			if d.GetReason() != "" {
				text += ": " + d.GetReason()
			}
			return agentloop.Result{}, fmt.Errorf("%s", text)
		}
		return g.Tool.Execute(ctx, call)
	case <-timer.C:
		g.run.pending.stop(c, "timed out")
		if err := g.record(call.Run, id, agentdv1.ApprovalDecision_APPROVAL_DECISION_TIMED_OUT, "timeout", ""); err != nil {
			return agentloop.Result{}, err
		}
		return agentloop.Result{}, fmt.Errorf("no approval for %s within %v (approval_timeout); the tool did not run", name, g.timeout)
	case <-ctx.Done():
		g.run.pending.stop(c, "abandoned when the run was aborted")
		return agentloop.Result{}, fmt.Errorf("the run was aborted while %s waited for approval; the tool did not run", name)
	}
}

func (g gatedTool) record(run agentloop.Scope, id string, d agentdv1.ApprovalDecision, by, reason string) error {
	return run.Record(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ApprovalNotice{ApprovalNotice: &agentdv1.ApprovalNotice{
		ToolCallId: id, ToolName: g.Definition().GetName(), Decision: d, Reason: reason, DecidedBy: by,
		Timestamp: timestamp(g.now()), VisibleInUi: true, IncludeInModelContext: g.includeInModel,
	}}})
}

// readOnly reports whether a server tool only reads: such tools run
// without approval unless a session asks otherwise.
func readOnly(t agentloop.Tool) bool {
	ro, ok := t.(interface{ ReadOnly() bool })
	return ok && ro.ReadOnly()
}

// SubmitToolResult implements agentdv1.AgentServiceServer.
func (s *Service) SubmitToolResult(ctx context.Context, req *agentdv1.SubmitToolResultRequest) (*agentdv1.SubmitToolResultResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if req.GetToolCallId() == "" {
		return nil, invalid("tool_call_id", "required: the id from the tool_call_requested event")
	}
	if err := s.limits.checkContent("content", req.GetContent(), userBlocks, false); err != nil {
		return nil, err
	}
	h := s.runs.active(req.GetSessionId())
	if h == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "session %q has no active run, so no tool call waits for a result", req.GetSessionId())
	}
	if err := h.pending.deliver(req.GetSessionId(), req.GetToolCallId(), waitClientResult, req); err != nil {
		return nil, err
	}
	return &agentdv1.SubmitToolResultResponse{}, nil
}

// ResolveApproval implements agentdv1.AgentServiceServer.
func (s *Service) ResolveApproval(ctx context.Context, req *agentdv1.ResolveApprovalRequest) (*agentdv1.ResolveApprovalResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if req.GetToolCallId() == "" {
		return nil, invalid("tool_call_id", "required: the id from the approval_requested event")
	}
	switch req.GetDecision() {
	case agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED, agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED:
	default:
		return nil, invalid("decision", "must be APPROVAL_DECISION_ALLOWED or APPROVAL_DECISION_DENIED")
	}
	if len(req.GetReason()) > 4096 {
		return nil, invalid("reason", "%d bytes exceed the limit of 4096", len(req.GetReason()))
	}
	if len(req.GetDecidedBy()) > 128 {
		return nil, invalid("decided_by", "%d bytes exceed the limit of 128", len(req.GetDecidedBy()))
	}
	h := s.runs.active(req.GetSessionId())
	if h == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "session %q has no active run, so no tool call waits for approval", req.GetSessionId())
	}
	if err := h.pending.deliver(req.GetSessionId(), req.GetToolCallId(), waitApproval, req); err != nil {
		return nil, err
	}
	return &agentdv1.ResolveApprovalResponse{}, nil
}
