package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agent/contextview"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// waitKind says what a pending tool call waits for.
type waitKind int

const (
	waitClientResult waitKind = iota + 1
	waitApproval
	// waitContext is a context hook's request, answered by SubmitContext.
	waitContext
	// waitHook is a lifecycle hook's request, answered by
	// SubmitHookResult.
	waitHook
)

// String names what a call waits for, for error messages.
func (k waitKind) String() string {
	switch k {
	case waitApproval:
		return "approval"
	case waitContext:
		return "context"
	case waitHook:
		return "hook result"
	}
	return "client tool result"
}

// pendingCall is one tool call waiting for a client's answer.
type pendingCall struct {
	id     string
	kind   waitKind
	answer chan any // buffered: one answer
	// state is "waiting", "answered", "timed out" or "abandoned ...".
	state string
	// offered are the items a context request offered (waitContext).
	offered []contextview.Item
	// tool and args are the call's tool and validated arguments
	// (waitApproval), which a resolution is checked against.
	tool string
	args *structpb.Struct
	// hook is what a lifecycle hook's request asked (waitHook).
	hook *agentdv1.HookRequested
}

// pendingCalls are the tool calls of one run that wait for a client. Calls
// stay known after they stop waiting, so a late or duplicate answer gets a
// precise refusal rather than "unknown".
type pendingCalls struct {
	mu    sync.Mutex
	calls map[string]*pendingCall
	// settled, when set, learns of each call that stops waiting (for
	// ListPendingInteractions and its watchers).
	settled func(id string, kind waitKind)
}

func (p *pendingCalls) open(id string, kind waitKind) *pendingCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls == nil {
		p.calls = map[string]*pendingCall{}
	}
	c := &pendingCall{id: id, kind: kind, answer: make(chan any, 1), state: "waiting"}
	p.calls[id] = c
	return c
}

// stop records why a call no longer waits, unless it was answered; it
// reports whether it stopped the wait (false: the answer is in c.answer).
func (p *pendingCalls) stop(c *pendingCall, why string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.state == "waiting" {
		c.state = why
		p.settle(c)
		return true
	}
	return false
}

// settle tells p.settled that c no longer waits; p.mu is held.
func (p *pendingCalls) settle(c *pendingCall) {
	if p.settled != nil {
		p.settled(c.id, c.kind)
	}
}

// deliver hands an answer to a waiting call.
func (p *pendingCalls) deliver(sessionID, id string, kind waitKind, v any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, err := p.waitingLocked(sessionID, id, kind)
	if err != nil {
		return err
	}
	c.state = "answered"
	c.answer <- v
	if p.settled != nil {
		p.settled(id, kind)
	}
	return nil
}

// waitingLocked returns the call id of kind that still waits, or the
// refusal an answer to it gets: NOT_WAITING when nothing of that kind has
// the id, ANSWER_TOO_LATE when it stopped waiting. p.mu is held.
func (p *pendingCalls) waitingLocked(sessionID, id string, kind waitKind) (*pendingCall, error) {
	c := p.calls[id]
	if c == nil || c.kind != kind {
		return nil, refuse(agentdv1.ErrorReason_ERROR_REASON_NOT_WAITING, "%s %q of session %q is not waiting for a %s", kind.subject(), id, sessionID, kind).with("id", id)
	}
	if c.state != "waiting" {
		return nil, refuse(agentdv1.ErrorReason_ERROR_REASON_ANSWER_TOO_LATE, "%s %q of session %q no longer waits for a %s: it was %s", kind.subject(), id, sessionID, kind, c.state).with("id", id)
	}
	return c, nil
}

// subject names what waits: a tool call, a context or a hook request.
func (k waitKind) subject() string {
	switch k {
	case waitContext:
		return "context request"
	case waitHook:
		return "hook request"
	}
	return "tool call"
}

