package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/agentd/agentd/persistence"
)

// Store is the SQLite [persistence.Store]. Safe for concurrent use.
//
// The methods live in one file per role: writer.go (the one writer
// connection and group commit), sessions.go, entries.go, runs.go and
// events.go; open.go opens and locks the file.
type Store struct {
	file   string
	writer *writer
	reader *sql.DB
	now    func() time.Time

	// Background checkpoints (see checkpointLoop).
	checkpointer   *sql.DB
	commits        atomic.Int64
	checkpointKick chan struct{}
	checkpointStop chan struct{}
	checkpointDone sync.WaitGroup
	// walLimit is the WAL size past which checkpoints try to empty it;
	// walWarned when the last warning about it was logged (checkpointLoop
	// only).
	walLimit  int64
	walWarned time.Time
	// memoryIdle is how often checkpointLoop looks for an idle writer.
	memoryIdle time.Duration
	logger     *slog.Logger
	// scrub asks checkpoints to empty the WAL whatever its size: it holds
	// earlier versions of pages a redaction overwrote.
	scrub atomic.Bool

	closeOnce sync.Once
	closeErr  error
	// owner is this process's claim on the file, released last.
	owner *ownerLock

	// records are the session records GetSession read, kept true by the
	// writer (records.go).
	records *recordCache

	// eventEncoders compress event batches on their callers' goroutines
	// (*rowcodec.Encoder, with compression as the writer's).
	eventEncoders sync.Pool

	// Read statements, prepared lazily per reader connection by database/sql.
	rSession *sql.Stmt
	rTree    *sql.Stmt
	// rNewestFirst is a session's entries from the newest (ContextPath's
	// walk, which stops where the path ends).
	rNewestFirst *sql.Stmt
	// rTreePage is a page of tree nodes: payloads only where no preview
	// was stored; rLabels the Label entries.
	rTreePage, rLabels *sql.Stmt
	rEntry             *sql.Stmt
	rPage              *sql.Stmt
	rEvents            *sql.Stmt
	rRun               *sql.Stmt
	rSessions          *sql.Stmt
}

var _ persistence.Store = (*Store)(nil)

// maxSeq is the largest per-session sequence number: entries.key packs
// session_pk and seq into 64 bits, 32 for seq.
const maxSeq = 1<<32 - 1

// The columns of a session with its implied leaf, from the view readers
// use too (migrations/0008_reader_views.sql; the leaf's rule is in
// migrations/0003_event_log_and_implied_leaf.sql).
const (
	sessionFrom = ` FROM session_heads s`
	// sessionState is what the writer and the readers need to find a
	// session's path: pk, leaf, and the highest seq.
	sessionState = `s.session_pk, coalesce(s.leaf_entry_id, ''), s.last_seq`
	// sessionColumns are a whole session record.
	sessionColumns = sessionState + `, s.session_id, s.create_time, s.update_time, s.title, s.config, s.origin_session_id, s.origin_entry_id, s.tenant, s.origin_run_id, s.origin_tool_call_id, s.origin_profile`
	sqlSessionByID = `SELECT ` + sessionState + sessionFrom + ` WHERE s.session_id = ?`
	// A path is loaded with one range scan of the session's key range (a
	// sequential read in append order); the tree is walked in memory and
	// only the entries on the path are decoded.
	sqlTree = `SELECT seq, id, coalesce(parent_id, ''), encoding, payload FROM entries WHERE key > ?1 * 4294967296 AND key < (?1 + 1) * 4294967296 ORDER BY key`
)

