package service

import (
	"context"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// SubmitToolResult implements agentdv1.AgentServiceServer.
func (s *Service) SubmitToolResult(ctx context.Context, req *agentdv1.SubmitToolResultRequest) (*agentdv1.SubmitToolResultResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if req.GetToolCallId() == "" {
		return nil, invalid("tool_call_id", "required: the id from the tool_call_requested event")
	}
	if err := s.limits.checkContent("content", req.GetContent(), resultBlocks, false); err != nil {
		return nil, err
	}
	err := s.agent.SubmitToolResult(ctx, req.GetSessionId(), req.GetToolCallId(),
		agent.ToolResult{Content: req.GetContent(), Details: req.GetDetails(), IsError: req.GetIsError()})
	if err != nil {
		return nil, s.status(ctx, "submit a tool result", err)
	}
	return &agentdv1.SubmitToolResultResponse{}, nil
}

// ResolveApproval implements agentdv1.AgentServiceServer. It checks here
// what needs no run (checkResolution); the run checks the rest against the
// waiting calls.
func (s *Service) ResolveApproval(ctx context.Context, req *agentdv1.ResolveApprovalRequest) (*agentdv1.ResolveApprovalResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := s.checkResolution(req); err != nil {
		return nil, err
	}
	rule, err := s.agent.ResolveApproval(ctx, req.GetSessionId(), req.GetToolCallId(), agent.Approval{
		Allowed:     req.GetDecision() == agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED,
		Reason:      req.GetReason(),
		DecidedBy:   req.GetDecidedBy(),
		Scope:       req.GetScope(),
		Arguments:   req.GetArguments(),
		Rule:        req.GetRule(),
		ToolCallIDs: req.GetToolCallIds(),
	})
	if err != nil {
		return nil, s.status(ctx, "resolve an approval", err)
	}
	return &agentdv1.ResolveApprovalResponse{Rule: rule}, nil
}
