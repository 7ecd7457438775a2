// Package service is the gRPC layer of agentd: it implements
// agentd.v1.AgentService by validating requests, mapping them onto the runs
// of package agent and the sessions and transcripts of package persistence,
// and mapping their errors onto gRPC status codes (INVALID_ARGUMENT with
// google.rpc.BadRequest field violations). It holds no run state and no
// agent logic: NewServer adds health, reflection, logging, metrics, auth,
// panic recovery and a codec that sends logged events as they were encoded.
package service
