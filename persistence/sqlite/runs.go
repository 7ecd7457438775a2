package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// runColumns are a whole run record; the last stored seq is the last_seq
// of the run's last batch (see migrations/0003_event_log_and_implied_leaf.sql).
const runColumns = `r.id, s.id, r.start_time, r.end_time, r.outcome, r.error_message, ` + runLastSeq + `, r.events_pruned, r.request, r.usage, r.structured_output, r.prompt_entry_id, r.reserved_seq`

// runLastSeq is the last stored event seq of run r.
const runLastSeq = `coalesce((SELECT e.last_seq FROM run_events e WHERE e.run_id = r.id ORDER BY e.first_seq DESC LIMIT 1), r.last_seq)`

// StartRun implements [persistence.Store].
func (s *Store) StartRun(ctx context.Context, sessionID, runID string, req *agentdv1.RunRequest) error {
	if runID == "" || len(runID) > persistence.MaxIDLength {
		return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, RunID: runID, Detail: fmt.Sprintf("run id must be 1 to %d bytes", persistence.MaxIDLength)}
	}
	request, err := persistence.EncodeRunRequest(req)
	if err != nil {
		return opError(err, "encode the request of run %q", runID)
	}
	err = s.write(ctx, func(t *writeTx) error {
		sess, err := t.session(sessionID)
		if err != nil {
			return err
		}
		if _, err := t.exec(`INSERT INTO runs (id, session_pk, start_time, request, reserved_seq) VALUES (?, ?, ?, ?, ?)`, runID, sess.pk, s.now().UnixNano(), request, persistence.StartReservedSeq); isUnique(err) {
			return &persistence.Error{Kind: persistence.ErrConflict, RunID: runID, Detail: "a run with this id exists"}
		} else if err != nil {
			return err
		}
		for k, v := range req.GetMetadata() {
			if _, err := t.exec(`INSERT INTO run_metadata (run_id, key, value) VALUES (?, ?, ?)`, runID, k, v); err != nil {
				return err
			}
		}
		t.stageLastSeq(runID, 0)
		return nil
	})
	if err != nil {
		return opError(err, "record the start of run %q of session %q", runID, sessionID)
	}
	return nil
}

// EndRun implements [persistence.Store].
func (s *Store) EndRun(ctx context.Context, runID string, end persistence.RunEnd) error {
	if err := end.Check(runID); err != nil {
		return err
	}
	usage, output, err := persistence.EncodeRunEnd(end)
	if err != nil {
		return opError(err, "encode the end of run %q", runID)
	}
	err = s.write(ctx, func(t *writeTx) error {
		var ended sql.NullInt64
		if err := t.queryRow(`SELECT end_time FROM runs WHERE id = ?`, runID).Scan(&ended); errors.Is(err, sql.ErrNoRows) {
			return persistence.RunNotFound(runID)
		} else if err != nil {
			return err
		}
		if ended.Valid {
			return &persistence.Error{Kind: persistence.ErrConflict, RunID: runID, Detail: "run already ended"}
		}
		_, err := t.exec(`UPDATE runs SET end_time = ?, outcome = ?, error_message = ?, usage = ?, structured_output = ? WHERE id = ?`,
			s.now().UnixNano(), int32(end.Outcome), end.ErrorMessage, usage, output, runID)
		return err
	})
	if err != nil {
		return opError(err, "record the end of run %q", runID)
	}
	return nil
}

// ReserveEvents implements [persistence.Store].
func (s *Store) ReserveEvents(ctx context.Context, runID string, through uint64) error {
	if err := s.updateRun(ctx, runID, `UPDATE runs SET reserved_seq = max(reserved_seq, ?) WHERE id = ?`, through, runID); err != nil {
		return opError(err, "reserve the events of run %q up to seq %d", runID, through)
	}
	return nil
}

// SetRunPrompt implements [persistence.Store].
func (s *Store) SetRunPrompt(ctx context.Context, runID, entryID string) error {
	if err := s.updateRun(ctx, runID, `UPDATE runs SET prompt_entry_id = ? WHERE id = ?`, entryID, runID); err != nil {
		return opError(err, "record the prompt of run %q", runID)
	}
	return nil
}

// updateRun runs an UPDATE of one run's row; no such row is
// persistence.RunNotFound.
func (s *Store) updateRun(ctx context.Context, runID, query string, args ...any) error {
	return s.write(ctx, func(t *writeTx) error {
		res, err := t.exec(query, args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return persistence.RunNotFound(runID)
		}
		return nil
	})
}

