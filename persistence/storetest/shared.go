package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// SharedCaps says what an engine under RunShared offers beyond
// [persistence.Shared], and so how the suite moves time and opens
// replicas.
type SharedCaps struct {
	// Advance moves the clock of the engine's leases forward by d. Nil
	// when leases run on real time: the suite then waits for them,
	// polling LeaseExpired.
	Advance func(d time.Duration)
	// LeaseExpired reports whether the lease of run runID expired by the
	// engine's clock (the database's). Required when Advance is nil.
	LeaseExpired func(t *testing.T, s persistence.Shared, runID string) bool
	// Peer opens another handle onto the database of s, as another
	// replica would; the suite closes it. Nil when the engine cannot:
	// the tests across replicas then use s for both sides.
	Peer func(t *testing.T, s persistence.Shared) persistence.Shared
}

// Lease is the lease of the claims the suite lets expire: short, so an
// engine on real time waits little.
const Lease = 300 * time.Millisecond

// patience bounds every wait of the suite: far longer than anything
// should take.
const patience = 10 * time.Second

// RunShared runs the suite of [persistence.Shared] as subtests of t: claims
// and their conflicts, leases renewed and lost, the fencing of every
// RunWriter method, the closing of expired runs (each once, oldest
// first), controls and their answers, wake-ups across replicas, and the
// feed of changes between replicas.
// open returns a new, empty database's first handle; the suite closes
// it.
func RunShared(t *testing.T, open func(t *testing.T) persistence.Shared, caps SharedCaps) {
	if caps.Advance == nil && caps.LeaseExpired == nil {
		t.Fatal("storetest.RunShared: SharedCaps needs Advance or LeaseExpired")
	}
	tests := []struct {
		name string
		fn   func(*testing.T, *sharedEnv)
	}{
		{"ClaimRun", testClaimRun},
		{"RenewLeases", testRenewLeases},
		{"FencedWrites", testFencedWrites},
		{"EventsAfterEnd", testEventsAfterEnd},
		{"ClaimedRunRecords", testClaimedRunRecords},
		{"CloseExpiredRunsConcurrently", testCloseExpiredRuns},
		{"Controls", testControls},
		{"Watch", testWatch},
		{"Feed", testFeed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, &sharedEnv{t: t, s: s, caps: caps})
		})
	}
}

// sharedEnv is one test's database, first handle and clock.
type sharedEnv struct {
	t    *testing.T
	s    persistence.Shared
	caps SharedCaps
}

// peer returns another handle onto the database, or the first one when
// the engine has no peers.
func (e *sharedEnv) peer() persistence.Shared {
	e.t.Helper()
	if e.caps.Peer == nil {
		return e.s
	}
	p := e.caps.Peer(e.t, e.s)
	e.t.Cleanup(func() { _ = p.Close() })
	return p
}

// pass lets d go by on the engine's clock.
func (e *sharedEnv) pass(d time.Duration) {
	if e.caps.Advance != nil {
		e.caps.Advance(d)
		return
	}
	time.Sleep(d)
}

// expire makes the lease of run runID, claimed for Lease, expire: the
// clock moves past it, or the suite waits until it did.
func (e *sharedEnv) expire(runID string) {
	e.t.Helper()
	if e.caps.Advance != nil {
		e.caps.Advance(Lease + time.Millisecond)
		return
	}
	e.awaitExpired(runID)
}

