package service

import (
	"context"

	"google.golang.org/grpc"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// ClearQueue implements agentdv1.AgentServiceServer.
func (s *Service) ClearQueue(ctx context.Context, req *agentdv1.ClearQueueRequest) (*agentdv1.ClearQueueResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	resp, err := s.agent.ClearQueue(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.status(ctx, "clear the queue", err)
	}
	return resp, nil
}

// queuesWhenBusy reports whether a prompt's busy policy does something
// other than refuse while another run is active.
func queuesWhenBusy(p agentdv1.BusyPolicy) bool {
	return p != agentdv1.BusyPolicy_BUSY_POLICY_UNSPECIFIED && p != agentdv1.BusyPolicy_BUSY_POLICY_REJECT
}

// promptBusy is run for a prompt whose busy policy queues or interrupts:
// the agent decides where the prompt goes and streams that run.
func (s *Service) promptBusy(ctx context.Context, req agent.StartRequest, detach bool, stream grpc.ServerStream) error {
	err := s.agent.StartAndFollow(ctx, req, agent.FollowOptions{AbortOnDrop: !detach, ReportRefusal: true}, s.sender(stream))
	return s.status(ctx, "prompt", err)
}

// sender sends a run's events on stream, each as the bytes its log
// encoded once.
func (s *Service) sender(stream grpc.ServerStream) func(agent.Event) error {
	// One message per stream, refilled for each event: SendMsg has encoded
	// it when it returns, and a pointer becomes an `any` without the
	// allocation a slice needs.
	msg := new(encodedEvent)
	return func(e agent.Event) error {
		*msg = e.Data
		err := stream.SendMsg(msg)
		*msg = nil
		if err != nil {
			return err
		}
		s.metrics.EventSent(e.Time)
		return nil
	}
}
