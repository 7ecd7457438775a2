package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// runColumns are a whole run record, of runs r joined with sessions s.
const runColumns = `r.id, s.id, r.start_time, r.end_time, r.outcome, r.error_message, r.last_seq, r.events_pruned, coalesce(r.owner, ''), r.lease_expiry,
	r.request, r.usage, r.structured_output, coalesce(r.prompt_entry_id, ''), r.reserved_seq`

// insertRunMetadata follows an INSERT INTO runs in a WITH clause named
// run: it stores the request metadata ($keys, $values arrays) as rows of
// run_metadata in the same statement.
const insertRunMetadata = `, md AS (INSERT INTO run_metadata (run_id, key, value) SELECT run.id, m.k, m.v FROM run, unnest(%s::text[], %s::text[]) AS m(k, v))`

// runMetadataArrays are a request's metadata as the key and value arrays
// of insertRunMetadata.
func runMetadataArrays(req *agentdv1.RunRequest) (keys, values []string) {
	keys, values = []string{}, []string{}
	for _, k := range slices.Sorted(maps.Keys(req.GetMetadata())) {
		keys, values = append(keys, k), append(values, req.GetMetadata()[k])
	}
	return keys, values
}

// StartRun implements [persistence.Store]. The run has no owner: no lease
// or fence applies to it.
func (s *Store) StartRun(ctx context.Context, sessionID, runID string, req *agentdv1.RunRequest) error {
	if err := checkRunID(sessionID, runID); err != nil {
		return err
	}
	request, err := persistence.EncodeRunRequest(req)
	if err != nil {
		return opError(err, "encode the request of run %q", runID)
	}
	keys, values := runMetadataArrays(req)
	var one int
	err = s.pool.QueryRow(ctx, `WITH run AS (INSERT INTO runs (id, session_pk, start_time, request, reserved_seq) SELECT $1, pk, $3, $4, $7 FROM sessions WHERE id = $2 RETURNING id)`+
		fmt.Sprintf(insertRunMetadata, "$5", "$6")+` SELECT 1 FROM run`,
		runID, sessionID, s.timeNow(), request, keys, values, persistence.StartReservedSeq).Scan(&one)
	switch _, unique := uniqueViolation(err); {
	case unique:
		err = &persistence.Error{Kind: persistence.ErrConflict, RunID: runID, Detail: "a run with this id exists"}
	case errors.Is(err, pgx.ErrNoRows):
		err = persistence.SessionNotFound(sessionID)
	}
	return opError(err, "record the start of run %q of session %q", runID, sessionID)
}

// checkRunID refuses an empty or over-long run id.
func checkRunID(sessionID, runID string) error {
	if runID == "" || len(runID) > persistence.MaxIDLength {
		return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, RunID: runID, Detail: fmt.Sprintf("run id must be 1 to %d bytes", persistence.MaxIDLength)}
	}
	return nil
}

// EndRun implements [persistence.Store]. Ending a claimed run this way (not
// by its fence) takes the claim away: the generation moves, so the
// owner's later fenced writes, events included, fail with ErrFenced.
func (s *Store) EndRun(ctx context.Context, runID string, end persistence.RunEnd) error {
	return s.endRun(ctx, nil, runID, end)
}

// SetRunPrompt implements [persistence.Store].
func (s *Store) SetRunPrompt(ctx context.Context, runID, entryID string) error {
	return s.setRunPrompt(ctx, nil, runID, entryID)
}

func (s *Store) setRunPrompt(ctx context.Context, f *persistence.Fence, runID, entryID string) error {
	return opError(s.updateRun(ctx, f, "FOR SHARE", false, runID, `UPDATE runs SET prompt_entry_id = $2 WHERE id = $1`, entryID),
		"record the prompt of run %q", runID)
}

// ReserveEvents implements [persistence.Store].
func (s *Store) ReserveEvents(ctx context.Context, runID string, through uint64) error {
	return s.reserveEvents(ctx, nil, runID, through)
}

// reserveEvents moves the run's reservation up to through, under fence f
// when it is not nil.
func (s *Store) reserveEvents(ctx context.Context, f *persistence.Fence, runID string, through uint64) error {
	return opError(s.updateRun(ctx, f, "FOR UPDATE", true, runID, `UPDATE runs SET reserved_seq = GREATEST(reserved_seq, $2) WHERE id = $1`, int64(min(through, 1<<62))),
		"reserve the events of run %q up to seq %d", runID, through)
}

