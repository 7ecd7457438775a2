package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/postgres"
	"github.com/agentd/agentd/persistence/postgres/pgtest"
)

// lease is short so expiry tests wait little; every wait for it polls the
// database's clock instead of sleeping a guessed time.
const lease = 300 * time.Millisecond

// patience bounds every poll: far longer than anything should take.
const patience = 10 * time.Second

func userEntry(text string) *agentdv1.Entry {
	return &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{
		User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: text}}}}},
	}}}}
}

func newSession(t *testing.T, s *postgres.Store) string {
	t.Helper()
	sess, err := s.CreateSession(context.Background(), persistence.CreateSessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	return sess.ID
}

func claim(t *testing.T, s *postgres.Store, sessionID, runID, owner string, d time.Duration) persistence.Fence {
	t.Helper()
	f, err := s.ClaimRun(context.Background(), sessionID, runID, owner, d)
	if err != nil {
		t.Fatalf("ClaimRun(%s, %s, %s): %v", sessionID, runID, owner, err)
	}
	return f
}

// waitExpired polls until the lease of run runID expired by the
// database's clock.
func waitExpired(t *testing.T, dsn, runID string) {
	t.Helper()
	conn := rawConn(t, dsn)
	deadline := time.Now().Add(patience)
	for {
		var expired bool
		if err := conn.QueryRow(context.Background(), `SELECT lease_expiry < now() FROM runs WHERE id = $1`, runID).Scan(&expired); err != nil {
			t.Fatalf("lease of %s: %v", runID, err)
		}
		if expired {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease of %s did not expire within %v", runID, patience)
		}
		time.Sleep(20 * time.Millisecond)
	}
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

func TestClaimRun(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := newStore(t, dsn)
	sid, other := newSession(t, s), newSession(t, s)
	f := claim(t, s, sid, "r1", "replica-a", time.Minute)
	if f != (persistence.Fence{RunID: "r1", Owner: "replica-a", Generation: 1}) {
		t.Fatalf("fence %+v", f)
	}
	r, err := s.GetRun(ctx, "r1")
	if err != nil || r.Owner != "replica-a" || r.Ended() || r.LeaseExpiry.Before(r.StartTime.Add(50*time.Second)) {
		t.Fatalf("GetRun of a claimed run = %+v, %v", r, err)
	}
	if active, err := s.ActiveRun(ctx, sid); err != nil || active.ID != "r1" || active.Owner != "replica-a" {
		t.Fatalf("ActiveRun = %+v, %v", active, err)
	}

	tests := []struct {
		name           string
		session, runID string
		check          func(t *testing.T, err error)
	}{
		{"second claim of the session names the active run", sid, "r2", func(t *testing.T, err error) {
			var ae *persistence.ActiveRunError
			if !errors.As(err, &ae) || !errors.Is(err, persistence.ErrConflict) || ae.Run.ID != "r1" || ae.Run.Owner != "replica-a" || ae.Run.SessionID != sid {
				t.Fatalf("got %v, want an *ActiveRunError naming r1 of replica-a", err)
			}
		}},
		{"run id used before", other, "r1", func(t *testing.T, err error) {
			var ae *persistence.ActiveRunError
			if !errors.Is(err, persistence.ErrConflict) || errors.As(err, &ae) {
				t.Fatalf("got %v, want ErrConflict without an active run", err)
			}
		}},
		{"unknown session", "nope", "r3", func(t *testing.T, err error) {
			if !errors.Is(err, persistence.ErrNotFound) {
				t.Fatalf("got %v, want ErrNotFound", err)
			}
		}},
		{"empty run id", sid, "", func(t *testing.T, err error) {
			if !errors.Is(err, persistence.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.ClaimRun(ctx, tc.session, tc.runID, "replica-b", time.Minute)
			tc.check(t, err)
		})
	}

	// Runs without owner are not limited by a claim or by each other.
	for _, id := range []string{"u1", "u2"} {
		if err := s.StartRun(ctx, sid, id); err != nil {
			t.Fatalf("StartRun(%s) beside a claimed run: %v", id, err)
		}
	}
	if _, err := s.ActiveRun(ctx, other); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("ActiveRun of a session without claimed run: %v", err)
	}
	// Ended, the session takes a new claim.
	if err := s.Fenced(f).EndRun(ctx, f.RunID, agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED, ""); err != nil {
		t.Fatal(err)
	}
	claim(t, s, sid, "r4", "replica-b", time.Minute)
}

func TestRenewLeases(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := newStore(t, dsn)
	kept := claim(t, s, newSession(t, s), "kept", "a", lease)
	claim(t, s, newSession(t, s), "dropped", "a", lease)
	claim(t, s, newSession(t, s), "theirs", "b", time.Minute)

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
			lost, err := s.RenewLeases(ctx, "a", tc.ids, lease)
			if err != nil || !slices.Equal(lost, tc.want) {
				t.Fatalf("RenewLeases(%v) = %v, %v; want %v", tc.ids, lost, err, tc.want)
			}
		})
	}

	// Renewed well within the lease, "kept" outlives several leases while
	// "dropped" expires.
	raw := rawConn(t, dsn)
	start := time.Now()
	for expired := false; !expired || time.Since(start) < 3*lease; {
		if lost, err := s.RenewLeases(ctx, "a", []string{"kept"}, lease); err != nil || len(lost) != 0 {
			t.Fatalf("renewing a held lease: lost %v, %v", lost, err)
		}
		time.Sleep(lease / 6)
		if err := raw.QueryRow(ctx, `SELECT lease_expiry < now() FROM runs WHERE id = 'dropped'`).Scan(&expired); err != nil {
			t.Fatal(err)
		}
		if time.Since(start) > patience {
			t.Fatal("the lease of dropped did not expire")
		}
	}
	if err := s.Fenced(kept).AppendEvents(ctx, kept.RunID, []persistence.Event{{Seq: 1, Data: []byte("x")}}); err != nil {
		t.Fatalf("fenced write after renewals: %v", err)
	}
	lost, err := s.RenewLeases(ctx, "a", []string{"kept", "dropped"}, lease)
	if err != nil || !slices.Equal(lost, []string{"dropped"}) {
		t.Fatalf("renewing after expiry: lost %v, %v; want [dropped]", lost, err)
	}
	if r, err := s.GetRun(ctx, "dropped"); err != nil || r.Ended() {
		t.Fatalf("an expired run is closed only by CloseExpiredRuns: %+v, %v", r, err)
	}
}

