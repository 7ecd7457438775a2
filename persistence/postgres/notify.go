package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgreSQL serializes the commits of transactions that NOTIFY (they take
// one lock on the notification queue until their commit is flushed), so a
// NOTIFY in every event batch's transaction would make every replica's
// batches commit one at a time. Event wake-ups are therefore sent after
// the batch committed, by one notifier per Store that gathers the topics
// of a short window into as few notifications as their size allows.
// Controls and their answers, which are rare and wait for each other,
// still notify inside their transactions.
const (
	// notifyWindow is how long the notifier gathers topics before it sends.
	notifyWindow = 2 * time.Millisecond
	// maxNotifyPayload keeps a payload under PostgreSQL's 8000-byte limit,
	// with room for the send time.
	maxNotifyPayload = 7900
)

// notifier sends the wake-ups of committed writes in batches.
type notifier struct {
	pool *pgxpool.Pool
	log  *slog.Logger

	mu      sync.Mutex
	pending map[string]struct{}
	kick    chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

func newNotifier(pool *pgxpool.Pool, log *slog.Logger) *notifier {
	ctx, cancel := context.WithCancel(context.Background())
	n := &notifier{pool: pool, log: log, pending: map[string]struct{}{}, kick: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go n.run(ctx)
	return n
}

// post asks for a wake-up of topic, after the write that calls it has
// committed.
func (n *notifier) post(topic string) {
	n.mu.Lock()
	n.pending[topic] = struct{}{}
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// stop sends what is pending and ends the notifier.
func (n *notifier) stop() {
	n.cancel()
	<-n.done
}

func (n *notifier) run(ctx context.Context) {
	defer close(n.done)
	for {
		select {
		case <-ctx.Done():
			n.flush(context.Background())
			return
		case <-n.kick:
		}
		t := time.NewTimer(notifyWindow)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		n.flush(ctx)
	}
}

// flush sends the pending topics. A failure is logged: watchers also read
// the store now and then, so a lost wake-up only delays them.
func (n *notifier) flush(ctx context.Context) {
	n.mu.Lock()
	topics := make([]string, 0, len(n.pending))
	for t := range n.pending {
		topics = append(topics, t)
	}
	clear(n.pending)
	n.mu.Unlock()
	for _, payload := range notifyPayloads(topics) {
		if _, err := n.pool.Exec(ctx, `SELECT pg_notify($1, $2 || ' ' || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint::text)`, notifyChannel, payload); err != nil {
			n.log.Warn("could not send wake-ups; followers will read the store at their next poll", "topics", len(topics), "err", err)
			return
		}
	}
}

// notifyPayloads joins topics with newlines into payloads that fit a
// notification.
func notifyPayloads(topics []string) []string {
	var out []string
	var b strings.Builder
	for _, t := range topics {
		if b.Len() > 0 && b.Len()+1+len(t) > maxNotifyPayload {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(t)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// notify wakes the watchers of topic when tx commits.
func notify(ctx context.Context, tx pgx.Tx, topic string) error {
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2 || ' ' || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint::text)`, notifyChannel, topic)
	if err != nil {
		return fmt.Errorf("notify %s: %w", topic, err)
	}
	return nil
}
