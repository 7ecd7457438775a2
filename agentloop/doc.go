// Package agentloop is the heart of agentd: a Go port of pi-agent-core
// 0.73's agent loop, working directly on the generated protobuf types.
//
// Run appends prompt messages and drives turns: before every model call the
// transcript passes through TransformContext and ConvertToLLM (pure and
// fail-safe), the model's answer is streamed as linear message_update deltas,
// tool calls are validated against their JSON Schema and executed (parallel
// by default, sequential on request), and queued steering and follow-up
// messages start further turns. Continue resumes a transcript whose last
// model-visible message is a user message or tool result.
//
// Every event goes to a Sink in order, and every run ends with exactly one
// agent_end, whatever happens: provider failures, aborts (context
// cancellation), tool panics and sink failures alike. The loop knows nothing
// of gRPC or storage: the service's sink stamps session, run and sequence
// numbers, persists messages at message_end and forwards events.
package agentloop