// ListRuns implements [persistence.Store]. It reads the index of the
// session's runs by start time newest first; the metadata filter is one
// lookup of run_metadata per key.
func (s *Store) ListRuns(ctx context.Context, req persistence.ListRunsRequest) (*persistence.RunPage, error) {
	size, cursor, err := req.Cursor()
	if err != nil {
		return nil, err
	}
	q := `SELECT ` + runColumns + ` FROM runs r JOIN sessions s ON s.pk = r.session_pk WHERE s.id = ?`
	args := []any{req.SessionID}
	if len(req.Outcomes) > 0 {
		q += ` AND r.outcome IN (?` + strings.Repeat(`, ?`, len(req.Outcomes)-1) + `)`
		for _, o := range req.Outcomes {
			args = append(args, int32(o))
		}
	}
	if !req.StartAfter.IsZero() {
		q, args = q+` AND r.start_time >= ?`, append(args, req.StartAfter.UnixNano())
	}
	if !req.StartBefore.IsZero() {
		q, args = q+` AND r.start_time < ?`, append(args, req.StartBefore.UnixNano())
	}
	for _, k := range slices.Sorted(maps.Keys(req.Metadata)) {
		if v := req.Metadata[k]; v != "" {
			q, args = q+` AND EXISTS (SELECT 1 FROM run_metadata m WHERE m.run_id = r.id AND m.key = ? AND m.value = ?)`, append(args, k, v)
		} else {
			q, args = q+` AND EXISTS (SELECT 1 FROM run_metadata m WHERE m.run_id = r.id AND m.key = ?)`, append(args, k)
		}
	}
	if !cursor.Start.IsZero() {
		q, args = q+` AND (r.start_time < ? OR (r.start_time = ? AND r.id < ?))`, append(args, cursor.Start.UnixNano(), cursor.Start.UnixNano(), cursor.ID)
	}
	q, args = q+` ORDER BY r.start_time DESC, r.id DESC LIMIT ?`, append(args, size+1)
	var page *persistence.RunPage
	err = s.read(ctx, func(tx *sql.Tx) error {
		var exists int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = ?`, req.SessionID).Scan(&exists); errors.Is(err, sql.ErrNoRows) {
			return persistence.SessionNotFound(req.SessionID)
		} else if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, q, args...)
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

// GetRun implements [persistence.Store].
func (s *Store) GetRun(ctx context.Context, runID string) (*persistence.Run, error) {
	var out *persistence.Run
	err := s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.StmtContext(ctx, s.rRun).QueryContext(ctx, runID)
		if err != nil {
			return err
		}
		runs, err := scanRuns(rows)
		if err != nil {
			return err
		}
		if len(runs) == 0 {
			return persistence.RunNotFound(runID)
		}
		out = runs[0]
		return nil
	})
	return out, opError(err, "get run %q", runID)
}

// CloseInterruptedRuns implements [persistence.Store]. It reads only the
// partial index of active runs, so start-up stays fast however many runs
// and sessions the database holds. Every active run it finds belongs to a
// process that is gone: the file has one owner at a time (see Open).
func (s *Store) CloseInterruptedRuns(ctx context.Context) ([]*persistence.Run, error) {
	var out []*persistence.Run
	err := s.write(ctx, func(t *writeTx) error {
		rows, err := t.query(`SELECT ` + runColumns + ` FROM runs r JOIN sessions s ON s.pk = r.session_pk WHERE r.end_time IS NULL ORDER BY r.start_time, r.id`)
		if err != nil {
			return err
		}
		if out, err = scanRuns(rows); err != nil {
			return err
		}
		now := s.now()
		for _, r := range out {
			if _, err := t.exec(`UPDATE runs SET end_time = ?, outcome = ? WHERE id = ?`, now.UnixNano(), int32(agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED), r.ID); err != nil {
				return err
			}
			r.EndTime = time.Unix(0, now.UnixNano())
			r.Outcome = agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED
		}
		return nil
	})
	if err != nil {
		return nil, opError(err, "close interrupted runs")
	}
	return out, nil
}

// scanRuns reads rows of runColumns.
func scanRuns(rows *sql.Rows) ([]*persistence.Run, error) {
	defer rows.Close()
	var out []*persistence.Run
	for rows.Next() {
		var r persistence.Run
		var start int64
		var end sql.NullInt64
		var outcome int32
		var request, usage, output []byte
		var promptEntry sql.NullString
		if err := rows.Scan(&r.ID, &r.SessionID, &start, &end, &outcome, &r.ErrorMessage, &r.LastSeq, &r.EventsPruned, &request, &usage, &output, &promptEntry, &r.ReservedSeq); err != nil {
			return nil, err
		}
		if err := persistence.DecodeRunParts(&r, request, usage, output, promptEntry.String); err != nil {
			return nil, err
		}
		r.StartTime = time.Unix(0, start)
		if end.Valid {
			r.EndTime = time.Unix(0, end.Int64)
		}
		r.Outcome = agentdv1.RunOutcome(outcome)
		out = append(out, &r)
	}
	return out, rows.Err()
}
