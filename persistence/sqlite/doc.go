// Package sqlite is the SQLite engine of the transcript store
// (persistence.Store), built on github.com/mattn/go-sqlite3.
//
// The database runs in WAL mode with foreign keys on and a busy timeout. All
// writes go through one connection (SQLite allows one writer at a time, so a
// pool would only add lock waits); reads use a separate pool of query-only
// connections, which WAL lets run concurrently with the writer; a third
// connection checkpoints the WAL in the background, so appends normally
// never wait for a checkpoint's fsyncs. Commits use synchronous=NORMAL by
// default: a process crash loses nothing committed, and a power loss can
// lose at most the last commits but never corrupts the file.
// WithSynchronous(SyncFull) fsyncs every commit for users who need
// durability against power loss too.
//
// Entry payloads are the binary protobuf of agentdv1.Entry, so any language
// can read a database back (see migrations/0001_init.sql for the schema).
// An entry's rowid packs its session and sequence number, so a transcript
// is one contiguous range of the table: paging and loading are range scans.
//
// The schema lives in embedded, numbered migrations (migrations/NNNN_*.sql)
// applied in one transaction at Open; the applied version is PRAGMA
// user_version. A database written by a newer agentd is refused rather than
// misread.
//
// A server opens the store once at start-up and repairs what a crash left:
//
//	store, err := sqlite.Open(ctx, path)
//	if err != nil {
//		return err // names the file and the cause: locked, read-only, too new, ...
//	}
//	defer store.Close()
//	interrupted, err := store.CloseInterruptedRuns(ctx)
package sqlite