// updateRun runs an UPDATE of one run's row ($1 is the run id, arg $2).
// Under fence f, when it is not nil, the row is locked first (lock: FOR
// SHARE or FOR UPDATE) and the fence checked (afterEnd: the write is
// allowed on an ended run, as runState.check takes it). No such row is
// persistence.RunNotFound.
func (s *Store) updateRun(ctx context.Context, f *persistence.Fence, lock string, afterEnd bool, runID, query string, arg any) error {
	return s.write(ctx, func(tx pgx.Tx) error {
		if f != nil {
			r, err := lockRun(ctx, tx, runID, lock)
			if errors.Is(err, persistence.ErrNotFound) {
				return fencedMissing(*f)
			} else if err != nil {
				return err
			}
			if err := r.check(*f, afterEnd); err != nil {
				return err
			}
		}
		tag, err := tx.Exec(ctx, query, runID, arg)
		if err == nil && tag.RowsAffected() == 0 {
			err = persistence.RunNotFound(runID)
		}
		return err
	})
}

// ListRuns implements [persistence.Store]: the index of the session's
// runs by start time, newest first, and one run_metadata lookup per
// metadata key of the filter.
func (s *Store) ListRuns(ctx context.Context, req persistence.ListRunsRequest) (*persistence.RunPage, error) {
	size, cursor, err := req.Cursor()
	if err != nil {
		return nil, err
	}
	args := []any{}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	var q strings.Builder
	q.WriteString(`SELECT ` + runColumns + ` FROM runs r JOIN sessions s ON s.pk = r.session_pk WHERE r.session_pk = ` + arg(int64(0)))
	if len(req.Outcomes) > 0 {
		outcomes := make([]int32, len(req.Outcomes))
		for i, o := range req.Outcomes {
			outcomes[i] = int32(o)
		}
		q.WriteString(` AND r.outcome = ANY(` + arg(outcomes) + `)`)
	}
	if !req.StartAfter.IsZero() {
		q.WriteString(` AND r.start_time >= ` + arg(req.StartAfter))
	}
	if !req.StartBefore.IsZero() {
		q.WriteString(` AND r.start_time < ` + arg(req.StartBefore))
	}
	for _, k := range slices.Sorted(maps.Keys(req.Metadata)) {
		q.WriteString(` AND EXISTS (SELECT 1 FROM run_metadata m WHERE m.run_id = r.id AND m.key = ` + arg(k))
		if v := req.Metadata[k]; v != "" {
			q.WriteString(` AND m.value = ` + arg(v))
		}
		q.WriteString(`)`)
	}
	if !cursor.Start.IsZero() {
		q.WriteString(` AND (r.start_time, r.id) < (` + arg(cursor.Start) + `, ` + arg(cursor.ID) + `)`)
	}
	q.WriteString(` ORDER BY r.start_time DESC, r.id DESC LIMIT ` + arg(size+1))
	var page *persistence.RunPage
	err = s.read(ctx, func(tx pgx.Tx) error {
		sess, err := lookupSession(ctx, tx, req.SessionID)
		if err != nil {
			return err
		}
		args[0] = sess.pk
		rows, err := tx.Query(ctx, q.String(), args...)
		if err != nil {
			return err
		}
		runs, err := scanRuns(rows)
		if err != nil {
			return err
		}
		page = req.Page(runs, size)
		return nil
	})
	if err != nil {
		return nil, opError(err, "list the runs of session %q", req.SessionID)
	}
	return page, nil
}

// fencedWriter is the writer of a claimed run (Store.Fenced): every write
// checks its fence in the write's transaction.
type fencedWriter struct {
	s *Store
	f persistence.Fence
}

// Fenced implements [persistence.Shared].
func (s *Store) Fenced(f persistence.Fence) persistence.RunWriter {
	return &fencedWriter{s: s, f: f}
}

// Append is Store.Append under the fence.
func (w *fencedWriter) Append(ctx context.Context, sessionID string, entries ...*agentdv1.Entry) error {
	return w.s.append(ctx, &w.f, sessionID, entries)
}

// SetLeaf is Store.SetLeaf under the fence.
func (w *fencedWriter) SetLeaf(ctx context.Context, sessionID, entryID string) error {
	return w.s.setLeaf(ctx, &w.f, sessionID, entryID)
}