// awaitExpired waits, on real time, until the lease of runID expired;
// with a clock the suite moves it expired already or never will.
func (e *sharedEnv) awaitExpired(runID string) {
	e.t.Helper()
	if e.caps.Advance != nil {
		return
	}
	deadline := time.Now().Add(patience)
	for !e.caps.LeaseExpired(e.t, e.s, runID) {
		if time.Now().After(deadline) {
			e.t.Fatalf("the lease of %s did not expire within %v", runID, patience)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *sharedEnv) session(s persistence.Shared) string {
	e.t.Helper()
	return mustCreate(e.t, s, persistence.CreateSessionParams{}).ID
}

func (e *sharedEnv) claim(s persistence.Shared, sessionID, runID, owner string, lease time.Duration) persistence.Fence {
	e.t.Helper()
	f, err := s.ClaimRun(context.Background(), sessionID, runID, owner, lease, nil)
	if err != nil {
		e.t.Fatalf("ClaimRun(%s, %s, %s): %v", sessionID, runID, owner, err)
	}
	return f
}

func (e *sharedEnv) run(runID string) *persistence.Run {
	e.t.Helper()
	r, err := e.s.GetRun(context.Background(), runID)
	if err != nil {
		e.t.Fatalf("GetRun(%s): %v", runID, err)
	}
	return r
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

func testClaimRun(t *testing.T, e *sharedEnv) {
	ctx := context.Background()
	s := e.s
	sid, other := e.session(s), e.session(s)
	f := e.claim(s, sid, "r1", "replica-a", time.Minute)
	if f != (persistence.Fence{RunID: "r1", Owner: "replica-a", Generation: f.Generation}) {
		t.Fatalf("fence %+v, want run r1 of replica-a", f)
	}
	r := e.run("r1")
	if r.Owner != "replica-a" || r.SessionID != sid || r.Ended() || r.LeaseExpiry.Before(r.StartTime.Add(50*time.Second)) || r.LeaseExpiry.After(r.StartTime.Add(70*time.Second)) {
		t.Fatalf("GetRun of a run claimed for a minute = %+v", r)
	}
	if active, err := s.ActiveRun(ctx, sid); err != nil || active.ID != "r1" || active.Owner != "replica-a" {
		t.Fatalf("ActiveRun = %+v, %v", active, err)
	}

	tests := []struct {
		name           string
		session, runID string
		owner          string
		lease          time.Duration
		check          func(t *testing.T, err error)
	}{
		{"second claim of the session names the active run", sid, "r2", "replica-b", time.Minute, func(t *testing.T, err error) {
			var ae *persistence.ActiveRunError
			if !errors.As(err, &ae) || !errors.Is(err, persistence.ErrConflict) || ae.Run.ID != "r1" || ae.Run.Owner != "replica-a" || ae.Run.SessionID != sid {
				t.Fatalf("got %v, want an *ActiveRunError naming r1 of replica-a", err)
			}
		}},
		{"run id used before", other, "r1", "replica-b", time.Minute, func(t *testing.T, err error) {
			var ae *persistence.ActiveRunError
			if !errors.Is(err, persistence.ErrConflict) || errors.As(err, &ae) {
				t.Fatalf("got %v, want ErrConflict without an active run", err)
			}
		}},
		{"unknown session", "nope", "r3", "replica-b", time.Minute, func(t *testing.T, err error) {
			if !errors.Is(err, persistence.ErrNotFound) {
				t.Fatalf("got %v, want ErrNotFound", err)
			}
		}},
		{"empty run id", other, "", "replica-b", time.Minute, func(t *testing.T, err error) {
			if !errors.Is(err, persistence.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		}},
		{"no owner", other, "r5", "", time.Minute, func(t *testing.T, err error) {
			if !errors.Is(err, persistence.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		}},
		{"no lease", other, "r6", "replica-b", 0, func(t *testing.T, err error) {
			if !errors.Is(err, persistence.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.ClaimRun(ctx, tc.session, tc.runID, tc.owner, tc.lease, nil)
			tc.check(t, err)
		})
	}

	// Runs without owner are not limited by a claim or by each other,
	// and CloseInterruptedRuns closes them only: a claimed run may be
	// running on another replica.
	for _, id := range []string{"u1", "u2"} {
		if err := s.StartRun(ctx, sid, id, nil); err != nil {
			t.Fatalf("StartRun(%s) beside a claimed run: %v", id, err)
		}
	}
	closed, err := s.CloseInterruptedRuns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var closedIDs []string
	for _, r := range closed {
		closedIDs = append(closedIDs, r.ID)
	}
	if !slices.Equal(closedIDs, []string{"u1", "u2"}) || e.run("r1").Ended() {
		t.Fatalf("CloseInterruptedRuns closed %v (r1 ended: %v), want [u1 u2] only", closedIDs, e.run("r1").Ended())
	}
	if _, err := s.ActiveRun(ctx, other); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("ActiveRun of a session without claimed run: %v", err)
	}
	if _, err := s.ActiveRun(ctx, "nope"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("ActiveRun of an unknown session: %v", err)
	}
	// Ended, the session takes a new claim.
	if err := s.Fenced(f).EndRun(ctx, "r1", persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ActiveRun(ctx, sid); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("ActiveRun after the run ended: %v", err)
	}
	e.claim(s, sid, "r4", "replica-b", time.Minute)
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

func testRenewLeases(t *testing.T, e *sharedEnv) {
	ctx := context.Background()
	s := e.s
	kept := e.claim(s, e.session(s), "kept", "a", Lease)
	e.claim(s, e.session(s), "dropped", "a", Lease)
	e.claim(s, e.session(s), "theirs", "b", time.Minute)

	tests := []struct {
		name string
		ids  []string
		want []string
	}{
		{"all held", []string{"kept"}, nil},
		{"another owner's run is lost", []string{"kept", "theirs"}, []string{"theirs"}},
		{"unknown run is lost", []string{"kept", "ghost"}, []string{"ghost"}},
		{"none", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lost, err := s.RenewLeases(ctx, "a", tc.ids, Lease)
			if err != nil || !slices.Equal(lost, tc.want) {
				t.Fatalf("RenewLeases(%v) = %v, %v; want %v", tc.ids, lost, err, tc.want)
			}
		})
	}
	if _, err := s.RenewLeases(ctx, "a", []string{"kept"}, 0); !errors.Is(err, persistence.ErrInvalid) {
		t.Fatalf("RenewLeases without a lease: %v, want ErrInvalid", err)
	}

	// Renewed well within the lease, "kept" outlives three leases while
	// "dropped" expires.
	for range 12 {
		if lost, err := s.RenewLeases(ctx, "a", []string{"kept"}, Lease); err != nil || len(lost) != 0 {
			t.Fatalf("renewing a held lease: lost %v, %v", lost, err)
		}
		e.pass(Lease / 4)
	}
	e.awaitExpired("dropped")
	// Renewed once more right before the write: on a real clock a busy
	// machine may stall the suite for most of a lease.
	if lost, err := s.RenewLeases(ctx, "a", []string{"kept"}, Lease); err != nil || len(lost) != 0 {
		t.Fatalf("renewing a held lease: lost %v, %v", lost, err)
	}
	if err := s.Fenced(kept).AppendEvents(ctx, "kept", []persistence.Event{{Seq: 1, Data: []byte("x")}}); err != nil {
		t.Fatalf("fenced write after renewals: %v", err)
	}
	lost, err := s.RenewLeases(ctx, "a", []string{"kept", "dropped"}, Lease)
	if err != nil || !slices.Equal(lost, []string{"dropped"}) {
		t.Fatalf("renewing after expiry: lost %v, %v; want [dropped]", lost, err)
	}
	if r := e.run("dropped"); r.Ended() {
		t.Fatalf("an expired run is closed only by CloseExpiredRuns: %+v", r)
	}
}

// runWrites are the writes of a run, each on its own session and run
// state.
var runWrites = []struct {
	name  string
	write func(ctx context.Context, s persistence.Shared, w persistence.RunWriter, f persistence.Fence, sessionID string) error
}{
	{"Append", func(ctx context.Context, _ persistence.Shared, w persistence.RunWriter, _ persistence.Fence, sid string) error {
		return w.Append(ctx, sid, userEntry("x"))
	}},
	{"SetLeaf", func(ctx context.Context, _ persistence.Shared, w persistence.RunWriter, _ persistence.Fence, sid string) error {
		return w.SetLeaf(ctx, sid, "")
	}},
	{"AppendEvents", func(ctx context.Context, s persistence.Shared, w persistence.RunWriter, f persistence.Fence, _ string) error {
		seq := uint64(1) // the first of a run that does not exist
		if r, err := s.GetRun(ctx, f.RunID); err == nil {
			seq = r.LastSeq + 1
		}
		return w.AppendEvents(ctx, f.RunID, []persistence.Event{{Seq: seq, Data: []byte("e")}})
	}},
	{"ReserveEvents", func(ctx context.Context, s persistence.Shared, w persistence.RunWriter, f persistence.Fence, _ string) error {
		through := uint64(100)
		if r, err := s.GetRun(ctx, f.RunID); err == nil {
			through += r.ReservedSeq
		}
		return w.ReserveEvents(ctx, f.RunID, through)
	}},
	{"EndRun", func(ctx context.Context, _ persistence.Shared, w persistence.RunWriter, f persistence.Fence, _ string) error {
		return w.EndRun(ctx, f.RunID, persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED})
	}},
}

// runState is what a write of a run may change.
type runState struct {
	path     []string
	leaf     string
	lastSeq  uint64
	reserved uint64
	ended    bool
}

func (e *sharedEnv) state(sessionID, runID string) runState {
	e.t.Helper()
	ctx := context.Background()
	path, err := e.s.Path(ctx, sessionID)
	if err != nil {
		e.t.Fatal(err)
	}
	sess, err := e.s.GetSession(ctx, sessionID)
	if err != nil {
		e.t.Fatal(err)
	}
	r := e.run(runID)
	return runState{path: ids(path), leaf: sess.LeafEntryID, lastSeq: r.LastSeq, reserved: r.ReservedSeq, ended: r.Ended()}
}

func testFencedWrites(t *testing.T, e *sharedEnv) {
	ctx := context.Background()
	s := e.s
	states := []struct {
		name string
		// prepare claims a run of sessionID and returns the fence to
		// write with.
		prepare func(t *testing.T, sessionID, runID string) persistence.Fence
		fenced  bool
	}{
		{"valid claim", func(t *testing.T, sid, rid string) persistence.Fence {
			return e.claim(s, sid, rid, "a", time.Minute)
		}, false},
		{"lease expired", func(t *testing.T, sid, rid string) persistence.Fence {
			f := e.claim(s, sid, rid, "a", Lease)
			e.expire(rid)
			return f
		}, true},
		{"closed by CloseExpiredRuns", func(t *testing.T, sid, rid string) persistence.Fence {
			f := e.claim(s, sid, rid, "a", Lease)
			e.expire(rid)
			closed, err := s.CloseExpiredRuns(ctx)
			if err != nil || !slices.ContainsFunc(closed, func(r *persistence.Run) bool { return r.ID == rid }) {
				t.Fatalf("CloseExpiredRuns = %v, %v; want %s in it", closed, err, rid)
			}
			// A new claim of the session by another replica.
			e.claim(s, sid, rid+"-next", "b", time.Minute)
			return f
		}, true},
		{"another owner", func(t *testing.T, sid, rid string) persistence.Fence {
			f := e.claim(s, sid, rid, "a", time.Minute)
			f.Owner = "b"
			return f
		}, true},
		{"another generation", func(t *testing.T, sid, rid string) persistence.Fence {
			f := e.claim(s, sid, rid, "a", time.Minute)
			f.Generation++
			return f
		}, true},
		{"ended without fence", func(t *testing.T, sid, rid string) persistence.Fence {
			f := e.claim(s, sid, rid, "a", time.Minute)
			if err := s.EndRun(ctx, rid, persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_ABORTED, ErrorMessage: "operator"}); err != nil {
				t.Fatal(err)
			}
			return f
		}, true},
		{"unknown run", func(t *testing.T, sid, rid string) persistence.Fence {
			e.claim(s, sid, rid, "a", time.Minute)
			return persistence.Fence{RunID: rid + "-ghost", Owner: "a", Generation: 1}
		}, true},
	}
	n := 0
	for _, st := range states {
		for _, w := range runWrites {
			t.Run(st.name+"/"+w.name, func(t *testing.T) {
				n++
				sid, rid := e.session(s), fmt.Sprintf("run%d", n)
				mustAppend(t, s, sid, userEntry("before"))
				f := st.prepare(t, sid, rid)
				before := e.state(sid, rid)
				err := w.write(ctx, s, s.Fenced(f), f, sid)
				if !st.fenced {
					if err != nil {
						t.Fatalf("%s under a valid fence: %v", w.name, err)
					}
					if after := e.state(sid, rid); fmt.Sprint(after) == fmt.Sprint(before) {
						t.Fatalf("%s under a valid fence changed nothing: %+v", w.name, after)
					}
					return
				}
				if !errors.Is(err, persistence.ErrFenced) {
					t.Fatalf("%s: %v, want ErrFenced", w.name, err)
				}
				var pe *persistence.Error
				if !errors.As(err, &pe) || pe.RunID != f.RunID {
					t.Fatalf("%s: %v does not name run %s", w.name, err, f.RunID)
				}
				if after := e.state(sid, rid); fmt.Sprint(after) != fmt.Sprint(before) {
					t.Fatalf("a fenced %s changed the run: %+v, then %+v", w.name, before, after)
				}
			})
		}
	}

	t.Run("session of another run", func(t *testing.T) {
		w := s.Fenced(e.claim(s, e.session(s), "mine", "a", time.Minute))
		other := e.session(s)
		mustAppend(t, s, other, userEntry("x"))
		if err := w.Append(ctx, other, userEntry("x")); !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("Append to another session: %v, want ErrInvalid", err)
		}
		if err := w.SetLeaf(ctx, other, ""); !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("SetLeaf of another session: %v, want ErrInvalid", err)
		}
	})
	t.Run("another run's id", func(t *testing.T) {
		sid := e.session(s)
		w := s.Fenced(e.claim(s, sid, "claimed", "a", time.Minute))
		if err := s.StartRun(ctx, sid, "unclaimed", nil); err != nil {
			t.Fatal(err)
		}
		if err := w.AppendEvents(ctx, "unclaimed", []persistence.Event{{Seq: 1, Data: []byte("x")}}); !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("AppendEvents of another run: %v, want ErrInvalid", err)
		}
		if err := w.EndRun(ctx, "unclaimed", persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED}); !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("EndRun of another run: %v, want ErrInvalid", err)
		}
		if r := e.run("unclaimed"); r.Ended() || r.LastSeq != 0 {
			t.Fatalf("a write naming another run changed it: %+v", r)
		}
	})
}

