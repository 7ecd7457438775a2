package service

import (
	"context"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// ListModels implements agentdv1.AgentServiceServer.
func (s *Service) ListModels(context.Context, *agentdv1.ListModelsRequest) (*agentdv1.ListModelsResponse, error) {
	return &agentdv1.ListModelsResponse{Models: s.agent.Models()}, nil
}

// ListToolSources implements agentdv1.AgentServiceServer.
func (s *Service) ListToolSources(ctx context.Context, req *agentdv1.ListToolSourcesRequest) (*agentdv1.ListToolSourcesResponse, error) {
	return &agentdv1.ListToolSourcesResponse{Sources: s.agent.ToolSources(ctx, req.GetRefresh())}, nil
}
