package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/replicapb"
	"github.com/agentd/agentd/persistence"
)

// runApprovals is what a run's approvals need beyond the waits: the rules
// of scope RUN (in memory, gone with the run), and, set once at launch
// before the loop starts, the run's tools (to validate edited arguments),
// its tenant's ceiling and its workspace root (for path globs).
type runApprovals struct {
	mu    sync.Mutex
	rules []*agentdv1.ApprovalRule

	tools   *agentloop.ToolSet
	ceiling Ceiling
	root    string
}

func (ra *runApprovals) runRules() []*agentdv1.ApprovalRule {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	return ra.rules[:len(ra.rules):len(ra.rules)]
}

func (ra *runApprovals) addRunRule(rule *agentdv1.ApprovalRule) {
	ra.mu.Lock()
	ra.rules = append(ra.rules, rule)
	ra.mu.Unlock()
}

// approvalAnswer is what ResolveApproval delivers to a waiting call: the
// decision, the rule it created (scope RUN or SESSION), and the validated
// arguments the call runs with instead of the model's.
type approvalAnswer struct {
	Approval
	rule *agentdv1.ApprovalRule
	args *structpb.Struct
}

// openApproval opens the wait of a call for approval, knowing its tool and
// arguments so a resolution can be checked against them.
func (p *pendingCalls) openApproval(id, tool string, args *structpb.Struct) *pendingCall {
	c := p.open(id, waitApproval)
	p.mu.Lock()
	c.tool, c.args = tool, args
	p.mu.Unlock()
	return c
}

// resolveApproval carries out a ResolveApproval on run r: every call named
// must wait for approval here, or nothing is decided; a rule must suit the
// calls' tool and the ceiling; edited arguments must pass the tool's
// schema (the call keeps waiting otherwise). A SESSION scope stores its
// rule before any call is told, and returns it. The waits stay locked
// throughout, so a call cannot time out between the checks and its answer.
func (r *Run) resolveApproval(ctx context.Context, ap *replicapb.ReplicaApproval) (*agentdv1.ApprovalRule, error) {
	sid := r.sessionID
	ids := append([]string{ap.GetToolCallId()}, ap.GetToolCallIds()...)
	p := &r.pending
	p.mu.Lock()
	defer p.mu.Unlock()
	calls := make([]*pendingCall, len(ids))
	for i, id := range ids {
		c, err := p.waitingLocked(sid, id, waitApproval)
		if err != nil {
			var refusal *Error
			if errors.As(err, &refusal) {
				refusal.Message += "; nothing was decided"
				refusal.with("tool_call_id", id, "session_id", sid)
			}
			return nil, err
		}
		calls[i] = c
	}
	tool := calls[0].tool
	allowed := ap.GetAllowed()
	decision := agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED
	if allowed {
		decision = agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED
	}
	by := ap.GetDecidedBy()
	if by == "" {
		by = "user"
	}
	scope := ap.GetScope()
	if scope == agentdv1.ApprovalScope_APPROVAL_SCOPE_UNSPECIFIED {
		scope = agentdv1.ApprovalScope_APPROVAL_SCOPE_CALL
	}
	var rule *agentdv1.ApprovalRule
	switch scope {
	case agentdv1.ApprovalScope_APPROVAL_SCOPE_CALL:
		if ap.GetRule() != nil {
			return nil, invalid("rule", "only with scope RUN or SESSION; a decision of scope CALL makes no rule")
		}
	case agentdv1.ApprovalScope_APPROVAL_SCOPE_RUN, agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION:
		rule = &agentdv1.ApprovalRule{ToolName: tool}
		if given := ap.GetRule(); given != nil {
			if given.GetToolName() != tool {
				return nil, invalid("rule.tool_name", "%q, but call %q is to %q; a rule applies to the tool of the call it decides", given.GetToolName(), ids[0], tool)
			}
			rule.CommandPrefix, rule.PathGlob, rule.Reason = given.GetCommandPrefix(), given.GetPathGlob(), given.GetReason()
		}
		for i, c := range calls[1:] {
			if c.tool != tool {
				return nil, invalid(fmt.Sprintf("tool_call_ids[%d]", i), "call %q is to %q, and call %q to %q: a RUN or SESSION scope decides the calls of one tool", ids[i+1], c.tool, ids[0], tool)
			}
		}
		if allowed && r.approvals.ceiling.ceilingForbidsAllow(tool) {
			return nil, refuse(agentdv1.ErrorReason_ERROR_REASON_CEILING_FORBIDS_RULE,
				"the operator's ceiling (%s) keeps every call of %q asking: allow this call with scope CALL, or make a rule that denies", r.approvals.ceiling.RequireApproval.Setting, tool).
				with("tool_name", tool, "session_id", sid)
		}
		rule.Decision, rule.CreatedBy, rule.Created = decision, by, timestamppb.New(r.a.opts.Now())
		if rule.Reason == "" {
			rule.Reason = ap.GetReason()
		}
	default:
		return nil, invalid("scope", "unknown approval scope %d", scope)
	}
	var args *structpb.Struct
	if ap.GetArguments() != nil {
		switch {
		case !allowed:
			return nil, invalid("arguments", "only with decision ALLOWED: a denied call does not run")
		case len(ids) > 1:
			return nil, invalid("arguments", "not with tool_call_ids: edited arguments are for one call")
		}
		var err error
		if args, err = r.approvals.tools.ValidateArguments(tool, ap.GetArguments()); err != nil {
			return nil, argumentsRefusal(tool, err, fmt.Sprintf("call %q still waits for a decision", ids[0]))
		}
	}
	var stored *agentdv1.ApprovalRule
	switch scope {
	case agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION:
		rule.Id = persistence.NewID()
		e := &agentdv1.Entry{Id: rule.Id, RunId: r.id, Payload: &agentdv1.Entry_ApprovalRule{ApprovalRule: rule}}
		if err := r.a.appendEntries(ctx, r.writer, sid, e); err != nil {
			if errors.Is(err, persistence.ErrFenced) {
				r.leaseLost()
			}
			return nil, fmt.Errorf("store the approval rule: %w", err)
		}
		r.context.appendEntry(e)
		stored = rule
	case agentdv1.ApprovalScope_APPROVAL_SCOPE_RUN:
		r.approvals.addRunRule(rule)
	}
	ans := approvalAnswer{Approval: Approval{Allowed: allowed, Reason: ap.GetReason(), DecidedBy: by, Scope: scope}, rule: rule, args: args}
	for _, c := range calls {
		c.state = "answered"
		c.answer <- ans
	}
	return stored, nil
}

