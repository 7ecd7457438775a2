package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// indexOneClaimedRun is the partial unique index that allows one active
// claimed run per session (see migrations/0001_init.sql).
const indexOneClaimedRun = "runs_one_claimed_per_session"

// claimAttempts bounds ClaimRun's retries when the active run that
// refused it ended before it could be read back.
const claimAttempts = 3

// ClaimRun implements [persistence.Shared]. The lease starts on the
// database's clock.
func (s *Store) ClaimRun(ctx context.Context, sessionID, runID, owner string, lease time.Duration, req *agentdv1.RunRequest) (persistence.Fence, error) {
	if err := checkRunID(sessionID, runID); err != nil {
		return persistence.Fence{}, err
	}
	if owner == "" || lease <= 0 {
		return persistence.Fence{}, &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, RunID: runID, Detail: fmt.Sprintf("a claim needs an owner and a positive lease (owner %q, lease %v)", owner, lease)}
	}
	request, err := persistence.EncodeRunRequest(req)
	if err != nil {
		return persistence.Fence{}, opError(err, "encode the request of run %q", runID)
	}
	keys, values := runMetadataArrays(req)
	for range claimAttempts {
		var gen int64
		err := s.pool.QueryRow(ctx, `WITH run AS (INSERT INTO runs (id, session_pk, start_time, owner, generation, lease_expiry, request, reserved_seq)
			SELECT $1, pk, $3, $4, 1, now() + $5 * interval '1 microsecond', $6, $9 FROM sessions WHERE id = $2 RETURNING id, generation)`+
			fmt.Sprintf(insertRunMetadata, "$7", "$8")+` SELECT generation FROM run`,
			runID, sessionID, s.timeNow(), owner, lease.Microseconds(), request, keys, values, persistence.StartReservedSeq).Scan(&gen)
		if err == nil {
			return persistence.Fence{RunID: runID, Owner: owner, Generation: gen}, nil
		}
		index, unique := uniqueViolation(err)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			err = persistence.SessionNotFound(sessionID)
		case unique && index == indexOneClaimedRun:
			active, aerr := s.ActiveRun(ctx, sessionID)
			if errors.Is(aerr, persistence.ErrNotFound) {
				continue // it ended meanwhile: try again
			} else if aerr != nil {
				err = aerr
			} else {
				err = &persistence.ActiveRunError{Run: active}
			}
		case unique:
			err = &persistence.Error{Kind: persistence.ErrConflict, RunID: runID, Detail: "a run with this id exists"}
		}
		return persistence.Fence{}, opError(err, "claim run %q of session %q for %q", runID, sessionID, owner)
	}
	return persistence.Fence{}, &persistence.Error{Kind: persistence.ErrConflict, SessionID: sessionID, RunID: runID, Detail: "the session's active run keeps changing"}
}

// RenewLeases implements [persistence.Shared]: one statement, on the
// database's clock. A lease that expired is not renewed even when no one
// closed the run yet, so an owner never extends a claim another replica
// may be taking over.
func (s *Store) RenewLeases(ctx context.Context, owner string, runIDs []string, lease time.Duration) ([]string, error) {
	if len(runIDs) == 0 {
		return nil, nil
	}
	if lease <= 0 {
		return nil, &persistence.Error{Kind: persistence.ErrInvalid, Detail: fmt.Sprintf("lease %v is not positive", lease)}
	}
	rows, err := s.pool.Query(ctx, `UPDATE runs SET lease_expiry = now() + $3 * interval '1 microsecond'
		WHERE id = ANY($1) AND owner = $2 AND end_time IS NULL AND lease_expiry > now() RETURNING id`, runIDs, owner, lease.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("renew the leases of %q: %w", owner, err)
	}
	kept, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("renew the leases of %q: %w", owner, err)
	}
	var lost []string
	for _, id := range runIDs {
		if !slices.Contains(kept, id) {
			lost = append(lost, id)
		}
	}
	return lost, nil
}

// ActiveRun implements [persistence.Shared].
func (s *Store) ActiveRun(ctx context.Context, sessionID string) (*persistence.Run, error) {
	var out *persistence.Run
	err := s.read(ctx, func(tx pgx.Tx) error {
		sess, err := lookupSession(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+runColumns+` FROM runs r JOIN sessions s ON s.pk = r.session_pk WHERE r.session_pk = $1 AND r.end_time IS NULL AND r.owner IS NOT NULL`, sess.pk)
		if err != nil {
			return err
		}
		runs, err := scanRuns(rows)
		if err != nil {
			return err
		}
		if len(runs) == 0 {
			return &persistence.Error{Kind: persistence.ErrNotFound, SessionID: sessionID, Detail: "no active claimed run"}
		}
		out = runs[0]
		return nil
	})
	return out, opError(err, "find the active run of session %q", sessionID)
}

