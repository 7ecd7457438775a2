// Package postgres is the PostgreSQL engine of persistence.Store and
// persistence.Shared: the store several agentd processes (replicas) share.
//
// Rows mean what they mean in the SQLite engine (same protobuf payloads,
// same encodings; see migrations/0001_init.sql). Every write is one
// transaction; appends to a session are ordered by a lock on the
// session's row, batches of a run's events by a lock on the run's row, so
// writers in several processes never interleave.
//
// Ownership of runs (persistence.Shared) is a lease on the database's
// clock and a fencing generation per run: every fenced write checks, in
// its own transaction and under a lock on the run's row, that the claim
// still holds. Wake-ups (Watch) travel as NOTIFY on one channel — for
// controls in the transaction of the write they announce, for event
// batches just after it committed, gathered (see notify.go) — and are
// received by one listening connection per Store that reconnects by
// itself.
package postgres