// offered returns what a waiting context request offered.
func (p *pendingCalls) offered(sessionID, id string) ([]contextview.Item, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, err := p.waitingLocked(sessionID, id, waitContext)
	if err != nil {
		return nil, err
	}
	return c.offered, nil
}

// ToolResult is a client's answer to a client-executed tool call.
type ToolResult struct {
	// Content is what the model sees.
	Content []*agentdv1.ContentBlock
	// Details is for user interfaces and logs.
	Details *structpb.Value
	// IsError marks the result as a failure.
	IsError bool
}

// Approval is a person's decision on a tool call that waits for approval.
type Approval struct {
	// Allowed lets the call run; otherwise it is denied.
	Allowed bool
	// Reason is the person's explanation, for the model and the record.
	Reason string
	// DecidedBy names who decided; empty means "user".
	DecidedBy string
	// Scope is how far the decision reaches; unset means CALL. RUN and
	// SESSION make a rule (Rule's pattern, or the whole tool) that decides
	// the later calls of the tool without asking: in memory for the rest
	// of the run, or stored as an ApprovalRule entry of the session.
	Scope agentdv1.ApprovalScope
	// Arguments, with Allowed, replace the model's arguments of the call;
	// they must fit the tool's schema (a *FieldError naming the field
	// otherwise, and the call keeps waiting).
	Arguments *structpb.Struct
	// Rule limits a RUN or SESSION scope to the calls it matches; its
	// tool_name must be the call's. agentd sets its id, decision,
	// created_by and created (reason: the rule's, or Reason).
	Rule *agentdv1.ApprovalRule
	// ToolCallIDs are more calls of the run decided the same way: every
	// one must wait for approval, or nothing is decided.
	ToolCallIDs []string
}

// clientTool is a tool the client runs: the run asks for it with
// tool_call_requested and waits for SubmitToolResult.
type clientTool struct {
	def     *agentdv1.Tool
	run     *Run
	timeout time.Duration
	now     func() time.Time
}

// Definition implements [agentloop.Tool].
func (t clientTool) Definition() *agentdv1.Tool { return t.def }

// Execute implements [agentloop.Tool].
func (t clientTool) Execute(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
	if t.run == nil {
		return agentloop.Result{}, fmt.Errorf("client tool %s cannot run outside a run", t.def.GetName())
	}
	return t.ExecuteIdempotent(ctx, call, IdempotencyKey(t.run.sessionID, t.run.id, call.ID))
}

// ExecuteIdempotent is Execute with the call's idempotency key, which the
// tool_call_requested event carries to the client.
func (t clientTool) ExecuteIdempotent(ctx context.Context, call agentloop.Call, key string) (agentloop.Result, error) {
	if t.run == nil {
		return agentloop.Result{}, fmt.Errorf("client tool %s cannot run outside a run", t.def.GetName())
	}
	c := t.run.pending.open(call.ID, waitClientResult)
	timer := time.NewTimer(t.timeout)
	defer timer.Stop()
	if err := call.Run.Emit(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_ToolCallRequested{ToolCallRequested: &agentdv1.ToolCallRequested{
		ToolCallId: call.ID, ToolName: t.def.GetName(), Arguments: call.Args, Deadline: timestamppb.New(t.now().Add(t.timeout)),
		IdempotencyKey: key,
	}}}); err != nil {
		t.run.pending.stop(c, "abandoned")
		return agentloop.Result{}, err
	}
	select {
	case a := <-c.answer:
		r := a.(ToolResult)
		return agentloop.Result{Content: r.Content, Details: r.Details, IsError: r.IsError}, nil
	case <-timer.C:
		t.run.pending.stop(c, "timed out")
		return agentloop.Result{}, fmt.Errorf("the client did not return a result for %s within %v (client_tool_timeout)", t.def.GetName(), t.timeout)
	case <-ctx.Done():
		t.run.pending.stop(c, "abandoned when the run was aborted")
		return agentloop.Result{}, fmt.Errorf("the run was aborted while waiting for the client's result of %s", t.def.GetName())
	}
}

