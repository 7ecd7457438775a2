package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// runColumns are a whole run record; the last stored seq is the last_seq
// of the run's last batch (see migrations/0003_event_log_and_implied_leaf.sql).
const runColumns = `r.id, s.id, r.start_time, r.end_time, r.outcome, r.error_message, ` + runLastSeq + `, r.events_pruned`

// runLastSeq is the last stored event seq of run r.
const runLastSeq = `coalesce((SELECT e.last_seq FROM run_events e WHERE e.run_id = r.id ORDER BY e.first_seq DESC LIMIT 1), r.last_seq)`

// StartRun implements [persistence.Store].
func (s *Store) StartRun(ctx context.Context, sessionID, runID string) error {
	if runID == "" || len(runID) > persistence.MaxIDLength {
		return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, RunID: runID, Detail: fmt.Sprintf("run id must be 1 to %d bytes", persistence.MaxIDLength)}
	}
	err := s.write(ctx, func(t *writeTx) error {
		sess, err := t.session(sessionID)
		if err != nil {
			return err
		}
		if _, err := t.exec(`INSERT INTO runs (id, session_pk, start_time) VALUES (?, ?, ?)`, runID, sess.pk, s.now().UnixNano()); isUnique(err) {
			return &persistence.Error{Kind: persistence.ErrConflict, RunID: runID, Detail: "a run with this id exists"}
		} else if err != nil {
			return err
		}
		t.stageLastSeq(runID, 0)
		return nil
	})
	return opError(err, "record the start of run %q of session %q", runID, sessionID)
}

// EndRun implements [persistence.Store].
func (s *Store) EndRun(ctx context.Context, runID string, outcome agentdv1.RunOutcome, errorMessage string) error {
	if outcome == agentdv1.RunOutcome_RUN_OUTCOME_UNSPECIFIED {
		return &persistence.Error{Kind: persistence.ErrInvalid, RunID: runID, Detail: "outcome is unspecified"}
	}
	err := s.write(ctx, func(t *writeTx) error {
		var ended sql.NullInt64
		if err := t.queryRow(`SELECT end_time FROM runs WHERE id = ?`, runID).Scan(&ended); errors.Is(err, sql.ErrNoRows) {
			return persistence.RunNotFound(runID)
		} else if err != nil {
			return err
		}
		if ended.Valid {
			return &persistence.Error{Kind: persistence.ErrConflict, RunID: runID, Detail: "run already ended"}
		}
		_, err := t.exec(`UPDATE runs SET end_time = ?, outcome = ?, error_message = ? WHERE id = ?`, s.now().UnixNano(), int32(outcome), errorMessage, runID)
		return err
	})
	return opError(err, "record the end of run %q", runID)
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
		if err := rows.Scan(&r.ID, &r.SessionID, &start, &end, &outcome, &r.ErrorMessage, &r.LastSeq, &r.EventsPruned); err != nil {
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
