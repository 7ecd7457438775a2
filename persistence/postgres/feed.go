package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/persistence"
)

// AppendFeed implements [persistence.Shared]. The table's EXCLUSIVE lock
// (which readers' ACCESS SHARE does not wait for) makes writers take seqs
// and commit one at a time, so seq order is commit order. Feed writes are
// a replica's session changes and run starts and ends, not run events:
// few enough to be serialized, and their wake-up is sent after the
// commit, as events' are.
func (s *Store) AppendFeed(ctx context.Context, origin string, payloads ...[]byte) error {
	if len(payloads) == 0 {
		return nil
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE watch_feed IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		var batch pgx.Batch
		for _, p := range payloads {
			if p == nil {
				p = []byte{} // NULL is not a payload
			}
			batch.Queue(`INSERT INTO watch_feed (origin, payload) VALUES ($1, $2)`, origin, p)
		}
		return tx.SendBatch(ctx, &batch).Close()
	})
	if err != nil {
		return fmt.Errorf("append %d changes to the feed: %w", len(payloads), err)
	}
	s.notifier.post(persistence.FeedTopic)
	return nil
}

// ReadFeed implements [persistence.Shared]: the rows and the pruning
// mark are read in one snapshot.
func (s *Store) ReadFeed(ctx context.Context, after int64, limit int) ([]persistence.FeedChange, int64, error) {
	var out []persistence.FeedChange
	var pruned int64
	err := s.read(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT upto FROM watch_feed_pruned`).Scan(&pruned); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT seq, origin, payload FROM watch_feed WHERE seq > $1 ORDER BY seq LIMIT $2`, after, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (persistence.FeedChange, error) {
			var c persistence.FeedChange
			err := row.Scan(&c.Seq, &c.Origin, &c.Payload)
			return c, err
		})
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read the feed after %d: %w", after, err)
	}
	return out, pruned, nil
}

// FeedHead implements [persistence.Shared].
func (s *Store) FeedHead(ctx context.Context) (int64, error) {
	var head int64
	err := s.pool.QueryRow(ctx, `SELECT greatest((SELECT coalesce(max(seq), 0) FROM watch_feed), (SELECT upto FROM watch_feed_pruned))`).Scan(&head)
	if err != nil {
		return 0, fmt.Errorf("read the head of the feed: %w", err)
	}
	return head, nil
}

// PruneFeed implements [persistence.Shared]. It deletes a prefix of the
// feed, up to the last row older than age, and records where it ends.
func (s *Store) PruneFeed(ctx context.Context, age time.Duration) error {
	err := s.write(ctx, func(tx pgx.Tx) error {
		var upto *int64
		if err := tx.QueryRow(ctx, `SELECT max(seq) FROM watch_feed WHERE stored < clock_timestamp() - $1::bigint * interval '1 microsecond'`, age.Microseconds()).Scan(&upto); err != nil {
			return err
		}
		if upto == nil {
			return nil
		}
		if _, err := tx.Exec(ctx, `DELETE FROM watch_feed WHERE seq <= $1`, *upto); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE watch_feed_pruned SET upto = greatest(upto, $1)`, *upto)
		return err
	})
	if err != nil {
		return fmt.Errorf("prune the feed: %w", err)
	}
	return nil
}
