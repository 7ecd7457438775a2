package agent_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/memory"
)

// replicaLease is the replicas' lease. Leases run on the store's manual
// clock, so they expire only when a test advances it; the agents' loops
// tick on real time, every lease/3 and lease/4.
const replicaLease = 300 * time.Millisecond

// replicas are two agents, "a" and "b", each over its own handle onto one
// shared in-memory database, as two agentd processes over one
// PostgreSQL database.
type replicas struct {
	clock *memory.ManualClock
	store *memory.Shared
	a, b  *agent.Agent
}

func newReplicas(t *testing.T, tools ...agentloop.Tool) *replicas {
	t.Helper()
	// The store's clock starts at the agents' (real) time: the agents prune
	// event logs the store dates older than their retention by their own
	// clock, which would otherwise take a fresh run's log for an old one.
	clock := memory.NewManualClock(time.Now().UTC().Truncate(time.Second))
	r := &replicas{clock: clock, store: memory.NewShared(memory.WithClock(clock.Now))}
	open := func(id string, s persistence.Shared) *agent.Agent {
		a, err := agent.New(context.Background(), s, agent.Options{ReplicaID: id, Lease: replicaLease, Tools: tools})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := a.Close(ctx); err != nil {
				t.Errorf("Close of replica %s: %v", id, err)
			}
			_ = s.Close()
		})
		return a
	}
	r.a = open("a", r.store)
	r.b = open("b", r.store.Peer())
	return r
}

func (r *replicas) session(t *testing.T, cfg *agentdv1.SessionConfig) string {
	t.Helper()
	if err := r.a.CheckConfig("", cfg); err != nil {
		t.Fatalf("CheckConfig: %v", err)
	}
	s, err := r.store.CreateSession(context.Background(), persistence.CreateSessionParams{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

// follow collects a run's events through replica a until agent_end.
func follow(t *testing.T, a *agent.Agent, sessionID, runID string) []*agentdv1.AgentEvent {
	t.Helper()
	var got []agent.Event
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := a.Follow(ctx, sessionID, runID, 0, agent.FollowOptions{}, func(e agent.Event) error {
		got = append(got, e)
		return nil
	})
	if err != nil {
		t.Fatalf("Follow(%s): %v", runID, err)
	}
	return decode(t, got)
}

// A request that reaches the replica not running the session's run is
// relayed to the run's owner, and a follower on the other replica sees
// the run to its end.
func TestReplicasRelayControls(t *testing.T) {
	g := newGate()
	defer g.open()
	r := newReplicas(t, g.tool())
	id := r.session(t, waitConfig(t, text("after steer")))
	ctx := context.Background()
	runID, err := r.a.Start(ctx, agent.StartRequest{SessionID: id, Prompt: user("go")})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
	_, err = r.b.Start(ctx, agent.StartRequest{SessionID: id, Prompt: user("again")})
	wantKind(t, err, agent.ErrBusy, runID)
	if n, err := r.b.Steer(ctx, id, user("steer")); err != nil || n != 1 {
		t.Fatalf("Steer through replica b: %d, %v", n, err)
	}
	g.open()
	got := follow(t, r.b, id, runID)
	checkSeqs(t, got, id, runID)
	var users []string
	for _, ev := range got {
		if u := ev.GetMessageEnd().GetMessage().GetUser(); u != nil {
			users = append(users, u.GetContent()[0].GetText().GetText())
		}
	}
	if strings.Join(users, ",") != "go,steer" {
		t.Fatalf("users in order %v, want go,steer", users)
	}
	if end := got[len(got)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("agent_end %v, want completed", end)
	}
	if run, err := r.store.GetRun(ctx, runID); err != nil || run.Owner != "a" || run.Outcome != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("run %+v, %v; want completed by a", run, err)
	}
	_, err = r.b.Steer(ctx, id, user("late"))
	wantKind(t, err, agent.ErrIdle, "Prompt")
}

// When a replica's lease on its run expires, the run stops there, the
// other replica closes it as interrupted, and the session takes a new
// run on the other replica.
func TestReplicaTakesOverAfterLeaseExpiry(t *testing.T) {
	g := newGate()
	defer g.open()
	r := newReplicas(t, g.tool())
	id := r.session(t, waitConfig(t, text("never said"), text("after takeover")))
	ctx := context.Background()
	runID, err := r.a.Start(ctx, agent.StartRequest{SessionID: id, Prompt: user("go")})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
	// Replica a renews its lease on real time; the lease outlives a
	// while the store's clock stands still.
	time.Sleep(replicaLease)
	if run, err := r.store.GetRun(ctx, runID); err != nil || run.Ended() {
		t.Fatalf("run %+v, %v; want it active while the clock stands still", run, err)
	}

	r.clock.Advance(2 * replicaLease)
	got := follow(t, r.b, id, runID)
	end := got[len(got)-1].GetAgentEnd()
	if end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED || end.GetErrorMessage() != agent.ExpiredText {
		t.Fatalf("agent_end %v, want interrupted: %s", end, agent.ExpiredText)
	}
	if run, err := r.store.GetRun(ctx, runID); err != nil || run.Outcome != agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED {
		t.Fatalf("run %+v, %v; want interrupted", run, err)
	}
	// The call was running when the lease expired: it is in doubt, in the
	// run's event log before agent_end and in the transcript.
	if d := got[len(got)-2].GetToolInDoubt(); d.GetToolCallId() != "c1" || d.GetRunId() != runID || d.GetIdempotencyKey() != agent.IdempotencyKey(id, runID, "c1") {
		t.Fatalf("event before agent_end: %v, want c1 in doubt", got[len(got)-2])
	}

	// The session takes no run until the call is decided; then it is
	// free for a run on b, which a's stopped run cannot write into.
	var next string
	deadline := time.Now().Add(10 * time.Second)
	for {
		next, err = r.b.Start(ctx, agent.StartRequest{SessionID: id, Prompt: user("again")})
		if errors.Is(err, agent.ErrPrecondition) {
			wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_TOOL_CALLS_IN_DOUBT, "ResolveInDoubt")
			if _, _, err := r.b.ResolveInDoubt(ctx, id, "c1", agent.InDoubtDecision{Action: agentdv1.InDoubtAction_IN_DOUBT_ACTION_SKIP}); err != nil {
				t.Fatalf("ResolveInDoubt on b: %v", err)
			}
			continue
		}
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // replica a may still be stopping its run
	}
	if err != nil {
		t.Fatalf("Start on replica b after the takeover: %v", err)
	}
	got = follow(t, r.a, id, next)
	if end := got[len(got)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("agent_end of the run on b: %v, want completed", end)
	}
	if run, err := r.store.GetRun(ctx, next); err != nil || run.Owner != "b" {
		t.Fatalf("run %+v, %v; want owned by b", run, err)
	}
}