// fencedWrites are the writes of a run under a fence, each on its own
// session and run state.
var fencedWrites = []struct {
	name  string
	write func(ctx context.Context, s *postgres.Store, f persistence.Fence, sessionID string) error
}{
	{"AppendFenced", func(ctx context.Context, s *postgres.Store, f persistence.Fence, sid string) error {
		return s.Fenced(f).Append(ctx, sid, userEntry("x"))
	}},
	{"SetLeafFenced", func(ctx context.Context, s *postgres.Store, f persistence.Fence, sid string) error {
		return s.Fenced(f).SetLeaf(ctx, sid, "")
	}},
	{"AppendEventsFenced", func(ctx context.Context, s *postgres.Store, f persistence.Fence, sid string) error {
		r, err := s.GetRun(ctx, f.RunID)
		if err != nil {
			return err
		}
		return s.Fenced(f).AppendEvents(ctx, f.RunID, []persistence.Event{{Seq: r.LastSeq + 1, Data: []byte("e")}})
	}},
	{"EndRunFenced", func(ctx context.Context, s *postgres.Store, f persistence.Fence, sid string) error {
		return s.Fenced(f).EndRun(ctx, f.RunID, agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED, "")
	}},
}

func TestFencedWrites(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := newStore(t, dsn)
	states := []struct {
		name string
		// prepare claims a run of sessionID and returns the fence to
		// write with.
		prepare func(t *testing.T, sessionID, runID string) persistence.Fence
		fenced  bool
	}{
		{"valid claim", func(t *testing.T, sid, rid string) persistence.Fence {
			return claim(t, s, sid, rid, "a", time.Minute)
		}, false},
		{"lease expired", func(t *testing.T, sid, rid string) persistence.Fence {
			f := claim(t, s, sid, rid, "a", lease)
			waitExpired(t, dsn, rid)
			return f
		}, true},
		{"closed by CloseExpiredRuns", func(t *testing.T, sid, rid string) persistence.Fence {
			f := claim(t, s, sid, rid, "a", lease)
			waitExpired(t, dsn, rid)
			closed, err := s.CloseExpiredRuns(ctx)
			if err != nil || !slices.ContainsFunc(closed, func(r *persistence.Run) bool { return r.ID == rid }) {
				t.Fatalf("CloseExpiredRuns = %v, %v; want %s in it", closed, err, rid)
			}
			// A new claim of the session by another replica.
			claim(t, s, sid, rid+"-next", "b", time.Minute)
			return f
		}, true},
		{"another owner", func(t *testing.T, sid, rid string) persistence.Fence {
			f := claim(t, s, sid, rid, "a", time.Minute)
			f.Owner = "b"
			return f
		}, true},
		{"another generation", func(t *testing.T, sid, rid string) persistence.Fence {
			f := claim(t, s, sid, rid, "a", time.Minute)
			f.Generation++
			return f
		}, true},
		{"ended without fence", func(t *testing.T, sid, rid string) persistence.Fence {
			f := claim(t, s, sid, rid, "a", time.Minute)
			if err := s.EndRun(ctx, rid, agentdv1.RunOutcome_RUN_OUTCOME_ABORTED, "operator"); err != nil {
				t.Fatal(err)
			}
			return f
		}, true},
	}
	n := 0
	for _, st := range states {
		for _, w := range fencedWrites {
			t.Run(st.name+"/"+w.name, func(t *testing.T) {
				n++
				sid, rid := newSession(t, s), fmt.Sprintf("run%d", n)
				if err := s.Append(ctx, sid, userEntry("before")); err != nil {
					t.Fatal(err)
				}
				f := st.prepare(t, sid, rid)
				before, err := s.Path(ctx, sid)
				if err != nil {
					t.Fatal(err)
				}
				err = w.write(ctx, s, f, sid)
				if !st.fenced {
					if err != nil {
						t.Fatalf("%s under a valid fence: %v", w.name, err)
					}
					return
				}
				if !errors.Is(err, persistence.ErrFenced) {
					t.Fatalf("%s: %v, want ErrFenced", w.name, err)
				}
				var pe *persistence.Error
				if !errors.As(err, &pe) || pe.RunID != rid {
					t.Fatalf("%s: %v does not name run %s", w.name, err, rid)
				}
				after, err := s.Path(ctx, sid)
				if err != nil || len(after) != len(before) {
					t.Fatalf("a fenced write changed the transcript: %d entries, then %d (%v)", len(before), len(after), err)
				}
			})
		}
	}

	t.Run("session of another run", func(t *testing.T) {
		f := claim(t, s, newSession(t, s), "mine", "a", time.Minute)
		if err := s.Fenced(f).Append(ctx, newSession(t, s), userEntry("x")); !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("AppendFenced to another session: %v, want ErrInvalid", err)
		}
	})
}

