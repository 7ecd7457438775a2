package service

import (
	"context"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// maxInDoubtMessageBytes bounds ResolveInDoubtRequest.message.
const maxInDoubtMessageBytes = 64 << 10

// ResolveInDoubt implements agentdv1.AgentServiceServer.
func (s *Service) ResolveInDoubt(ctx context.Context, req *agentdv1.ResolveInDoubtRequest) (*agentdv1.ResolveInDoubtResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if req.GetToolCallId() == "" {
		return nil, invalid("tool_call_id", "required: the id of a tool_in_doubt entry or event")
	}
	action := req.GetAction()
	switch action {
	case agentdv1.InDoubtAction_IN_DOUBT_ACTION_RETRY, agentdv1.InDoubtAction_IN_DOUBT_ACTION_SKIP, agentdv1.InDoubtAction_IN_DOUBT_ACTION_SUPPLY:
	default:
		return nil, invalid("action", "must be IN_DOUBT_ACTION_RETRY, IN_DOUBT_ACTION_SKIP or IN_DOUBT_ACTION_SUPPLY")
	}
	supply := action == agentdv1.InDoubtAction_IN_DOUBT_ACTION_SUPPLY
	if req.GetMessage() != "" && action != agentdv1.InDoubtAction_IN_DOUBT_ACTION_SKIP {
		return nil, invalid("message", "goes with IN_DOUBT_ACTION_SKIP only; with SUPPLY pass the result in content")
	}
	if len(req.GetMessage()) > maxInDoubtMessageBytes {
		return nil, invalid("message", "%d bytes exceed the limit of %d", len(req.GetMessage()), maxInDoubtMessageBytes)
	}
	if !supply && (len(req.GetContent()) > 0 || req.GetDetails() != nil || req.GetIsError()) {
		return nil, invalid("content", "content, details and is_error go with IN_DOUBT_ACTION_SUPPLY only")
	}
	if supply {
		if err := s.limits.checkContent("content", req.GetContent(), resultBlocks, true); err != nil {
			return nil, err
		}
	}
	entry, remaining, err := s.agent.ResolveInDoubt(ctx, req.GetSessionId(), req.GetToolCallId(), agent.InDoubtDecision{
		Action:  action,
		Message: req.GetMessage(),
		Result:  agent.ToolResult{Content: req.GetContent(), Details: req.GetDetails(), IsError: req.GetIsError()},
	})
	if err != nil {
		return nil, s.status(ctx, "resolve a tool call in doubt", err)
	}
	return &agentdv1.ResolveInDoubtResponse{Entry: entry, Remaining: remaining}, nil
}