// AppendEvents is Store.AppendEvents under the fence. Unlike the other
// fenced writes it is allowed after the run ended, as long as it was the
// fence's holder that ended it (EndRun of this writer): the run's last
// events (agent_end) are stored after its end. See runState.check.
func (w *fencedWriter) AppendEvents(ctx context.Context, runID string, events []persistence.Event) error {
	if err := w.f.CheckRun(runID); err != nil {
		return err
	}
	return w.s.appendEvents(ctx, &w.f, runID, events)
}

// ReserveEvents is Store.ReserveEvents under the fence; like
// AppendEvents, it is allowed after the fence's holder ended the run.
func (w *fencedWriter) ReserveEvents(ctx context.Context, runID string, through uint64) error {
	if err := w.f.CheckRun(runID); err != nil {
		return err
	}
	return w.s.reserveEvents(ctx, &w.f, runID, through)
}

// EndRun is Store.EndRun under the fence. The generation stays, which is
// what lets the owner store the run's last events after it (see
// AppendEvents).
func (w *fencedWriter) EndRun(ctx context.Context, runID string, end persistence.RunEnd) error {
	if err := w.f.CheckRun(runID); err != nil {
		return err
	}
	return w.s.endRun(ctx, &w.f, runID, end)
}

// SetRunPrompt is Store.SetRunPrompt under the fence.
func (w *fencedWriter) SetRunPrompt(ctx context.Context, runID, entryID string) error {
	if err := w.f.CheckRun(runID); err != nil {
		return err
	}
	return w.s.setRunPrompt(ctx, &w.f, runID, entryID)
}

func (s *Store) endRun(ctx context.Context, f *persistence.Fence, runID string, end persistence.RunEnd) error {
	if err := end.Check(runID); err != nil {
		return err
	}
	usage, output, err := persistence.EncodeRunEnd(end)
	if err != nil {
		return opError(err, "encode the end of run %q", runID)
	}
	err = s.write(ctx, func(tx pgx.Tx) error {
		r, err := lockRun(ctx, tx, runID, "FOR UPDATE")
		if f != nil && errors.Is(err, persistence.ErrNotFound) {
			return fencedMissing(*f)
		} else if err != nil {
			return err
		}
		// A run its own fence ended passes the check and is refused
		// below, like ending a run twice.
		if f != nil {
			if err := r.check(*f, true); err != nil {
				return err
			}
		}
		if r.ended {
			return &persistence.Error{Kind: persistence.ErrConflict, RunID: runID, Detail: "run already ended"}
		}
		bump := 0
		if f == nil && r.owner != "" {
			bump = 1
		}
		_, err = tx.Exec(ctx, `UPDATE runs SET end_time = $2, outcome = $3, error_message = $4, generation = generation + $5, usage = $6, structured_output = $7 WHERE id = $1`,
			runID, s.timeNow(), int32(end.Outcome), end.ErrorMessage, bump, usage, output)
		return err
	})
	return opError(err, "record the end of run %q", runID)
}

// runState is a run's row as fences need it.
type runState struct {
	id         string
	sessionPK  int64
	owner      string
	generation int64
	ended      bool
	// leaseValid: the lease has not expired by the database's clock now
	// (clock_timestamp(), not the transaction's start, which may lie
	// before a wait for a lock).
	leaseValid  bool
	lastSeq     uint64
	reservedSeq uint64
}

// lockRun reads a run's row and locks it with lock ("FOR SHARE" or "FOR
// UPDATE") until the transaction ends: a fence checked under the lock
// holds until the write commits, since taking the claim away
// (CloseExpiredRuns, EndRun) must update the row.
func lockRun(ctx context.Context, tx pgx.Tx, runID, lock string) (runState, error) {
	r := runState{id: runID}
	err := tx.QueryRow(ctx, `SELECT session_pk, coalesce(owner, ''), generation, end_time IS NOT NULL, coalesce(lease_expiry > clock_timestamp(), false), last_seq, reserved_seq FROM runs WHERE id = $1 `+lock, runID).
		Scan(&r.sessionPK, &r.owner, &r.generation, &r.ended, &r.leaseValid, &r.lastSeq, &r.reservedSeq)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, persistence.RunNotFound(runID)
	}
	return r, err
}