// The run's last events (agent_end) follow the fenced EndRun; a run
// closed by another replica takes none.
func testEventsAfterEnd(t *testing.T, e *sharedEnv) {
	ctx := context.Background()
	s := e.s
	sid := e.session(s)
	f := e.claim(s, sid, "r1", "a", time.Minute)
	w := s.Fenced(f)
	ev := func(seq uint64) []persistence.Event {
		return []persistence.Event{{Seq: seq, Data: []byte(fmt.Sprint("event ", seq))}}
	}
	if err := w.AppendEvents(ctx, "r1", ev(1)); err != nil {
		t.Fatal(err)
	}
	if err := w.EndRun(ctx, "r1", persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED}); err != nil {
		t.Fatal(err)
	}
	if err := w.ReserveEvents(ctx, "r1", 50); err != nil {
		t.Fatalf("ReserveEvents after the fenced EndRun: %v", err)
	}
	if err := w.AppendEvents(ctx, "r1", ev(2)); err != nil {
		t.Fatalf("AppendEvents after the fenced EndRun: %v", err)
	}
	if err := w.Append(ctx, sid, userEntry("late")); !errors.Is(err, persistence.ErrFenced) {
		t.Fatalf("Append after the fenced EndRun: %v, want ErrFenced", err)
	}
	if err := w.EndRun(ctx, "r1", persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED}); !errors.Is(err, persistence.ErrConflict) {
		t.Fatalf("EndRun twice: %v, want ErrConflict", err)
	}
	if got := mustEvents(t, s, "r1", 0, 10); len(got) != 2 {
		t.Fatalf("Events = %v; want 2", got)
	}

	// Closed as expired, the run refuses its former owner's events.
	// Its reservation comes with it, and the replica that closed it ends
	// the log after the reservation.
	g := e.claim(s, sid, "r2", "a", Lease)
	const r0 = persistence.StartReservedSeq // what a claim reserves
	if r := e.run("r2"); r.ReservedSeq != r0 {
		t.Fatalf("claimed run r2 = %+v; want ReservedSeq %d", r, r0)
	}
	if err := s.Fenced(g).ReserveEvents(ctx, "r2", r0+40); err != nil {
		t.Fatal(err)
	}
	e.expire("r2")
	closed, err := s.CloseExpiredRuns(ctx)
	if err != nil || !slices.ContainsFunc(closed, func(r *persistence.Run) bool { return r.ID == "r2" && r.ReservedSeq == r0+40 }) {
		t.Fatalf("CloseExpiredRuns = %+v, %v; want r2 with ReservedSeq %d", closed, err, r0+40)
	}
	if err := s.Fenced(g).AppendEvents(ctx, "r2", ev(1)); !errors.Is(err, persistence.ErrFenced) {
		t.Fatalf("AppendEvents after CloseExpiredRuns: %v, want ErrFenced", err)
	}
	if err := s.Fenced(g).ReserveEvents(ctx, "r2", r0+80); !errors.Is(err, persistence.ErrFenced) {
		t.Fatalf("ReserveEvents after CloseExpiredRuns: %v, want ErrFenced", err)
	}
	if err := s.AppendEvents(ctx, "r2", ev(r0+41)); err != nil {
		t.Fatalf("AppendEvents after the reservation of a closed run: %v", err)
	}
	if r := e.run("r2"); r.LastSeq != r0+41 || r.ReservedSeq != r0+40 {
		t.Fatalf("closed run r2 = %+v; want LastSeq %d, ReservedSeq %d", r, r0+41, r0+40)
	}
}

