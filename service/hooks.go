package service

import (
	"context"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// maxHookInstructionsBytes bounds the compaction instructions a
// PRE_COMPACT hook supplies.
const maxHookInstructionsBytes = 64 << 10

// SubmitHookResult implements agentdv1.AgentServiceServer. It checks what
// it can without the run; whether the verdict and its fields suit the
// hook's event is checked where the hook waits (on the replica that runs
// it), and a refusal leaves the hook waiting.
func (s *Service) SubmitHookResult(ctx context.Context, req *agentdv1.SubmitHookResultRequest) (*agentdv1.SubmitHookResultResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := checkID("request_id", req.GetRequestId()); err != nil {
		return nil, err
	}
	switch req.GetVerdict() {
	case agentdv1.HookVerdict_HOOK_VERDICT_ALLOW, agentdv1.HookVerdict_HOOK_VERDICT_DENY,
		agentdv1.HookVerdict_HOOK_VERDICT_MODIFY, agentdv1.HookVerdict_HOOK_VERDICT_REDACT:
	default:
		return nil, invalid("verdict", "required: HOOK_VERDICT_ALLOW, DENY, MODIFY or REDACT, as the hook's event accepts")
	}
	if len(req.GetReason()) > maxReasonBytes {
		return nil, invalid("reason", "%d bytes exceed the limit of %d", len(req.GetReason()), maxReasonBytes)
	}
	if len(req.GetInstructions()) > maxHookInstructionsBytes {
		return nil, invalid("instructions", "%d bytes exceed the limit of %d", len(req.GetInstructions()), maxHookInstructionsBytes)
	}
	if len(req.GetDecidedBy()) > agent.MaxNameBytes {
		return nil, invalid("decided_by", "%d bytes exceed the limit of %d", len(req.GetDecidedBy()), agent.MaxNameBytes)
	}
	if err := s.limits.checkContent("content", req.GetContent(), userBlocks, false); err != nil {
		return nil, err
	}
	if err := s.agent.SubmitHookResult(ctx, req.GetSessionId(), req); err != nil {
		return nil, s.status(ctx, "submit a hook result", err)
	}
	return &agentdv1.SubmitHookResultResponse{}, nil
}