func newStore(ctx context.Context, path string, o options, w *writer, reader, checkpointer *sql.DB) (*Store, error) {
	s := &Store{file: path, writer: w, reader: reader, now: time.Now, checkpointer: checkpointer,
		checkpointKick: make(chan struct{}, 1), checkpointStop: make(chan struct{}),
		walLimit: o.walLimit, logger: o.logger, memoryIdle: o.memoryIdle, records: newRecordCache()}
	prep := []struct {
		dst  **sql.Stmt
		text string
	}{
		{&s.rSession, sqlSessionByID},
		// One statement, so the row and its labels are one snapshot
		// without a transaction around them.
		{&s.rSessions, `SELECT ` + sessionColumns + `, (SELECT json_group_object(l.key, l.value) FROM session_labels l WHERE l.session_pk = s.session_pk)` +
			sessionFrom + ` WHERE s.session_id = ?`},
		{&s.rTree, sqlTree},
		{&s.rNewestFirst, `SELECT seq, id, coalesce(parent_id, ''), kind, encoding, payload FROM entries WHERE key > ?1 * 4294967296 AND key < (?1 + 1) * 4294967296 ORDER BY key DESC`},
		{&s.rTreePage, `SELECT seq, id, coalesce(parent_id, ''), kind, create_time, preview, encoding, CASE WHEN preview IS NULL THEN payload END FROM entries WHERE key > ?1 * 4294967296 + ?2 AND key < (?1 + 1) * 4294967296 ORDER BY key LIMIT ?3`},
		{&s.rLabels, `SELECT seq, id, coalesce(parent_id, ''), encoding, payload FROM entries WHERE session_pk = ?1 AND kind = 'label' ORDER BY session_pk, key`},
		{&s.rEntry, sqlEntryByID},
		{&s.rPage, `SELECT seq, id, coalesce(parent_id, ''), encoding, payload FROM entries WHERE key > ?1 * 4294967296 + ?2 AND key < (?1 + 1) * 4294967296 ORDER BY key LIMIT ?3`},
		{&s.rEvents, `SELECT first_seq, last_seq, encoding, payload FROM run_events WHERE run_id = ?1 AND first_seq <= max(?2, ?4) + ?3 AND last_seq > ?2 ORDER BY first_seq`},
		{&s.rRun, `SELECT ` + runColumns + ` FROM runs r JOIN sessions s ON s.pk = r.session_pk WHERE r.id = ?`},
	}
	for _, p := range prep {
		st, err := reader.PrepareContext(ctx, p.text)
		if err != nil {
			return nil, fmt.Errorf("prepare %q: %w", p.text, err)
		}
		*p.dst = st
	}
	s.checkpointDone.Add(1)
	go s.checkpointLoop()
	return s, nil
}

// checkpointLoop copies committed WAL pages back into the database file
// whenever a commit asks for it, and every checkpointIdle otherwise. Done
// here rather than by SQLite's auto-checkpoint in the committing
// connection, because a checkpoint fsyncs twice and would stall the append
// that happened to trigger it (and the event stream waiting on it) by
// milliseconds. A failed checkpoint is harmless: the next one, or the
// writer's backstop auto-checkpoint, catches up.
//
// The same goroutine gives the writer's page cache back once the writer
// has been idle (see releaseIdleMemory).
func (s *Store) checkpointLoop() {
	defer s.checkpointDone.Done()
	tick := time.NewTicker(checkpointIdle)
	defer tick.Stop()
	idle := time.NewTicker(s.memoryIdle)
	defer idle.Stop()
	// seen is the commit count at the last idle tick; released the count
	// at the last release, so an idle store releases once, not every tick.
	seen, released := s.commits.Load(), s.commits.Load()
	for {
		select {
		case <-s.checkpointStop:
			return
		case <-s.checkpointKick:
		case <-tick.C:
		case <-idle.C:
			if n := s.commits.Load(); n == seen && n != released && s.releaseIdleMemory() {
				released = n
			} else {
				seen = n
			}
			continue
		}
		s.checkpoint()
	}
}

// MemoryIdle is how long the writer must commit nothing (between one and
// two MemoryIdle) before its page cache goes back to the system. The cache
// (writerCacheKiB) fills under load and would otherwise stay allocated for
// as long as the store is open; after an idle spell the first writes read
// their pages back from the file (from the kernel's page cache, a few
// preads each).
const MemoryIdle = 2 * time.Second

