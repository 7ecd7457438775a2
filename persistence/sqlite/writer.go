package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/internal/rowcodec"
)

// writer is the one connection that writes, with group commit: writes
// queue up, and whichever caller holds the leader token runs every queued
// write in one transaction, so one commit serves many sessions' appends;
// when one write fails, the transaction is rolled back and the others run
// again without it.
// A caller that finds nobody leading runs its own write at once, on its
// own goroutine: an append that does not contend hands nothing to another
// goroutine (each handoff costs futex wake-ups). Queued writes run in
// arrival order, which keeps latency fair under load.
//
// Statements run with context.Background(): a cancellable context makes
// go-sqlite3 watch it from an extra goroutine on every statement, and
// interrupting a statement could abort the transaction shared with other
// writes. A request is checked for cancellation before it runs instead.
type writer struct {
	conn *sql.Conn
	db   *sql.DB

	// leader holds a token while a caller runs queued writes.
	leader chan struct{}

	mu     sync.Mutex
	queue  []*writeRequest
	closed bool

	// Owned by the leader.
	stmts    map[string]*sql.Stmt
	sessions map[string]sessionCache
	lastSeqs map[string]uint64 // the last stored event seq of runs
	payloads rowcodec.Encoder
	buf      []byte
}

func newWriter(db *sql.DB, conn *sql.Conn, compress bool) *writer {
	return &writer{conn: conn, db: db, leader: make(chan struct{}, 1), stmts: map[string]*sql.Stmt{},
		sessions: map[string]sessionCache{}, lastSeqs: map[string]uint64{}, payloads: rowcodec.Encoder{Off: !compress}}
}

// writeRequest is one write waiting to run.
type writeRequest struct {
	ctx  context.Context
	fn   func(*writeTx) error
	err  error
	done chan struct{}
}

// sessionCache is what the writer knows about a session to append to it:
// its internal key, its leaf ("" for an empty transcript) and the highest
// seq of its entries. The writer is the only one that changes sessions
// (the file has one owner, see Open), so the cache is never stale.
type sessionCache struct {
	pk      int64
	leaf    string
	lastSeq int64
}

// stagedSession is a change to the writer's session cache that takes effect
// only once the batch commits, and what the write did to the session's
// record (recordCache): nothing (it only read the session), created it,
// appended at this time, changed it otherwise, or deleted it.
type stagedSession struct {
	state    sessionCache
	deleted  bool
	changed  bool
	created  *persistence.Session
	appended int64 // Unix nanoseconds; 0 without an append
}

// maxCachedSessions bounds the writer's session cache (about 100 bytes a
// session); past it, arbitrary sessions are dropped and reloaded on their
// next write.
const maxCachedSessions = 10_000

// maxCachedRuns bounds the writer's cache of runs' last event seqs; past
// it, the cache starts again empty.
const maxCachedRuns = 10_000

// maxWriteBatch bounds how many writes share one commit.
const maxWriteBatch = 256

// errClosed is returned by writes after Close.
var errClosed = errors.New("the store is closed")

// write runs fn atomically on the writer connection: everything fn did is
// committed, or nothing is when fn or the commit fails. fn must not keep
// the writeTx, and must be safe to run again from the start: the writer
// reruns a batch when one of its other writes fails.
func (s *Store) write(ctx context.Context, fn func(*writeTx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := s.writer
	req := &writeRequest{ctx: ctx, fn: fn, done: make(chan struct{})}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return errClosed
	}
	w.queue = append(w.queue, req)
	w.mu.Unlock()
	// Once queued, fn may run at any moment: wait for its outcome whatever
	// ctx does, so the caller never sees a write that later commits.
	for {
		select {
		case <-req.done:
			return req.err
		case w.leader <- struct{}{}:
			s.lead()
			<-w.leader
		}
	}
}

// lead runs the writes queued now (up to maxWriteBatch) as one batch.
func (s *Store) lead() {
	w := s.writer
	w.mu.Lock()
	n := min(len(w.queue), maxWriteBatch)
	batch := w.queue[:n:n]
	w.queue = w.queue[n:]
	if len(w.queue) == 0 {
		w.queue = nil
	}
	w.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	errs := s.commitBatch(batch)
	for i, r := range batch {
		r.err = errs[i]
		close(r.done)
	}
}

// shutdownWriter refuses new writes, runs the ones already queued and
// keeps the leader token, so nothing writes any more.
func (s *Store) shutdownWriter() {
	w := s.writer
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.leader <- struct{}{}
	for {
		w.mu.Lock()
		empty := len(w.queue) == 0
		w.mu.Unlock()
		if empty {
			return
		}
		s.lead()
	}
}

