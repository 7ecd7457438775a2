package service

import (
	"context"

	"google.golang.org/grpc"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Prompt implements agentdv1.AgentServiceServer.
func (s *Service) Prompt(req *agentdv1.PromptRequest, stream grpc.ServerStreamingServer[agentdv1.AgentEvent]) error {
	ctx := stream.Context()
	if err := checkID("session_id", req.GetSessionId()); err != nil {
		return err
	}
	if err := s.limits.checkContent("content", req.GetContent(), userBlocks, true); err != nil {
		return err
	}
	if err := checkRequestID(req.GetRequestId()); err != nil {
		return err
	}
	if err := s.checkOutputRequest(req.GetOutputSchema(), req.MaxOutputRetries); err != nil {
		return err
	}
	prompt := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{
		Content: req.GetContent(), Timestamp: timestamp(s.now()),
	}}}
	run := &agentdv1.RunRequest{Method: "prompt",
		Model: req.GetModel(), ThinkingLevel: req.GetThinkingLevel(), SystemPromptAppend: req.GetSystemPromptAppend(), Tools: req.GetTools(),
		ModelSettings: req.GetModelSettings(), OutputSchema: req.GetOutputSchema(), MaxOutputRetries: req.MaxOutputRetries,
		Metadata: req.GetMetadata(), IfBusy: req.GetIfBusy()}
	if err := checkRunRequest(run); err != nil {
		return err
	}
	return s.run(ctx, agent.StartRequest{SessionID: req.GetSessionId(), RequestID: req.GetRequestId(), Prompt: prompt,
		ParentEntryID: req.GetParentEntryId(), FromRoot: req.GetFromRoot(), Run: run}, req.GetDetach(), stream)
}

// Continue implements agentdv1.AgentServiceServer.
func (s *Service) Continue(req *agentdv1.ContinueRequest, stream grpc.ServerStreamingServer[agentdv1.AgentEvent]) error {
	ctx := stream.Context()
	if err := checkID("session_id", req.GetSessionId()); err != nil {
		return err
	}
	if err := checkRequestID(req.GetRequestId()); err != nil {
		return err
	}
	if err := s.checkOutputRequest(req.GetOutputSchema(), req.MaxOutputRetries); err != nil {
		return err
	}
	run := &agentdv1.RunRequest{Method: "continue",
		Model: req.GetModel(), ThinkingLevel: req.GetThinkingLevel(), SystemPromptAppend: req.GetSystemPromptAppend(), Tools: req.GetTools(),
		ModelSettings: req.GetModelSettings(), OutputSchema: req.GetOutputSchema(), MaxOutputRetries: req.MaxOutputRetries,
		Metadata: req.GetMetadata()}
	if err := checkRunRequest(run); err != nil {
		return err
	}
	return s.run(ctx, agent.StartRequest{SessionID: req.GetSessionId(), RequestID: req.GetRequestId(), ParentEntryID: req.GetParentEntryId(), Run: run},
		req.GetDetach(), stream)
}

// run starts a run (or finds the one a retried request started) and
// streams its events.
func (s *Service) run(ctx context.Context, req agent.StartRequest, detach bool, stream grpc.ServerStream) error {
	if err := checkOptionalID("parent_entry_id", req.ParentEntryID); err != nil {
		return err
	}
	rec, err := s.session(ctx, req.SessionID)
	if err != nil {
		return err
	}
	req.TenantLimits, req.Session = s.tenantLimits(rec.Tenant), rec
	if queuesWhenBusy(req.Run.GetIfBusy()) {
		return s.promptBusy(ctx, req, detach, stream)
	}
	runID, err := s.agent.Start(ctx, req)
	if err != nil {
		return s.status(ctx, "start a run", err)
	}
	return s.follow(ctx, req.SessionID, runID, 0, agent.FollowOptions{AbortOnDrop: !detach, ReportRefusal: true}, stream)
}

func checkRequestID(id string) error {
	if len(id) > agent.MaxNameBytes {
		return invalid("request_id", "%d bytes exceed the limit of %d", len(id), agent.MaxNameBytes)
	}
	return nil
}

// follow streams a run's events after seq after until agent_end, each as
// the bytes the run's log encoded once.
func (s *Service) follow(ctx context.Context, sessionID, runID string, after uint64, opts agent.FollowOptions, stream grpc.ServerStream) error {
	err := s.agent.Follow(ctx, sessionID, runID, after, opts, s.sender(stream))
	return s.status(ctx, "stream events", err)
}

// Attach implements agentdv1.AgentServiceServer.
func (s *Service) Attach(req *agentdv1.AttachRequest, stream grpc.ServerStreamingServer[agentdv1.AgentEvent]) error {
	ctx := stream.Context()
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return err
	}
	if err := checkOptionalID("run_id", req.GetRunId()); err != nil {
		return err
	}
	return s.follow(ctx, req.GetSessionId(), req.GetRunId(), req.GetAfterSeq(), agent.FollowOptions{}, stream)
}

// Steer implements agentdv1.AgentServiceServer.
func (s *Service) Steer(ctx context.Context, req *agentdv1.SteerRequest) (*agentdv1.SteerResponse, error) {
	n, err := s.enqueue(ctx, req.GetSessionId(), req.GetContent(), s.agent.Steer)
	if err != nil {
		return nil, err
	}
	return &agentdv1.SteerResponse{Queued: uint32(n)}, nil
}

// FollowUp implements agentdv1.AgentServiceServer.
func (s *Service) FollowUp(ctx context.Context, req *agentdv1.FollowUpRequest) (*agentdv1.FollowUpResponse, error) {
	n, err := s.enqueue(ctx, req.GetSessionId(), req.GetContent(), s.agent.FollowUp)
	if err != nil {
		return nil, err
	}
	return &agentdv1.FollowUpResponse{Queued: uint32(n)}, nil
}

func (s *Service) enqueue(ctx context.Context, sessionID string, content []*agentdv1.ContentBlock, push func(context.Context, string, *agentdv1.AgentMessage) (int, error)) (int, error) {
	if _, err := s.session(ctx, sessionID); err != nil {
		return 0, err
	}
	if err := s.limits.checkContent("content", content, userBlocks, true); err != nil {
		return 0, err
	}
	msg := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: content, Timestamp: timestamp(s.now())}}}
	n, err := push(ctx, sessionID, msg)
	return n, s.status(ctx, "queue a message", err)
}

// Abort implements agentdv1.AgentServiceServer. It returns once the run has
// recorded its end, so the session is idle when Abort returns.
func (s *Service) Abort(ctx context.Context, req *agentdv1.AbortRequest) (*agentdv1.AbortResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := checkOptionalID("run_id", req.GetRunId()); err != nil {
		return nil, err
	}
	runID, err := s.agent.Abort(ctx, req.GetSessionId(), req.GetRunId())
	if err != nil {
		return nil, s.status(ctx, "abort", err)
	}
	return &agentdv1.AbortResponse{RunId: runID}, nil
}