// approvalGate is the BeforeToolCall hook of a run: it applies the deny
// policy, or asks for approval and waits for ResolveApproval, and records
// the decision as an ApprovalNotice in the transcript before the tool runs
// or is refused. It runs in the call's own goroutine (agentloop), so in
// parallel mode a call waiting for approval does not hold back the other
// calls of its batch.
type approvalGate struct {
	run            *Run
	policies       map[string]agentdv1.ApprovalPolicy
	timeout        time.Duration
	includeInModel bool
	now            func() time.Time
}

// before implements [agentloop.BeforeToolCallFunc]. A call the session's
// policy (or the ceiling) makes ask is first matched against the approval
// rules in force (agent/rules.go): a matching rule decides it without an
// event. Otherwise it emits approval_requested and waits.
func (g approvalGate) before(ctx context.Context, info agentloop.ToolCallInfo) (agentloop.BeforeDecision, error) {
	name, id := info.ToolCall.GetName(), info.ToolCall.GetId()
	switch g.policies[name] {
	case agentdv1.ApprovalPolicy_APPROVAL_POLICY_DENY:
		n := &agentdv1.ApprovalNotice{ToolCallId: id, ToolName: name, Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED,
			DecidedBy: "policy", Reason: "the session's approval policy denies " + name}
		if err := g.record(info.Run, n); err != nil {
			return agentloop.BeforeDecision{}, err
		}
		return agentloop.BeforeDecision{Block: true, Reason: "Tool call denied by policy: " + name + " is not allowed in this session"}, nil
	case agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK:
	default:
		return agentloop.BeforeDecision{}, nil
	}
	if rule := g.ruleDecision(ctx, name, info.Args); rule != nil {
		return g.decideByRule(info.Run, id, name, rule)
	}
	c := g.run.pending.openApproval(id, name, info.Args)
	timer := time.NewTimer(g.timeout)
	defer timer.Stop()
	if err := info.Run.Emit(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_ApprovalRequested{ApprovalRequested: g.approvalRequested(id, name, info.Args)}}); err != nil {
		g.run.pending.stop(c, "abandoned")
		return agentloop.BeforeDecision{}, err
	}
	select {
	case a := <-c.answer:
		return g.decided(info.Run, id, name, a.(approvalAnswer))
	case <-timer.C:
		if !g.run.pending.stop(c, "timed out") {
			// Answered as the timer fired: the answer stands.
			return g.decided(info.Run, id, name, (<-c.answer).(approvalAnswer))
		}
		n := &agentdv1.ApprovalNotice{ToolCallId: id, ToolName: name, Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_TIMED_OUT, DecidedBy: "timeout"}
		if err := g.record(info.Run, n); err != nil {
			return agentloop.BeforeDecision{}, err
		}
		return agentloop.BeforeDecision{Block: true, Reason: fmt.Sprintf("no approval for %s within %v (approval_timeout); the tool did not run", name, g.timeout)}, nil
	case <-ctx.Done():
		g.run.pending.stop(c, "abandoned when the run was aborted")
		return agentloop.BeforeDecision{Block: true, Reason: fmt.Sprintf("the run was aborted while %s waited for approval; the tool did not run", name)}, nil
	}
}

// record stores n, stamped, as the call's ApprovalNotice; scope CALL
// unless the decision said otherwise.
func (g approvalGate) record(run agentloop.Scope, n *agentdv1.ApprovalNotice) error {
	if n.Scope == agentdv1.ApprovalScope_APPROVAL_SCOPE_UNSPECIFIED {
		n.Scope = agentdv1.ApprovalScope_APPROVAL_SCOPE_CALL
	}
	n.Timestamp, n.VisibleInUi, n.IncludeInModelContext = timestamppb.New(g.now()), true, g.includeInModel
	return run.Record(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ApprovalNotice{ApprovalNotice: n}})
}