// close checkpoints the WAL into the database file and closes the
// connection; after shutdown.
func (w *writer) close() error {
	var errs []error
	for _, st := range w.stmts {
		errs = append(errs, st.Close())
	}
	if _, err := w.conn.ExecContext(context.Background(), "PRAGMA optimize; PRAGMA wal_checkpoint(TRUNCATE)"); err != nil && !errors.Is(err, sql.ErrConnDone) {
		errs = append(errs, fmt.Errorf("checkpoint: %w", err))
	}
	errs = append(errs, w.conn.Close(), w.db.Close())
	return errors.Join(errs...)
}

// stmt returns the statement for query, prepared once on the writer
// connection.
func (w *writer) stmt(query string) (*sql.Stmt, error) {
	if st, ok := w.stmts[query]; ok {
		return st, nil
	}
	st, err := w.conn.PrepareContext(context.Background(), query)
	if err != nil {
		return nil, fmt.Errorf("prepare %q: %w", query, err)
	}
	w.stmts[query] = st
	return st, nil
}

// writeTx is what a write function gets: statements on the batch's
// transaction and the writer's session cache seen through the changes of
// the writes before it in the batch.
type writeTx struct {
	w *writer
	// batch holds the cache changes of the earlier, successful writes of
	// this batch; staged those of this write, merged into batch only if it
	// succeeds.
	batch, staged map[string]stagedSession
	// The same for the runs' last event seqs; forgetRuns drops them all
	// (a deleted session's runs).
	batchSeqs, stagedSeqs  map[string]uint64
	forgetRuns, forgetting bool
}

// lastSeq returns the last stored event seq of a run and whether the run
// exists, from the cache when it holds it.
func (t *writeTx) lastSeq(runID string) (uint64, bool, error) {
	for _, m := range []map[string]uint64{t.stagedSeqs, t.batchSeqs} {
		if seq, ok := m[runID]; ok {
			return seq, true, nil
		}
	}
	if !t.forgetRuns && !t.forgetting {
		if seq, ok := t.w.lastSeqs[runID]; ok {
			return seq, true, nil
		}
	}
	var seq uint64
	if err := t.queryRow(`SELECT `+runLastSeq+` FROM runs r WHERE r.id = ?`, runID).Scan(&seq); errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	} else if err != nil {
		return 0, false, err
	}
	return seq, true, nil
}

// stageLastSeq records a run's last event seq after this write.
func (t *writeTx) stageLastSeq(runID string, seq uint64) {
	if t.stagedSeqs == nil {
		t.stagedSeqs = map[string]uint64{}
	}
	t.stagedSeqs[runID] = seq
}

// exec runs a statement of the batch's transaction.
func (t *writeTx) exec(query string, args ...any) (sql.Result, error) {
	st, err := t.w.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(context.Background(), args...)
}

// queryRow runs a query of the batch's transaction that returns one row.
func (t *writeTx) queryRow(query string, args ...any) *sql.Row {
	st, err := t.w.stmt(query)
	if err != nil {
		// A Row cannot carry the error before Scan; an unpreparable query
		// is a programming error that every test exercises.
		panic(err)
	}
	return st.QueryRowContext(context.Background(), args...)
}

// query runs a query of the batch's transaction.
func (t *writeTx) query(query string, args ...any) (*sql.Rows, error) {
	st, err := t.w.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(context.Background(), args...)
}

// session returns the session's current state, from the cache when it
// holds it and otherwise from the database.
func (t *writeTx) session(sessionID string) (sessionCache, error) {
	for _, m := range []map[string]stagedSession{t.staged, t.batch} {
		if c, ok := m[sessionID]; ok {
			if c.deleted {
				return sessionCache{}, persistence.SessionNotFound(sessionID)
			}
			return c.state, nil
		}
	}
	if st, ok := t.w.sessions[sessionID]; ok {
		return st, nil
	}
	var st sessionCache
	if err := t.queryRow(sqlSessionByID, sessionID).Scan(&st.pk, &st.leaf, &st.lastSeq); errors.Is(err, sql.ErrNoRows) {
		return sessionCache{}, persistence.SessionNotFound(sessionID)
	} else if err != nil {
		return sessionCache{}, err
	}
	// The row may hold uncommitted changes of this batch: cache it only if
	// the batch commits.
	t.stage(sessionID, st)
	return st, nil
}

// stage records the session's state after this write.
func (t *writeTx) stage(sessionID string, st sessionCache) {
	if t.staged == nil {
		t.staged = map[string]stagedSession{}
	}
	c := t.staged[sessionID]
	c.state, c.deleted = st, false
	t.staged[sessionID] = c
}

