// Package uistream serves a run's events to web front ends as the streams
// their frameworks read: AG-UI events and the Vercel AI SDK's UI message
// stream, both as server-sent events.
//
// The handler is a client of the AgentService (normally through the
// server's in-process connection), so every call it makes passes the same
// authentication, tenant scoping, validation and limits as a gRPC call; it
// forwards the request's Authorization header as the call's metadata.
//
// Every SSE event carries an id made from the seq of the AgentEvent it is
// projected from: "<seq>" on the last event projected from it, "<seq>.<n>"
// on the ones before (n from 0). A reconnect that sends Last-Event-ID gets
// exactly the events after it. The projection of a run is rebuilt from the
// run's first event on every request, so each event keeps its id and its
// content across reconnects, restarts and replicas: the run's event log is
// durable, and the projection is a pure function of it.
package uistream