// releaseIdleMemory empties the writer's page cache and returns the freed
// memory to the system, unless a write is running (then the writer is not
// idle and nothing is released). It reports whether it tried: a failure is
// logged and not retried before the writer has been busy and idle again.
func (s *Store) releaseIdleMemory() bool {
	w := s.writer
	select {
	case w.leader <- struct{}{}:
	default:
		return false
	}
	_, err := w.conn.ExecContext(context.Background(), "PRAGMA shrink_memory")
	<-w.leader
	if err != nil {
		s.logger.Warn("could not release the writer's page cache", "db", s.file, "err", err)
		return true
	}
	returnFreedMemory()
	return true
}

// checkpoint runs one background checkpoint. PASSIVE never blocks the
// writer or any reader. The WAL is reused from its start once every frame
// is in the database file and no reader still needs one; a reader that
// holds an old snapshot (an outside program in a long read transaction)
// keeps it from being reused, so the WAL grows by what is written
// meanwhile. Past walLimit, a TRUNCATE checkpoint is tried without waiting
// for readers: it fails at once while the old snapshot is held, and
// empties the WAL file as soon as the read has ended.
func (s *Store) checkpoint() {
	_, _ = s.checkpointer.Exec("PRAGMA wal_checkpoint(PASSIVE)")
	fi, err := os.Stat(s.file + "-wal")
	scrub := s.scrub.Load()
	if err != nil || (fi.Size() <= s.walLimit && !scrub) {
		return
	}
	var busy, frames, done int
	err = s.checkpointer.QueryRow("PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &frames, &done)
	if err == nil && busy == 0 && scrub {
		s.scrub.CompareAndSwap(true, false)
	}
	if (err != nil || busy != 0) && fi.Size() > s.walLimit {
		if now := time.Now(); now.Sub(s.walWarned) > walWarnEvery {
			s.walWarned = now
			s.logger.Warn("the database's WAL is large because a reader holds an old snapshot; it shrinks once that read transaction ends",
				"db", s.file, "wal_bytes", fi.Size(), "limit_bytes", s.walLimit)
		}
	}
}

// scrubWAL has the next checkpoints empty the WAL, until one manages.
func (s *Store) scrubWAL() {
	s.scrub.Store(true)
	select {
	case s.checkpointKick <- struct{}{}:
	default:
	}
}

// The background checkpoint's timing.
const (
	// checkpointIdle is how often a checkpoint runs without commits: after
	// a long outside read ended, the WAL shrinks within this.
	checkpointIdle = 5 * time.Second
	// walWarnEvery spaces the warnings about a WAL held large.
	walWarnEvery = 10 * time.Minute
)

// committed counts a commit and asks for a background checkpoint every
// checkpointEvery commits.
func (s *Store) committed() {
	if s.commits.Add(1)%checkpointEvery == 0 {
		select {
		case s.checkpointKick <- struct{}{}:
		default: // one is pending already
		}
	}
}

// Close checkpoints the WAL into the database file (so the file alone is a
// complete copy), closes all connections and releases the file for another
// process. Closing again returns the first result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Store) close() error {
	s.shutdownWriter()
	close(s.checkpointStop)
	s.checkpointDone.Wait()
	errs := []error{s.checkpointer.Close()}
	for _, st := range []*sql.Stmt{s.rSession, s.rSessions, s.rTree, s.rNewestFirst, s.rTreePage, s.rLabels, s.rEntry, s.rPage, s.rEvents, s.rRun} {
		errs = append(errs, st.Close())
	}
	errs = append(errs, s.reader.Close())
	errs = append(errs, s.writer.close())
	if s.owner != nil {
		errs = append(errs, s.owner.release())
	}
	return errors.Join(errs...)
}

// read runs fn in a read transaction on a reader connection, so all its
// queries see one snapshot.
func (s *Store) read(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.reader.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only; nothing to keep
	return fn(tx)
}

// opError wraps an error with the operation that failed, unless it is one
// of the store's typed errors, which name what they are about already.
func opError(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var pe *persistence.Error
	var ce *persistence.CorruptEntryError
	if errors.As(err, &pe) || errors.As(err, &ce) {
		return err
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

func isUnique(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.ExtendedCode == sqlite3.ErrConstraintUnique || se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey)
}