// stageAppend records the session's state after this write appended to it
// at time now.
func (t *writeTx) stageAppend(sessionID string, st sessionCache, now time.Time) {
	t.stage(sessionID, st)
	c := t.staged[sessionID]
	c.appended = max(c.appended, now.UnixNano())
	t.staged[sessionID] = c
}

// created records that this write created the session, whose record is
// rec (never changed afterwards).
func (t *writeTx) created(sessionID string, rec *persistence.Session) {
	c := t.staged[sessionID]
	c.created = rec
	t.staged[sessionID] = c
}

// touch records that this write changes the session's record other than
// by appending (its title, config, labels or leaf), after stage.
func (t *writeTx) touch(sessionID string) {
	c := t.staged[sessionID]
	c.changed = true
	t.staged[sessionID] = c
}

// forget records that this write deletes the session, and with it runs
// whose cached seqs are then no longer worth trusting.
func (t *writeTx) forget(sessionID string) {
	if t.staged == nil {
		t.staged = map[string]stagedSession{}
	}
	t.staged[sessionID] = stagedSession{deleted: true, changed: true}
	t.forgetting = true
}

// The transaction control statements of a batch. BEGIN IMMEDIATE takes the
// write lock at once, so a transaction never fails half-way on a lock
// upgrade.
const (
	sqlBegin    = "BEGIN IMMEDIATE"
	sqlCommit   = "COMMIT"
	sqlRollback = "ROLLBACK"
)

// commitBatch runs the batch's writes in one transaction and commits it.
// Writes rarely fail, so they run without a savepoint each (two statements
// more per write); when one fails, the transaction is rolled back and the
// others run again without it. The session cache takes the batch's changes
// only after the commit.
func (s *Store) commitBatch(batch []*writeRequest) []error {
	w := s.writer
	errs := make([]error, len(batch))
	done := make([]bool, len(batch)) // failed or cancelled: not run again
	ctl := func(t *writeTx, query string) error {
		_, err := t.exec(query)
		return err
	}
	for {
		t := &writeTx{w: w, batch: map[string]stagedSession{}, batchSeqs: map[string]uint64{}}
		if err := ctl(t, sqlBegin); err != nil {
			return s.failBatch(errs, done, fmt.Errorf("begin write: %w", err))
		}
		failed, ran := false, 0
		for i, r := range batch {
			if done[i] {
				continue
			}
			if err := r.ctx.Err(); err != nil {
				errs[i], done[i] = err, true
				continue
			}
			// Emptied, not dropped: the maps serve the batch's writes in turn.
			clear(t.staged)
			clear(t.stagedSeqs)
			t.forgetting = false
			if err := r.fn(t); err != nil {
				errs[i], done[i], failed = err, true, true
				break
			}
			for id, c := range t.staged {
				if prev, ok := t.batch[id]; ok {
					// The record sees the batch's writes together.
					c.changed = c.changed || prev.changed
					c.appended = max(c.appended, prev.appended)
					if c.created == nil {
						c.created = prev.created
					}
				}
				t.batch[id] = c
			}
			for id, seq := range t.stagedSeqs {
				t.batchSeqs[id] = seq
			}
			t.forgetRuns = t.forgetRuns || t.forgetting
			ran++
		}
		if failed || ran == 0 {
			_ = ctl(t, sqlRollback)
			if failed && slices.Contains(done, false) {
				continue // the others again, without the failed write
			}
			return errs
		}
		if err := ctl(t, sqlCommit); err != nil {
			_ = ctl(t, sqlRollback)
			return s.failBatch(errs, done, fmt.Errorf("commit: %w", err))
		}
		for id, c := range t.batch {
			if c.deleted {
				delete(w.sessions, id)
				continue
			}
			if _, ok := w.sessions[id]; !ok && len(w.sessions) >= maxCachedSessions {
				for victim := range w.sessions {
					delete(w.sessions, victim)
					break
				}
			}
			w.sessions[id] = c.state
		}
		if t.forgetRuns || len(w.lastSeqs) > maxCachedRuns {
			clear(w.lastSeqs)
		}
		for id, seq := range t.batchSeqs {
			w.lastSeqs[id] = seq
		}
		s.records.committed(t.batch)
		s.committed()
		return errs
	}
}

// failBatch gives err to every write of the batch that has no outcome yet.
func (s *Store) failBatch(errs []error, done []bool, err error) []error {
	// The transaction's state is unknown: trust nothing.
	clear(s.writer.sessions)
	clear(s.writer.lastSeqs)
	s.records.clear()
	for i := range errs {
		if !done[i] {
			errs[i] = err
		}
	}
	return errs
}