// check returns an ErrFenced error unless fence f holds on the run: the
// same owner and generation, and the run active with its lease not
// expired. With afterEnd, a run that ended keeps its fence: only
// a fenced EndRun ends a run without moving the generation, so an ended
// run with f's generation was ended by f's holder itself, which still
// writes the run's last events (agent_end) after that. A run closed by
// CloseExpiredRuns or ended without fence has a new generation and
// refuses them.
func (r runState) check(f persistence.Fence, afterEnd bool) error {
	fenced := func(format string, args ...any) error {
		return &persistence.Error{Kind: persistence.ErrFenced, RunID: r.id, Detail: fmt.Sprintf(format, args...)}
	}
	switch {
	case r.owner != f.Owner || r.generation != f.Generation:
		return fenced("the run is claimed by %q generation %d, not %q generation %d", r.owner, r.generation, f.Owner, f.Generation)
	case r.ended && afterEnd:
		return nil
	case r.ended:
		return fenced("the run has ended")
	case !r.leaseValid:
		return fenced("the lease of %q expired", f.Owner)
	}
	return nil
}

// fencedMissing is the error of a fenced write of a run that does not
// exist (any more: its session was deleted).
func fencedMissing(f persistence.Fence) error {
	return &persistence.Error{Kind: persistence.ErrFenced, RunID: f.RunID, Detail: "the run does not exist"}
}

// checkFence checks fence f of a write of the session with key
// sessionPK, and keeps the run's row share-locked until the write
// commits.
func checkFence(ctx context.Context, tx pgx.Tx, f persistence.Fence, sessionPK int64, sessionID string) error {
	r, err := lockRun(ctx, tx, f.RunID, "FOR SHARE")
	if errors.Is(err, persistence.ErrNotFound) {
		return fencedMissing(f)
	} else if err != nil {
		return err
	}
	if err := r.check(f, false); err != nil {
		return err
	}
	if r.sessionPK != sessionPK {
		return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, RunID: f.RunID, Detail: "the run belongs to another session"}
	}
	return nil
}

// GetRun implements [persistence.Store].
func (s *Store) GetRun(ctx context.Context, runID string) (*persistence.Run, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+runColumns+` FROM runs r JOIN sessions s ON s.pk = r.session_pk WHERE r.id = $1`, runID)
	var runs []*persistence.Run
	if err == nil {
		runs, err = scanRuns(rows)
	}
	if err == nil && len(runs) == 0 {
		err = persistence.RunNotFound(runID)
	}
	if err != nil {
		return nil, opError(err, "get run %q", runID)
	}
	return runs[0], nil
}

// CloseInterruptedRuns implements [persistence.Store] for runs without
// owner (StartRun). Claimed runs are left alone: other replicas may be
// running them, and CloseExpiredRuns closes those whose lease expired.
func (s *Store) CloseInterruptedRuns(ctx context.Context) ([]*persistence.Run, error) {
	rows, err := s.pool.Query(ctx, `UPDATE runs r SET end_time = $1, outcome = $2
		FROM sessions s WHERE s.pk = r.session_pk AND r.end_time IS NULL AND r.owner IS NULL
		RETURNING `+runColumns, s.timeNow(), int32(agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED))
	var out []*persistence.Run
	if err == nil {
		out, err = scanRuns(rows)
	}
	if err != nil {
		return nil, opError(err, "close interrupted runs")
	}
	sortRuns(out)
	return out, nil
}

// scanRuns reads rows of runColumns.
func scanRuns(rows pgx.Rows) ([]*persistence.Run, error) {
	defer rows.Close()
	var out []*persistence.Run
	for rows.Next() {
		var r persistence.Run
		var end, lease *time.Time
		var outcome int32
		var request, usage, output []byte
		var promptEntry string
		if err := rows.Scan(&r.ID, &r.SessionID, &r.StartTime, &end, &outcome, &r.ErrorMessage, &r.LastSeq, &r.EventsPruned, &r.Owner, &lease,
			&request, &usage, &output, &promptEntry, &r.ReservedSeq); err != nil {
			return nil, err
		}
		if err := persistence.DecodeRunParts(&r, request, usage, output, promptEntry); err != nil {
			return nil, err
		}
		if end != nil {
			r.EndTime = *end
		}
		if lease != nil {
			r.LeaseExpiry = *lease
		}
		r.Outcome = agentdv1.RunOutcome(outcome)
		out = append(out, &r)
	}
	return out, rows.Err()
}

// timeFromNanos is a time stored as Unix nanoseconds.
func timeFromNanos(n int64) time.Time { return time.Unix(0, n) }

// sortRuns orders runs oldest first (by start, then id).
func sortRuns(runs []*persistence.Run) {
	slices.SortFunc(runs, func(a, b *persistence.Run) int {
		if c := a.StartTime.Compare(b.StartTime); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}