func testCloseExpiredRuns(t *testing.T, e *sharedEnv) {
	ctx := context.Background()
	stores := []persistence.Shared{e.s, e.peer()}
	const runs = 20
	var want []string
	for i := range runs {
		id := fmt.Sprintf("r%02d", i)
		e.claim(stores[i%2], e.session(stores[0]), id, fmt.Sprint("owner", i%3), Lease)
		want = append(want, id)
		if i == 0 {
			if got, err := stores[1].CloseExpiredRuns(ctx); err != nil || len(got) != 0 {
				t.Fatalf("CloseExpiredRuns before any lease expired = %v, %v", got, err)
			}
		}
		e.pass(time.Millisecond) // distinct start times
	}
	live := e.claim(stores[0], e.session(stores[0]), "live", "owner0", time.Minute)
	if err := stores[0].StartRun(ctx, e.session(stores[0]), "unclaimed", nil); err != nil {
		t.Fatal(err)
	}
	e.expire(want[len(want)-1])
	for _, id := range want {
		e.awaitExpired(id)
	}

	const callers = 8
	results := make([][]*persistence.Run, callers)
	errs := make([]error, callers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = stores[i%2].CloseExpiredRuns(ctx)
		}()
	}
	close(start)
	wg.Wait()
	var got []string
	for i, rs := range results {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		for j, r := range rs {
			if r.Outcome != agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED || !r.Ended() || r.Owner == "" {
				t.Fatalf("closed run %+v", r)
			}
			if j > 0 && (r.StartTime.Before(rs[j-1].StartTime) || r.StartTime.Equal(rs[j-1].StartTime) && r.ID < rs[j-1].ID) {
				t.Fatalf("caller %d: runs not oldest first: %s before %s", i, rs[j-1].ID, r.ID)
			}
			got = append(got, r.ID)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("closed runs %v, want each of %v once", got, want)
	}
	for _, id := range []string{"live", "unclaimed"} {
		if r, err := stores[1].GetRun(ctx, id); err != nil || r.Ended() {
			t.Fatalf("%s was closed: %+v, %v", id, r, err)
		}
	}
	if err := stores[1].Fenced(live).AppendEvents(ctx, "live", []persistence.Event{{Seq: 1, Data: []byte("x")}}); err != nil {
		t.Fatalf("the live claim: %v", err)
	}
	if got, err := stores[1].CloseExpiredRuns(ctx); err != nil || len(got) != 0 {
		t.Fatalf("CloseExpiredRuns again = %v, %v; want none", got, err)
	}
}

