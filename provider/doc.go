// Package provider defines the one streaming interface through which the
// agent loop talks to a model, whatever the vendor behind it.
//
// A provider adapter turns a model call into a Stream of Events that mirrors
// pi-ai's model stream protocol: Start, then per content block
// TextStart/TextDelta/TextEnd, ThinkingStart/ThinkingDelta/ThinkingEnd or
// ToolCallStart/ToolCallDelta/ToolCallEnd (each with its ContentIndex), then
// exactly one terminal event, Done or Error, that carries the final
// *agentdv1.AssistantMessage. Failures after the call started are data: an
// Error event whose message has stop reason ERROR or ABORTED, never a Go
// error, so a failed call still leaves a complete assistant message that the
// transcript can store.
//
// Events are plain struct values so that a text delta costs no allocation on
// its way from the adapter to the loop. Messages carried by events belong to
// the receiver once yielded: an adapter never touches them again.
//
// The faux subpackage is the scripted, network-free provider every test uses
// and the default model when no real provider is configured.
package provider
