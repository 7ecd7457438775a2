// Package sqlite is the SQLite engine of the transcript store
// (persistence.Store), built on github.com/mattn/go-sqlite3.
//
// A database file has one owner and any number of readers. The store
// takes an exclusive lock on a companion file (the database's path with
// "-lock" appended; see Files) before SQLite opens the database, and holds
// it until Close: a second agentd is refused at once and told which
// process has the file. SQLite itself runs with its normal WAL locking, so
// other programs — a reader in any language opening the file read-only,
// the sqlite3 shell, an online backup, a replication tool — read
// consistent snapshots while the store writes, and never block its
// writer. Because only this process writes, the writer's cache of each
// session is never stale, and start-up repair (CloseInterruptedRuns) only
// ever finds runs of a process that is gone.
//
// Checkpoints run in the background (Store.checkpoint): a reader holding
// an old snapshot keeps the WAL from being reused, so it grows by what is
// written during that read; once the read ends, the WAL is emptied within
// seconds, and a WAL larger than the limit (WithWALSizeLimit) is logged.
//
// The database runs in WAL mode with foreign keys on. All writes go through
// one connection (SQLite allows one writer at a time, so a pool would only
// add lock waits), with group commit: concurrent writes share one
// transaction (one that fails is left out of a rerun), and an uncontended
// append runs on its caller's goroutine (writer.go). Reads use a separate
// pool of query-only connections, which WAL lets run concurrently with the
// writer; a third connection checkpoints the WAL in the background, so
// appends normally never wait for a checkpoint's fsyncs. Commits use
// synchronous=NORMAL by default: a process crash loses nothing committed,
// and a power loss can lose at most the last commits but never corrupts
// the file. WithSynchronous(SyncFull) fsyncs every commit for users who
// need durability against power loss too.
//
// Entry payloads are the binary protobuf of agentdv1.Entry, so any language
// can read a database back (see migrations/0001_init.sql for the schema).
// Payloads of 2 KiB and more are stored zlib-compressed when that saves at
// least an eighth (entries.encoding = 1, migrations/0002_payload_encoding.sql):
// inflating them gives the same protobuf. This keeps the file well below
// the size of the same transcript as JSON lines, and keeps ~4 KiB tool
// results out of half-empty overflow pages.
//
// An append writes one B-tree page in the common case: an entry's rowid
// packs its session and sequence number, so a transcript is one contiguous
// range of the table (paging and loading are range scans), the leaf is
// implied by the highest sequence number unless SetLeaf moved it, and
// there is no index by entry id (migrations/0003_event_log_and_implied_leaf.sql).
//
// A run's event log is stored in batches, one row per batch holding the
// events as length-delimited protobufs (run_events), so resuming a stream
// after a restart reads a few rows, not one per event.
//
// The schema lives in embedded, numbered migrations (migrations/NNNN_*.sql)
// applied in one transaction at Open; the applied version is PRAGMA
// user_version. A new file gets what they make in one step (schema.sql,
// held to them by a test). A database written by a newer agentd is refused
// rather than misread.
//
// A server opens the store once at start-up and repairs what a crash left:
//
//	store, err := sqlite.Open(ctx, path)
//	if err != nil {
//		return err // names the file and the cause: in use, read-only, too new, ...
//	}
//	defer store.Close()
//	interrupted, err := store.CloseInterruptedRuns(ctx)
package sqlite
