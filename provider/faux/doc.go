// Package faux is a deterministic, network-free model provider modelled on
// pi-ai 0.73's faux provider. Tests (and clients over gRPC) script the
// model's answers: a queue of fixed assistant messages or of response
// functions that see the request context. Each answer is streamed the way a
// real provider would stream it: text and thinking in small chunks, tool
// arguments as JSON fragments, with optional pacing in tokens per second.
// Usage is estimated as ceil(chars/4). Cancelling the call's context yields an
// ABORTED message "Request was aborted"; an empty queue yields an ERROR
// message "No more faux responses queued" unless the echo fallback is on.
//
// Unlike pi's faux provider, chunk sizes are not random: they cycle through
// the configured token-size range, so every run streams the same deltas.
package faux