// CloseExpiredRuns implements [persistence.Shared] in one statement: the
// expired runs are locked with SKIP LOCKED, so replicas calling it at
// once split the runs between them instead of closing one twice, and a
// run whose fenced write is in flight (share-locked) waits for the next
// call. The generation moves, which fences the former owner out.
func (s *Store) CloseExpiredRuns(ctx context.Context) ([]*persistence.Run, error) {
	rows, err := s.pool.Query(ctx, `WITH expired AS (
			SELECT id FROM runs WHERE end_time IS NULL AND owner IS NOT NULL AND lease_expiry < now() FOR UPDATE SKIP LOCKED
		)
		UPDATE runs r SET end_time = now(), outcome = $1, error_message = '', generation = r.generation + 1
		FROM expired e, sessions s WHERE r.id = e.id AND s.pk = r.session_pk
		RETURNING `+runColumns, int32(agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED))
	var out []*persistence.Run
	if err == nil {
		out, err = scanRuns(rows)
	}
	if err != nil {
		return nil, opError(err, "close runs whose lease expired")
	}
	sortRuns(out)
	return out, nil
}

// SendControl implements [persistence.Shared]. The owner is read in the
// transaction that stores the control, under a share lock of the run, so
// the control goes to the replica that holds the run when it commits.
func (s *Store) SendControl(ctx context.Context, runID string, payload []byte) (int64, error) {
	if payload == nil {
		payload = []byte{} // NULL is not a payload
	}
	var id int64
	err := s.write(ctx, func(tx pgx.Tx) error {
		var owner string
		err := tx.QueryRow(ctx, `SELECT owner FROM runs WHERE id = $1 AND end_time IS NULL AND owner IS NOT NULL FOR SHARE`, runID).Scan(&owner)
		if errors.Is(err, pgx.ErrNoRows) {
			return &persistence.Error{Kind: persistence.ErrNotFound, RunID: runID, Detail: "no active claimed run with this id"}
		} else if err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO run_controls (run_id, owner, payload) VALUES ($1, $2, $3) RETURNING id`, runID, owner, payload).Scan(&id); err != nil {
			return err
		}
		return notify(ctx, tx, persistence.ControlTopic(owner))
	})
	if err != nil {
		return 0, opError(err, "send a control to run %q", runID)
	}
	return id, nil
}

// PendingControls implements [persistence.Shared].
func (s *Store) PendingControls(ctx context.Context, owner string) ([]persistence.Control, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, run_id, payload FROM run_controls WHERE owner = $1 AND answer IS NULL ORDER BY id`, owner)
	if err != nil {
		return nil, fmt.Errorf("read the pending controls of %q: %w", owner, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (persistence.Control, error) {
		var c persistence.Control
		err := row.Scan(&c.ID, &c.RunID, &c.Payload)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the pending controls of %q: %w", owner, err)
	}
	return out, nil
}

// controlNotFound is the error for an unknown control id.
func controlNotFound(id int64) error {
	return &persistence.Error{Kind: persistence.ErrNotFound, Detail: fmt.Sprintf("control %d does not exist", id)}
}

// AnswerControl implements [persistence.Shared].
func (s *Store) AnswerControl(ctx context.Context, id int64, answer []byte) error {
	if answer == nil {
		answer = []byte{} // NULL means unanswered
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE run_controls SET answer = $2, answer_time = now() WHERE id = $1 AND answer IS NULL`, id, answer)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			var one int
			if err := tx.QueryRow(ctx, `SELECT 1 FROM run_controls WHERE id = $1`, id).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
				return controlNotFound(id)
			} else if err != nil {
				return err
			}
			return &persistence.Error{Kind: persistence.ErrConflict, Detail: fmt.Sprintf("control %d is answered already", id)}
		}
		return notify(ctx, tx, persistence.AnswerTopic(id))
	})
	return opError(err, "answer control %d", id)
}

// ControlAnswer implements [persistence.Shared].
func (s *Store) ControlAnswer(ctx context.Context, id int64) ([]byte, error) {
	var answer []byte
	err := s.pool.QueryRow(ctx, `SELECT answer FROM run_controls WHERE id = $1`, id).Scan(&answer)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, controlNotFound(id)
	} else if err != nil {
		return nil, fmt.Errorf("read the answer to control %d: %w", id, err)
	}
	if answer == nil {
		return nil, nil
	}
	// pgx returns an empty bytea as an empty, non-nil slice, which tells
	// an empty answer from none.
	return answer, nil
}
