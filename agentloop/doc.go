// Package agentloop is the heart of agentd: a Go port of pi-agent-core
// 0.73's agent loop, working directly on the generated protobuf types.
//
// Run appends prompt messages and drives turns: before every model call the
// transcript passes through TransformContext, ConvertToLLM and
// provider.Replay (pure and fail-safe; BuildContext shows the result without
// calling the model), the model's answer is streamed as linear
// message_update deltas, a failed call is retried as Config.Retry says, tool
// calls are validated against their JSON Schema and executed (parallel by
// default, sequential on request) after their BeforeToolCall hook, and
// queued steering and follow-up messages start further turns. Continue
// resumes a transcript whose last model-visible message is a user message
// or tool result.
//
// Tools and hooks report side effects (an approval request, a recorded
// decision) through the Scope the loop hands them, never through values
// hidden in a context.
//
// Every event goes to a Sink in order, and every run ends with exactly one
// agent_end, whatever happens: provider failures, aborts (context
// cancellation), tool panics and sink failures alike. The loop knows nothing
// of gRPC or storage: the sink of package agent stamps session, run and
// sequence numbers, persists messages at message_end and publishes events.
package agentloop
