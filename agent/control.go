package agent

import (
	"context"
	"errors"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/replicapb"
)

// The verbs that act on a session's active run. Each builds one
// [replicapb.ReplicaControl] and hands it to control, which carries it out
// where the run is (docs/ARCHITECTURE.md, "Replicas"): a new verb is a
// field of ReplicaControl's action, an arm of controlHere, and a method of
// a few lines here.

// Steer queues a message for the session's active run, delivered after the
// current turn's tools finish, and returns how many wait. ErrIdle when the
// session has no active run.
func (a *Agent) Steer(ctx context.Context, sessionID string, msg *agentdv1.AgentMessage) (int, error) {
	ans, err := a.control(ctx, sessionID, &replicapb.ReplicaControl{Action: &replicapb.ReplicaControl_Steer{Steer: msg}})
	return int(ans.GetQueued()), err
}

// FollowUp queues a message for the session's active run, delivered when
// the agent would otherwise stop, and returns how many wait. ErrIdle when
// the session has no active run.
func (a *Agent) FollowUp(ctx context.Context, sessionID string, msg *agentdv1.AgentMessage) (int, error) {
	ans, err := a.control(ctx, sessionID, &replicapb.ReplicaControl{Action: &replicapb.ReplicaControl_FollowUp{FollowUp: msg}})
	return int(ans.GetQueued()), err
}

// Abort cancels the session's active run (or, when runID is set, that run
// if it is the active one) and returns once the run has recorded its end,
// so the session is idle when Abort returns. It returns the run's id.
func (a *Agent) Abort(ctx context.Context, sessionID, runID string) (string, error) {
	ans, err := a.control(ctx, sessionID, &replicapb.ReplicaControl{Action: &replicapb.ReplicaControl_Abort{Abort: runID}})
	return ans.GetRunId(), err
}

// SubmitToolResult answers a tool_call_requested event of the session's
// active run.
func (a *Agent) SubmitToolResult(ctx context.Context, sessionID, toolCallID string, result ToolResult) error {
	_, err := a.control(ctx, sessionID, &replicapb.ReplicaControl{Action: &replicapb.ReplicaControl_ToolResult{ToolResult: &replicapb.ReplicaToolResult{
		ToolCallId: toolCallID, Content: result.Content, Details: result.Details, IsError: result.IsError,
	}}})
	return err
}

// ResolveApproval answers an approval_requested event of the session's
// active run (and, with decision.ToolCallIDs, more calls waiting in it),
// and returns the rule a SESSION scope stored (nil otherwise). A refusal
// decides nothing: a call not waiting (ERROR_REASON_NOT_WAITING naming
// it), a rule that does not suit the call or edited arguments that do not
// fit the tool's schema (a *FieldError), an ALLOWED rule or RUN scope the
// operator's ceiling forbids (ERROR_REASON_CEILING_FORBIDS_RULE).
func (a *Agent) ResolveApproval(ctx context.Context, sessionID, toolCallID string, decision Approval) (*agentdv1.ApprovalRule, error) {
	ans, err := a.control(ctx, sessionID, &replicapb.ReplicaControl{Action: &replicapb.ReplicaControl_Approval{Approval: &replicapb.ReplicaApproval{
		ToolCallId: toolCallID, Allowed: decision.Allowed, Reason: decision.Reason, DecidedBy: decision.DecidedBy,
		Scope: decision.Scope, Arguments: decision.Arguments, Rule: decision.Rule, ToolCallIds: decision.ToolCallIDs,
	}}})
	return ans.GetRule(), err
}

// SubmitContext answers a context_requested event of the session's active
// run with the items the model should see: entries the request offered, or
// messages of the client's. An answer naming an entry the request did not
// offer, or one twice, is refused with a *FieldError; the waiting call then
// goes ahead with the policies' context.
func (a *Agent) SubmitContext(ctx context.Context, sessionID, requestID string, items []*agentdv1.ContextSelection) error {
	_, err := a.control(ctx, sessionID, &replicapb.ReplicaControl{Action: &replicapb.ReplicaControl_Context{Context: &replicapb.ReplicaContextAnswer{
		RequestId: requestID, Selections: items,
	}}})
	return err
}

// RefuseContext tells a waiting context request that its answer was
// refused before it reached SubmitContext (a message that failed
// validation), so the call goes ahead with the policies' context at once
// instead of waiting for the timeout. It does nothing when no such request
// waits.
func (a *Agent) RefuseContext(ctx context.Context, sessionID, requestID string, why error) {
	_, _ = a.control(ctx, sessionID, &replicapb.ReplicaControl{Action: &replicapb.ReplicaControl_Context{Context: &replicapb.ReplicaContextAnswer{
		RequestId: requestID, Refused: why.Error(),
	}}})
}

// control carries out ctl on the session's active run: here when this
// process runs it, otherwise on the replica that does (relay). Without a
// shared store, or when no replica runs the session, the local refusal
// (ErrIdle) stands.
func (a *Agent) control(ctx context.Context, sessionID string, ctl *replicapb.ReplicaControl) (*replicapb.ReplicaControlAnswer, error) {
	ctl.SessionId = sessionID
	ans, err := a.controlHere(ctx, ctl)
	if a.shared == nil || !errors.Is(err, ErrIdle) {
		return ans, err
	}
	relayed, handled, relayErr := a.relay(ctx, sessionID, ctl)
	if !handled {
		return ans, err
	}
	return relayed, relayErr
}