// Controls travel between two handles (replicas) on one database, and
// each step wakes the other side.
func testControls(t *testing.T, e *sharedEnv) {
	ctx := context.Background()
	owner, sender := e.s, e.peer()
	sid := e.session(owner)
	f := e.claim(owner, sid, "r1", "replica-a", time.Minute)

	controls, stopControls := owner.Watch(persistence.ControlTopic("replica-a"))
	defer stopControls()
	events, stopEvents := sender.Watch(persistence.EventsTopic("r1"))
	defer stopEvents()

	id, err := sender.SendControl(ctx, "r1", []byte("approve tool call 7?"))
	if err != nil {
		t.Fatal(err)
	}
	wantWake(t, controls, "the control")
	pending, err := owner.PendingControls(ctx, "replica-a")
	if err != nil || len(pending) != 1 || pending[0].ID != id || pending[0].RunID != "r1" || string(pending[0].Payload) != "approve tool call 7?" {
		t.Fatalf("PendingControls = %+v, %v", pending, err)
	}
	if others, err := owner.PendingControls(ctx, "replica-b"); err != nil || len(others) != 0 {
		t.Fatalf("another owner's pending controls: %+v, %v", others, err)
	}
	answers, stopAnswers := sender.Watch(persistence.AnswerTopic(id))
	defer stopAnswers()
	if got, err := sender.ControlAnswer(ctx, id); err != nil || got != nil {
		t.Fatalf("ControlAnswer before the answer = %q, %v; want nil", got, err)
	}
	if err := owner.AnswerControl(ctx, id, []byte("yes")); err != nil {
		t.Fatal(err)
	}
	wantWake(t, answers, "the answer")
	if got, err := sender.ControlAnswer(ctx, id); err != nil || string(got) != "yes" {
		t.Fatalf("ControlAnswer = %q, %v; want yes", got, err)
	}
	if err := owner.AnswerControl(ctx, id, []byte("no")); !errors.Is(err, persistence.ErrConflict) {
		t.Fatalf("answering twice: %v, want ErrConflict", err)
	}
	if got, err := sender.ControlAnswer(ctx, id); err != nil || string(got) != "yes" {
		t.Fatalf("ControlAnswer after a second answer = %q, %v; want the first, yes", got, err)
	}
	if pending, err := owner.PendingControls(ctx, "replica-a"); err != nil || len(pending) != 0 {
		t.Fatalf("PendingControls after the answer = %+v, %v", pending, err)
	}
	// Pending controls come oldest first; an empty answer is an answer.
	var sent []int64
	for i := range 3 {
		id, err := sender.SendControl(ctx, "r1", []byte{byte(i)})
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, id)
	}
	if err := sender.AnswerControl(ctx, sent[0], nil); err != nil {
		t.Fatal(err)
	}
	if got, err := owner.ControlAnswer(ctx, sent[0]); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty answer = %q (nil %v), %v", got, got == nil, err)
	}
	pending, err = owner.PendingControls(ctx, "replica-a")
	if err != nil || len(pending) != 2 || pending[0].ID != sent[1] || pending[1].ID != sent[2] || string(pending[1].Payload) != "\x02" {
		t.Fatalf("PendingControls = %+v, %v; want %v oldest first", pending, err, sent[1:])
	}
	for name, err := range map[string]error{
		"answer of an unknown control": owner.AnswerControl(ctx, 1<<40, []byte("x")),
		"control of an unknown run":    func() error { _, err := sender.SendControl(ctx, "ghost", []byte("x")); return err }(),
		"read of an unknown control":   func() error { _, err := sender.ControlAnswer(ctx, 1<<40); return err }(),
	} {
		if !errors.Is(err, persistence.ErrNotFound) {
			t.Fatalf("%s: %v, want ErrNotFound", name, err)
		}
	}
	if err := owner.StartRun(ctx, e.session(owner), "unclaimed", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sender.SendControl(ctx, "unclaimed", []byte("x")); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("control of a run without owner: %v, want ErrNotFound", err)
	}

	w := owner.Fenced(f)
	if err := w.AppendEvents(ctx, "r1", []persistence.Event{{Seq: 1, Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	wantWake(t, events, "the events")
	if err := w.EndRun(ctx, "r1", persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED}); err != nil {
		t.Fatal(err)
	}
	if _, err := sender.SendControl(ctx, "r1", []byte("x")); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("control of an ended run: %v, want ErrNotFound", err)
	}
}

