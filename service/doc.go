// Package service is the thin gRPC layer of agentd: it implements
// agentd.v1.AgentService by validating requests, mapping errors to gRPC
// status codes and wiring the agent loop (package agentloop) to the
// transcript store (package persistence). It holds no agent logic itself.
package service
