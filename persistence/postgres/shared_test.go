package postgres_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/postgres"
	"github.com/agentd/agentd/persistence/postgres/pgtest"
	"github.com/agentd/agentd/persistence/storetest"
)

// patience bounds every wait: far longer than anything should take.
const patience = 10 * time.Second

// sharedHarness opens Shared stores on new databases and remembers each
// store's DSN, for peers, and a connection to it, for the database's
// clock.
type sharedHarness struct {
	mu    sync.Mutex
	dsns  map[persistence.Shared]string
	conns map[string]*pgx.Conn
}

func (h *sharedHarness) open(t *testing.T, dsn string) persistence.Shared {
	s := openStore(t, dsn)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dsns[s] = dsn
	return s
}

func (h *sharedHarness) dsn(s persistence.Shared) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dsns[s]
}

// leaseExpired reads the database's clock: leases never use a replica's.
func (h *sharedHarness) leaseExpired(t *testing.T, s persistence.Shared, runID string) bool {
	t.Helper()
	dsn := h.dsn(s)
	h.mu.Lock()
	conn := h.conns[dsn]
	h.mu.Unlock()
	if conn == nil {
		conn = rawConn(t, dsn)
		h.mu.Lock()
		h.conns[dsn] = conn
		h.mu.Unlock()
		t.Cleanup(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(h.conns, dsn)
		})
	}
	var expired bool
	if err := conn.QueryRow(context.Background(), `SELECT lease_expiry < now() FROM runs WHERE id = $1`, runID).Scan(&expired); err != nil {
		t.Fatalf("lease of %s: %v", runID, err)
	}
	return expired
}

// TestSharedConformance runs the Shared suite on the database's clock:
// leases expire by waiting for them, each replica is a Store of its own.
func TestSharedConformance(t *testing.T) {
	h := &sharedHarness{dsns: map[persistence.Shared]string{}, conns: map[string]*pgx.Conn{}}
	storetest.RunShared(t, func(t *testing.T) persistence.Shared { return h.open(t, pgtest.DSN(t)) }, storetest.SharedCaps{
		LeaseExpired: h.leaseExpired,
		Peer:         func(t *testing.T, s persistence.Shared) persistence.Shared { return h.open(t, h.dsn(s)) },
	})
}

func claim(t *testing.T, s *postgres.Store, sessionID, runID, owner string, d time.Duration) persistence.Fence {
	t.Helper()
	f, err := s.ClaimRun(context.Background(), sessionID, runID, owner, d, nil)
	if err != nil {
		t.Fatalf("ClaimRun(%s, %s, %s): %v", sessionID, runID, owner, err)
	}
	return f
}

func newSession(t *testing.T, s *postgres.Store) string {
	t.Helper()
	sess, err := s.CreateSession(context.Background(), persistence.CreateSessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	return sess.ID
}

// wantWake waits for a wake-up on ch.
func wantWake(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(patience):
		t.Fatalf("no wake-up for %s within %v", what, patience)
	}
}

// drain empties ch.
func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// WithNotifyLag is called for the NOTIFYs a Store receives: here of a
// control another Store sent.
func TestNotifyLag(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	var lags atomic.Int64
	owner := newStore(t, dsn, postgres.WithNotifyLag(func(time.Duration) { lags.Add(1) }))
	sender := newStore(t, dsn)
	claim(t, owner, newSession(t, owner), "r1", "replica-a", time.Minute)
	controls, stop := owner.Watch(persistence.ControlTopic("replica-a"))
	defer stop()
	if _, err := sender.SendControl(ctx, "r1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	wantWake(t, controls, "the control")
	if lags.Load() == 0 {
		t.Fatal("the WithNotifyLag function was never called")
	}
}

// After its connection is killed, the listener reconnects, wakes every
// watcher (what was sent meanwhile is lost) and receives again.
func TestWatchReconnects(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := newStore(t, dsn)
	sid := newSession(t, s)
	f := claim(t, s, sid, "r1", "a", time.Minute)
	quiet, stopQuiet := s.Watch("nothing:happens")
	defer stopQuiet()
	events, stopEvents := s.Watch(persistence.EventsTopic("r1"))
	defer stopEvents()
	drain(quiet)

	var killed int
	err := rawConn(t, dsn).QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN%'`).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminated %d listener connections (%v), want 1", killed, err)
	}
	wantWake(t, quiet, "the reconnection")
	drain(events) // woken by the reconnection too
	if err := s.Fenced(f).AppendEvents(ctx, f.RunID, []persistence.Event{{Seq: 1, Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	wantWake(t, events, "events after the reconnection")

	// A stopped watch is woken no more.
	stopEvents()
	stopEvents() // idempotent
	drain(events)
	if err := s.Fenced(f).AppendEvents(ctx, f.RunID, []persistence.Event{{Seq: 2, Data: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	other, stopOther := s.Watch(persistence.EventsTopic("r1"))
	defer stopOther()
	if err := s.Fenced(f).AppendEvents(ctx, f.RunID, []persistence.Event{{Seq: 3, Data: []byte("z")}}); err != nil {
		t.Fatal(err)
	}
	wantWake(t, other, "events after a new watch")
	select {
	case <-events:
		t.Fatal("a stopped watch was woken")
	default:
	}
}
