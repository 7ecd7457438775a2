package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/internal/rowcodec"
)

// A batch of events is one row of run_events: the events' protobufs, each
// preceded by its length as a varint, compressed like entry payloads when
// that pays (see migrations/0003_event_log_and_implied_leaf.sql and
// 0004_compressed_event_batches.sql).

// AppendEvents implements [persistence.Store].
func (s *Store) AppendEvents(ctx context.Context, runID string, events []persistence.Event) error {
	if len(events) == 0 {
		return &persistence.Error{Kind: persistence.ErrInvalid, RunID: runID, Detail: "no events to append"}
	}
	// Encode and compress outside the writer, which serves every session.
	enc, _ := s.eventEncoders.Get().(*rowcodec.Encoder)
	if enc == nil {
		enc = &rowcodec.Encoder{Off: s.writer.payloads.Off}
	}
	defer func() {
		enc.Trim()
		s.eventEncoders.Put(enc)
	}()
	payload, encoding, err := enc.EncodeEvents(events)
	if err == nil {
		err = s.write(ctx, func(t *writeTx) error { return t.appendEvents(runID, events, payload, encoding) })
	}
	if err != nil {
		// Only here: boxing the arguments costs an allocation per batch.
		return opError(err, "append events %d to %d of run %q", events[0].Seq, events[len(events)-1].Seq, runID)
	}
	return nil
}

// appendEvents stores a batch of a run's events, encoded as payload with
// encoding, if it continues the run's log.
func (t *writeTx) appendEvents(runID string, events []persistence.Event, payload []byte, encoding int64) error {
	lastSeq, exists, err := t.lastSeq(runID)
	if err != nil {
		return err
	}
	if !exists {
		return persistence.RunNotFound(runID)
	}
	if err := persistence.CheckEventBatch(runID, lastSeq, events); err != nil {
		// Only the batch that closes an interrupted run's log starts
		// elsewhere: after the run's reservation.
		var reserved uint64
		var ended bool
		if qerr := t.queryRow(`SELECT reserved_seq, end_time IS NOT NULL FROM runs WHERE id = ?`, runID).Scan(&reserved, &ended); qerr != nil {
			return qerr
		}
		if err := persistence.CheckReservedEventBatch(runID, lastSeq, reserved, ended, events); err != nil {
			return err
		}
	}
	first, last := events[0].Seq, events[len(events)-1].Seq
	if _, err := t.exec(`INSERT INTO run_events (run_id, first_seq, last_seq, encoding, payload) VALUES (?, ?, ?, ?, ?)`, runID, first, last, encoding, payload); err != nil {
		return err
	}
	t.stageLastSeq(runID, last)
	return nil
}

// Events implements [persistence.Store].
func (s *Store) Events(ctx context.Context, runID string, after uint64, limit int) ([]persistence.Event, error) {
	if limit <= 0 {
		return nil, &persistence.Error{Kind: persistence.ErrInvalid, RunID: runID, Detail: fmt.Sprintf("limit %d is not positive", limit)}
	}
	var out []persistence.Event
	err := s.read(ctx, func(tx *sql.Tx) error {
		// The log is contiguous but for one gap below the reservation
		// (see AppendEvents): batches starting up to limit seqs past after,
		// or past the reservation, hold the next limit events.
		var reserved uint64
		if err := tx.QueryRowContext(ctx, `SELECT reserved_seq FROM runs WHERE id = ?`, runID).Scan(&reserved); errors.Is(err, sql.ErrNoRows) {
			return persistence.RunNotFound(runID)
		} else if err != nil {
			return err
		}
		rows, err := tx.StmtContext(ctx, s.rEvents).QueryContext(ctx, runID, after, limit, reserved)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() && len(out) < limit {
			var first, last uint64
			var encoding int64
			var payload []byte
			if err := rows.Scan(&first, &last, &encoding, &payload); err != nil {
				return err
			}
			if out, err = rowcodec.AppendBatch(out, runID, first, last, encoding, payload, after, limit); err != nil {
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

// pruneChunk bounds the runs pruned in one write, so pruning a large
// backlog never holds the writer (and every append) for long.
const pruneChunk = 64

// PruneEvents implements [persistence.Store].
func (s *Store) PruneEvents(ctx context.Context, endedBefore time.Time) (int, error) {
	total := 0
	for {
		n := 0
		err := s.write(ctx, func(t *writeTx) error {
			rows, err := t.query(`SELECT id FROM runs WHERE end_time < ? AND end_time IS NOT NULL AND events_pruned = 0 LIMIT ?`, endedBefore.UnixNano(), pruneChunk)
			if err != nil {
				return err
			}
			var ids []string
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				ids = append(ids, id)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			for _, id := range ids {
				// Keep the last seq before its batches go.
				if _, err := t.exec(`UPDATE runs AS r SET last_seq = `+runLastSeq+`, events_pruned = 1 WHERE r.id = ?`, id); err != nil {
					return err
				}
				if _, err := t.exec(`DELETE FROM run_events WHERE run_id = ?`, id); err != nil {
					return err
				}
			}
			n = len(ids)
			return nil
		})
		if err != nil {
			return total, opError(err, "prune the events of runs that ended before %v", endedBefore)
		}
		total += n
		if n < pruneChunk {
			return total, nil
		}
	}
}