// argumentsRefusal names the first field of edited or replacement
// arguments that fails the tool's schema ("arguments.command"; "arguments"
// for the object itself), lists every problem, and says what still waits.
func argumentsRefusal(tool string, err error, still string) *FieldError {
	var ae *agentloop.ArgumentsError
	if !errors.As(err, &ae) || len(ae.Problems) == 0 {
		return invalid("arguments", "%v; %s", err, still)
	}
	field := "arguments"
	if p := ae.Problems[0].Path; p != "" {
		field += "." + p
	}
	problems := make([]string, len(ae.Problems))
	for i, p := range ae.Problems {
		problems[i] = p.Message
		if p.Path != "" {
			problems[i] = p.Path + ": " + p.Message
		}
	}
	return invalid(field, "the arguments do not fit the schema of tool %q (%s); %s", tool, strings.Join(problems, "; "), still)
}

// ruleDecision is the rule in force that decides a call without asking,
// or nil: the run's rules and the session's (read from the store each
// time, so a rule another call made or DeleteApprovalRule removed counts
// at once), in the order decidingRule gives. When the session's rules
// cannot be read the call asks, and an error event says why.
func (g approvalGate) ruleDecision(ctx context.Context, tool string, args *structpb.Struct) *agentdv1.ApprovalRule {
	r := g.run
	path, err := r.a.store.Path(ctx, r.sessionID)
	if err != nil {
		r.report("approval_rules", fmt.Errorf("the session's approval rules could not be read (%v); the call asks", err))
		path = nil
	}
	return decidingRule(r.approvals.runRules(), rulesInForce(path), r.approvals.ceiling, tool, args, r.approvals.root)
}

// decideByRule records a call decided by rule and returns the decision.
func (g approvalGate) decideByRule(run agentloop.Scope, id, name string, rule *agentdv1.ApprovalRule) (agentloop.BeforeDecision, error) {
	n := &agentdv1.ApprovalNotice{ToolCallId: id, ToolName: name, Decision: rule.GetDecision(), Reason: rule.GetReason(), DecidedBy: "rule", Rule: rule}
	if err := g.record(run, n); err != nil {
		return agentloop.BeforeDecision{}, err
	}
	if rule.GetDecision() == agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED {
		return agentloop.BeforeDecision{}, nil
	}
	text := "Tool call denied by an approval rule of this run"
	if rule.GetId() != "" {
		text = "Tool call denied by approval rule " + rule.GetId()
	}
	if rule.GetReason() != "" {
		text += ": " + rule.GetReason()
	}
	return agentloop.BeforeDecision{Block: true, Reason: text}, nil
}

// decided records a person's decision delivered by ResolveApproval and
// returns what the loop does with the call.
func (g approvalGate) decided(run agentloop.Scope, id, name string, d approvalAnswer) (agentloop.BeforeDecision, error) {
	decision := agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED
	if d.Allowed {
		decision = agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED
	}
	n := &agentdv1.ApprovalNotice{ToolCallId: id, ToolName: name, Decision: decision, Reason: d.Reason, DecidedBy: d.DecidedBy,
		Rule: d.rule, Scope: d.Scope, ArgumentsEdited: d.args != nil}
	if err := g.record(run, n); err != nil {
		return agentloop.BeforeDecision{}, err
	}
	if !d.Allowed {
		text := "The user denied this tool call"
		if d.Reason != "" {
			text += ": " + d.Reason
		}
		return agentloop.BeforeDecision{Block: true, Reason: text}, nil
	}
	return agentloop.BeforeDecision{Args: d.args}, nil
}

// approvalRequested is the event that asks for a decision on a call.
func (g approvalGate) approvalRequested(id, name string, args *structpb.Struct) *agentdv1.ApprovalRequested {
	return &agentdv1.ApprovalRequested{
		ToolCallId: id, ToolName: name, Arguments: args, Deadline: timestamppb.New(g.now().Add(g.timeout)),
		Decisions: []agentdv1.ApprovalDecision{agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED, agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED},
		// Every scope, also for a tool the ceiling keeps asking: a rule
		// that denies is always accepted; one that allows is refused
		// with CEILING_FORBIDS_RULE.
		Scopes: []agentdv1.ApprovalScope{agentdv1.ApprovalScope_APPROVAL_SCOPE_CALL, agentdv1.ApprovalScope_APPROVAL_SCOPE_RUN,
			agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION},
		SuggestedRule:  suggestedRule(name, args, g.run.approvals.root),
		IdempotencyKey: IdempotencyKey(g.run.sessionID, g.run.id, id),
	}
}
