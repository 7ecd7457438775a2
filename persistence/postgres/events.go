package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/internal/rowcodec"
)

// A batch of events is one row of run_events: the events' protobufs, each
// preceded by its length as a varint, compressed like entry payloads when
// that pays (see migrations/0001_init.sql and package rowcodec).

// AppendEvents implements [persistence.Store].
func (s *Store) AppendEvents(ctx context.Context, runID string, events []persistence.Event) error {
	return s.appendEvents(ctx, nil, runID, events)
}

// appendEvents stores a batch under fence f when it is not nil. The run's
// row is locked for the whole transaction, so batches of one run from
// several processes are checked against the log one at a time.
func (s *Store) appendEvents(ctx context.Context, f *persistence.Fence, runID string, events []persistence.Event) error {
	if len(events) == 0 {
		return &persistence.Error{Kind: persistence.ErrInvalid, RunID: runID, Detail: "no events to append"}
	}
	// Encode and compress before the transaction, which holds the lock.
	enc, release := s.encoder()
	defer release()
	payload, encoding, err := enc.EncodeEvents(events)
	if err == nil {
		err = s.write(ctx, func(tx pgx.Tx) error {
			r, err := lockRun(ctx, tx, runID, "FOR UPDATE")
			if f != nil && errors.Is(err, persistence.ErrNotFound) {
				return fencedMissing(*f)
			} else if err != nil {
				return err
			}
			if f != nil {
				if err := r.check(*f, true); err != nil {
					return err
				}
			}
			if err := persistence.CheckReservedEventBatch(runID, r.lastSeq, r.reservedSeq, r.ended, events); err != nil {
				return err
			}
			first, last := int64(events[0].Seq), int64(events[len(events)-1].Seq)
			var batch pgx.Batch
			batch.Queue(`INSERT INTO run_events (run_id, first_seq, last_seq, encoding, payload) VALUES ($1, $2, $3, $4, $5)`, runID, first, last, int16(encoding), payload)
			batch.Queue(`UPDATE runs SET last_seq = $2 WHERE id = $1`, runID, last)
			return tx.SendBatch(ctx, &batch).Close()
		})
	}
	if err == nil {
		s.notifier.post(persistence.EventsTopic(runID))
	}
	return opError(err, "append events %d to %d of run %q", events[0].Seq, events[len(events)-1].Seq, runID)
}

// Events implements [persistence.Store].
func (s *Store) Events(ctx context.Context, runID string, after uint64, limit int) ([]persistence.Event, error) {
	if limit <= 0 {
		return nil, &persistence.Error{Kind: persistence.ErrInvalid, RunID: runID, Detail: fmt.Sprintf("limit %d is not positive", limit)}
	}
	var out []persistence.Event
	err := s.read(ctx, func(tx pgx.Tx) error {
		// The log is contiguous but for one gap below the reservation
		// (see AppendEvents): batches starting up to limit seqs past after,
		// or past the reservation, hold the next limit events.
		var reserved int64
		if err := tx.QueryRow(ctx, `SELECT reserved_seq FROM runs WHERE id = $1`, runID).Scan(&reserved); errors.Is(err, pgx.ErrNoRows) {
			return persistence.RunNotFound(runID)
		} else if err != nil {
			return err
		}
		// after is at most the log's last seq for the ones that matter;
		// a larger one matches nothing.
		from := int64(min(after, 1<<62))
		rows, err := tx.Query(ctx, `SELECT first_seq, last_seq, encoding, payload FROM run_events WHERE run_id = $1 AND first_seq <= greatest($2::bigint, $4::bigint) + $3::bigint AND last_seq > $2::bigint ORDER BY first_seq`, runID, from, limit, reserved)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() && len(out) < limit {
			var first, last, encoding int64
			var payload []byte
			if err := rows.Scan(&first, &last, &encoding, &payload); err != nil {
				return err
			}
			if out, err = rowcodec.AppendBatch(out, runID, uint64(first), uint64(last), encoding, payload, after, limit); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, opError(err, "read the events of run %q after seq %d", runID, after)
	}
	return out, nil
}

// pruneChunk bounds the runs pruned in one transaction, so pruning a
// large backlog never holds many locks for long.
const pruneChunk = 64

// controlRetention is how long answered controls are kept, and unanswered
// ones of runs that ended: long enough for any sender to read the answer.
const controlRetention = time.Hour

// PruneEvents implements [persistence.Store]. It also deletes the controls
// nobody needs any more (see controlRetention).
func (s *Store) PruneEvents(ctx context.Context, endedBefore time.Time) (int, error) {
	total := 0
	for {
		tag, err := s.pool.Exec(ctx, `WITH doomed AS (
				SELECT id FROM runs WHERE end_time < $1 AND NOT events_pruned ORDER BY end_time LIMIT $2 FOR UPDATE SKIP LOCKED
			), gone AS (
				DELETE FROM run_events e USING doomed d WHERE e.run_id = d.id
			)
			UPDATE runs r SET events_pruned = true FROM doomed d WHERE r.id = d.id`, endedBefore, pruneChunk)
		if err != nil {
			return total, opError(err, "prune the events of runs that ended before %v", endedBefore)
		}
		n := int(tag.RowsAffected())
		total += n
		if n < pruneChunk {
			break
		}
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM run_controls c WHERE c.answer_time < now() - $1 * interval '1 microsecond'
		OR (c.answer IS NULL AND c.create_time < now() - $1 * interval '1 microsecond' AND EXISTS (SELECT 1 FROM runs r WHERE r.id = c.run_id AND r.end_time IS NOT NULL))`,
		controlRetention.Microseconds()); err != nil {
		return total, opError(err, "delete old controls")
	}
	return total, nil
}
