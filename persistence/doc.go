// Package persistence defines the transcript store: the one interface the
// agent and the gRPC service use to keep sessions, their entry trees, their
// runs and the runs' event logs across restarts.
//
// A transcript is a tree of immutable entries (agentdv1.Entry) linked by
// parent id; each session has a leaf pointer that selects the current path.
// Entries are stored as their binary protobuf encoding, so any language with
// the generated code can read a database back.
//
// Engines live in sub-packages (persistence/sqlite, the embedded default;
// persistence/memory, the reference engine for tests) and must pass the
// shared conformance suite in persistence/storetest, so every engine
// behaves the same. Errors carry the sentinels ErrNotFound, ErrInvalid,
// ErrConflict and ErrCorrupt, which the service maps onto gRPC codes.
package persistence
