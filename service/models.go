package service

import (
	"context"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// ListModels implements agentdv1.AgentServiceServer.
func (s *Service) ListModels(context.Context, *agentdv1.ListModelsRequest) (*agentdv1.ListModelsResponse, error) {
	return &agentdv1.ListModelsResponse{Models: s.agent.Models()}, nil
}