// controlHere carries out ctl on this process's run of its session, for a
// caller here or a control another replica relayed.
func (a *Agent) controlHere(ctx context.Context, ctl *replicapb.ReplicaControl) (*replicapb.ReplicaControlAnswer, error) {
	sid := ctl.GetSessionId()
	r := a.active(sid)
	if hook := ctl.GetHook(); hook != nil && r == nil {
		// A manual compaction's hook waits outside any run.
		if hs := a.compactHooks(sid); hs != nil {
			if err := hs.answer(sid, hook); err != nil {
				return nil, err
			}
			return &replicapb.ReplicaControlAnswer{}, nil
		}
	}
	if r == nil {
		return nil, refuse(agentdv1.ErrorReason_ERROR_REASON_RUN_NOT_ACTIVE, "session %q has no active run%s", sid, idleHint(ctl)).with("session_id", sid)
	}
	if want := ctl.GetRunId(); want != "" && want != r.id {
		// The run the sender found active ended meanwhile: the request was
		// meant for it, not for its successor.
		return nil, refuse(agentdv1.ErrorReason_ERROR_REASON_RUN_NOT_ACTIVE, "run %q of session %q is no longer active (the active run is %q)", want, sid, r.id).with("session_id", sid, "run_id", r.id)
	}
	ans := &replicapb.ReplicaControlAnswer{}
	var err error
	switch act := ctl.GetAction().(type) {
	case *replicapb.ReplicaControl_Steer:
		ans.Queued, err = a.enqueue(r, act.Steer, false)
	case *replicapb.ReplicaControl_FollowUp:
		ans.Queued, err = a.enqueue(r, act.FollowUp, true)
	case *replicapb.ReplicaControl_Abort:
		if act.Abort != "" && act.Abort != r.id {
			return nil, refuse(agentdv1.ErrorReason_ERROR_REASON_RUN_NOT_ACTIVE, "run %q is not the active run of session %q (that is %q)", act.Abort, sid, r.id).with("session_id", sid, "run_id", r.id)
		}
		if err = r.abortAndWait(ctx, "aborted by an Abort call"); err == nil {
			ans.RunId = r.id
		}
	case *replicapb.ReplicaControl_ToolResult:
		tr := act.ToolResult
		err = r.pending.deliver(sid, tr.GetToolCallId(), waitClientResult, ToolResult{Content: tr.GetContent(), Details: tr.GetDetails(), IsError: tr.GetIsError()})
	case *replicapb.ReplicaControl_Approval:
		ans.Rule, err = r.resolveApproval(ctx, act.Approval)
	case *replicapb.ReplicaControl_Context:
		cx := act.Context
		if cx.GetRefused() != "" {
			_ = r.pending.deliver(sid, cx.GetRequestId(), waitContext, contextAnswer{err: errors.New(cx.GetRefused())})
			return ans, nil
		}
		err = r.answerContext(cx.GetRequestId(), cx.GetSelections())
	case *replicapb.ReplicaControl_Hook:
		err = r.hooks.answer(sid, act.Hook)
	case *replicapb.ReplicaControl_ClearQueue:
		ans.Cleared, err = a.clearQueue(r)
	default:
		err = refuse(agentdv1.ErrorReason_ERROR_REASON_REPLICA_VERSION_MISMATCH, "a control of another replica has no action this build knows; upgrade the replicas to one version")
	}
	if err != nil {
		return nil, err
	}
	return ans, nil
}

// idleHint completes "session … has no active run" for ctl's verb: what
// the caller can do, or what it is that does not wait.
func idleHint(ctl *replicapb.ReplicaControl) string {
	switch ctl.GetAction().(type) {
	case *replicapb.ReplicaControl_Steer, *replicapb.ReplicaControl_FollowUp:
		return ": use Prompt to start one"
	case *replicapb.ReplicaControl_Abort:
		return " to abort"
	case *replicapb.ReplicaControl_ToolResult:
		return ", so no tool call waits for a result"
	case *replicapb.ReplicaControl_Approval:
		return ", so no tool call waits for approval"
	case *replicapb.ReplicaControl_Context:
		return ", so no context request waits for an answer"
	case *replicapb.ReplicaControl_Hook:
		return ", so no hook waits for an answer"
	}
	return ""
}

// enqueue pushes msg onto r's steering or follow-up queue and returns how
// many wait there. It holds the agent's lock so that a run ending at the
// same moment either takes the message with its undelivered ones or is
// no longer the session's run.
func (a *Agent) enqueue(r *Run, msg *agentdv1.AgentMessage, followUp bool) (uint32, error) {
	a.mu.Lock()
	if a.bySession[r.sessionID] != r {
		a.mu.Unlock()
		return 0, refuse(agentdv1.ErrorReason_ERROR_REASON_RUN_NOT_ACTIVE, "session %q has no active run: use Prompt to start one", r.sessionID).with("session_id", r.sessionID)
	}
	q := r.steering
	if followUp {
		q = r.followUp
	}
	n := q.Push(msg)
	a.mu.Unlock()
	r.publish(&agentdv1.AgentEvent{Time: timestamppb.New(a.opts.Now()), Event: &agentdv1.AgentEvent_QueueUpdate{QueueUpdate: &agentdv1.QueueUpdate{
		Steering: r.steering.Snapshot(), FollowUp: r.followUp.Snapshot(),
	}}})
	return uint32(n), nil
}