// Watch wakes every watcher of a topic, on every replica, without
// blocking the writer, and stops when told.
func testWatch(t *testing.T, e *sharedEnv) {
	ctx := context.Background()
	s, peer := e.s, e.peer()
	sid := e.session(s)
	w := s.Fenced(e.claim(s, sid, "r1", "a", time.Minute))
	here, stopHere := s.Watch(persistence.EventsTopic("r1"))
	defer stopHere()
	there, stopThere := peer.Watch(persistence.EventsTopic("r1"))
	defer stopThere()
	quiet, stopQuiet := peer.Watch(persistence.EventsTopic("r2"))
	defer stopQuiet()
	drain(here)
	drain(there)
	drain(quiet)

	// Nobody reads the watches while many batches are stored: wake-ups
	// coalesce instead of holding the writer.
	for seq := uint64(1); seq <= 50; seq++ {
		if err := w.AppendEvents(ctx, "r1", []persistence.Event{{Seq: seq, Data: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	wantWake(t, here, "events on the writer's replica")
	wantWake(t, there, "events on another replica")

	// A stopped watch is woken no more; stopping twice is harmless.
	stopThere()
	stopThere()
	drain(there)
	other, stopOther := peer.Watch(persistence.EventsTopic("r1"))
	defer stopOther()
	if err := w.AppendEvents(ctx, "r1", []persistence.Event{{Seq: 51, Data: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	wantWake(t, other, "events after a new watch")
	wantWake(t, here, "events again")
	select {
	case <-there:
		t.Fatal("a stopped watch was woken")
	case <-quiet:
		t.Fatal("the watch of another topic was woken")
	default:
	}
}

func testFeed(t *testing.T, e *sharedEnv) {
	ctx := context.Background()
	s, peer := e.s, e.peer()
	head, err := s.FeedHead(ctx)
	if err != nil || head != 0 {
		t.Fatalf("FeedHead of an empty feed: %d, %v", head, err)
	}
	wake, stop := peer.Watch(persistence.FeedTopic)
	defer stop()
	drain(wake)
	if err := s.AppendFeed(ctx, "a", []byte("one"), []byte("two")); err != nil {
		t.Fatal(err)
	}
	wantWake(t, wake, "a feed append on another replica")
	got, pruned, err := peer.ReadFeed(ctx, 0, 10)
	if err != nil || pruned != 0 || len(got) != 2 || got[0].Origin != "a" || string(got[0].Payload) != "one" || string(got[1].Payload) != "two" || got[0].Seq >= got[1].Seq {
		t.Fatalf("ReadFeed: %+v, pruned %d, %v", got, pruned, err)
	}
	if head, err := peer.FeedHead(ctx); err != nil || head != got[1].Seq {
		t.Fatalf("FeedHead %d, %v; want %d", head, err, got[1].Seq)
	}

	// Replicas appending at once: a reader that always resumes after the
	// last seq it read sees every change once, in increasing seq order,
	// each writer's in the order it wrote them.
	const perWriter = 40
	var wg sync.WaitGroup
	writers := []persistence.Shared{s, peer}
	for i, w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range perWriter {
				if err := w.AppendFeed(ctx, fmt.Sprint("w", i), []byte(fmt.Sprint(n))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	after := got[1].Seq
	next := map[string]int{}
	seen := 0
	read := func() {
		for {
			page, _, err := s.ReadFeed(ctx, after, 7)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range page {
				if c.Seq <= after {
					t.Fatalf("seq %d after %d", c.Seq, after)
				}
				if want := fmt.Sprint(next[c.Origin]); string(c.Payload) != want {
					t.Fatalf("writer %s: change %q, want %q (lost or reordered)", c.Origin, c.Payload, want)
				}
				next[c.Origin]++
				after = c.Seq
				seen++
			}
			if len(page) < 7 {
				return
			}
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		default:
		}
		read()
	}
	read()
	if seen != 2*perWriter {
		t.Fatalf("read %d changes, want %d", seen, 2*perWriter)
	}

	// Pruning deletes the oldest; a reader behind them learns it missed
	// some, one after them does not.
	if e.caps.Advance != nil {
		e.caps.Advance(time.Minute)
	} else {
		time.Sleep(10 * time.Millisecond)
	}
	if err := peer.PruneFeed(ctx, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got, pruned, err := s.ReadFeed(ctx, 0, 10); err != nil || pruned != after || len(got) != 0 {
		t.Fatalf("ReadFeed from 0 after pruning: %d changes, pruned up to %d, %v; want none, up to %d", len(got), pruned, err, after)
	}
	if head, err := s.FeedHead(ctx); err != nil || head != after {
		t.Fatalf("FeedHead after pruning %d, %v; want %d", head, err, after)
	}
	if err := s.AppendFeed(ctx, "a", []byte("later")); err != nil {
		t.Fatal(err)
	}
	if got, pruned, err := s.ReadFeed(ctx, 0, 10); err != nil || pruned != after || len(got) != 1 || got[0].Seq <= after {
		t.Fatalf("ReadFeed after pruning and an append: %+v, pruned up to %d, %v", got, pruned, err)
	}
}