// The run's last events (agent_end) follow EndRunFenced; a run closed by
// another replica takes none.
func TestEventsAfterEnd(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s := newStore(t, dsn)
	sid := newSession(t, s)
	f := claim(t, s, sid, "r1", "a", time.Minute)
	ev := func(seq uint64) []persistence.Event {
		return []persistence.Event{{Seq: seq, Data: []byte(fmt.Sprint("event ", seq))}}
	}
	if err := s.Fenced(f).AppendEvents(ctx, f.RunID, ev(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Fenced(f).EndRun(ctx, f.RunID, agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Fenced(f).AppendEvents(ctx, f.RunID, ev(2)); err != nil {
		t.Fatalf("AppendEventsFenced after EndRunFenced: %v", err)
	}
	if err := s.Fenced(f).Append(ctx, sid, userEntry("late")); !errors.Is(err, persistence.ErrFenced) {
		t.Fatalf("AppendFenced after EndRunFenced: %v, want ErrFenced", err)
	}
	if err := s.Fenced(f).EndRun(ctx, f.RunID, agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED, ""); !errors.Is(err, persistence.ErrConflict) {
		t.Fatalf("EndRunFenced twice: %v, want ErrConflict", err)
	}
	if got, err := s.Events(ctx, "r1", 0, 10); err != nil || len(got) != 2 {
		t.Fatalf("Events = %v, %v; want 2", got, err)
	}

	// Closed as expired, the run refuses its former owner's events.
	g := claim(t, s, sid, "r2", "a", lease)
	waitExpired(t, dsn, "r2")
	if _, err := s.CloseExpiredRuns(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Fenced(g).AppendEvents(ctx, g.RunID, ev(1)); !errors.Is(err, persistence.ErrFenced) {
		t.Fatalf("AppendEventsFenced after CloseExpiredRuns: %v, want ErrFenced", err)
	}
}

func TestCloseExpiredRunsConcurrently(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	stores := []*postgres.Store{newStore(t, dsn), newStore(t, dsn)}
	const runs = 20
	var want []string
	for i := range runs {
		id := fmt.Sprintf("r%02d", i)
		claim(t, stores[i%2], newSession(t, stores[0]), id, fmt.Sprint("owner", i%3), lease)
		want = append(want, id)
	}
	live := claim(t, stores[0], newSession(t, stores[0]), "live", "owner0", time.Minute)
	if err := stores[0].StartRun(ctx, newSession(t, stores[0]), "unclaimed"); err != nil {
		t.Fatal(err)
	}
	for _, id := range want {
		waitExpired(t, dsn, id)
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
			if j > 0 && r.StartTime.Before(rs[j-1].StartTime) {
				t.Fatalf("caller %d: runs not oldest first", i)
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
	if err := stores[1].Fenced(live).AppendEvents(ctx, live.RunID, []persistence.Event{{Seq: 1, Data: []byte("x")}}); err != nil {
		t.Fatalf("the live claim: %v", err)
	}
}

// Controls travel between two Store instances (replicas) on one
// database, and each step wakes the other side.
func TestControls(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	var lags atomic.Int64
	owner := newStore(t, dsn, postgres.WithNotifyLag(func(time.Duration) { lags.Add(1) }))
	sender := newStore(t, dsn)
	sid := newSession(t, owner)
	f := claim(t, owner, sid, "r1", "replica-a", time.Minute)

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
	if pending, err := owner.PendingControls(ctx, "replica-a"); err != nil || len(pending) != 0 {
		t.Fatalf("PendingControls after the answer = %+v, %v", pending, err)
	}
	// An empty answer is an answer.
	id2, err := sender.SendControl(ctx, "r1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.AnswerControl(ctx, id2, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := sender.ControlAnswer(ctx, id2); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty answer = %q (nil %v), %v", got, got == nil, err)
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

	if err := owner.Fenced(f).AppendEvents(ctx, f.RunID, []persistence.Event{{Seq: 1, Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	wantWake(t, events, "the events")
	if err := owner.Fenced(f).EndRun(ctx, f.RunID, agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := sender.SendControl(ctx, "r1", []byte("x")); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("control of an ended run: %v, want ErrNotFound", err)
	}
	if lags.Load() == 0 {
		t.Fatal("OnNotifyLag was never called")
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
