package service

import (
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Service implements agentdv1.AgentServiceServer on top of the agent loop
// and the transcript store.
type Service struct {
	agentdv1.UnimplementedAgentServiceServer
}

// New returns the AgentService implementation.
func New() *Service {
	return &Service{}
}
