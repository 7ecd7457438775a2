package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// kindName names a change for failure messages.
func kindName(c *agent.Change) string {
	switch c.Kind {
	case agent.ChangeCreated:
		return "created"
	case agent.ChangeUpdated:
		return "updated"
	case agent.ChangeRunStarted:
		return "run_started"
	case agent.ChangeEvent:
		return fmt.Sprintf("event#%d", c.Event.GetSeq())
	case agent.ChangeRunEnded:
		return "run_ended"
	case agent.ChangePendingAdded:
		return "pending_added"
	case agent.ChangePendingRemoved:
		return "pending_removed"
	}
	return fmt.Sprint(c.Kind)
}

// A watch on one replica sees what the other does: a session created
// there, its run's start, every event of the run in order, its end, and
// the approval the run waits for, which the watcher's replica lists and
// answers (relayed to the run's owner).
func TestWatchAcrossReplicas(t *testing.T) {
	wrote := make(chan string, 8)
	r := newReplicas(t, jotTool(t, wrote))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	changes := make(chan *agent.Change, 1024)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		watched <- r.a.Watch(watchCtx, agent.WatchOptions{Match: func(*agent.Change) bool { return true },
			Started: func(string) error { close(started); return nil }},
			func(c *agent.Change) error { changes <- c; return nil })
	}()
	<-started
	var got []*agent.Change
	until := func(kind agent.ChangeKind) {
		t.Helper()
		for {
			select {
			case c := <-changes:
				got = append(got, c)
				if c.Kind == kind {
					return
				}
			case <-ctx.Done():
				var names []string
				for _, c := range got {
					names = append(names, kindName(c))
				}
				t.Fatalf("no change of kind %d on replica a; saw %s", kind, strings.Join(names, " "))
			}
		}
	}

	cfg := script(toolCall(t, "c1", "jot", map[string]any{"text": "x"}), text("done"))
	cfg.Tools = []*agentdv1.Tool{{Name: "jot"}}
	if err := r.b.CheckConfig("", cfg); err != nil {
		t.Fatal(err)
	}
	sess, err := r.b.CreateSession(ctx, persistence.CreateSessionParams{Config: cfg, Labels: map[string]string{"team": "blue"}})
	if err != nil {
		t.Fatal(err)
	}
	runID, err := r.b.Start(ctx, agent.StartRequest{SessionID: sess.ID, Prompt: user("go")})
	if err != nil {
		t.Fatal(err)
	}
	until(agent.ChangePendingAdded)
	pending, _ := r.a.PendingInteractions(func(c *agent.Change) bool { return true })
	if len(pending) != 1 || pending[0].GetRunId() != runID || pending[0].GetId() != "c1" ||
		pending[0].GetKind() != agentdv1.PendingInteractionKind_PENDING_INTERACTION_KIND_APPROVAL {
		t.Fatalf("replica a lists %v, want the approval of c1 in run %s", pending, runID)
	}
	if _, err := r.a.ResolveApproval(ctx, sess.ID, "c1", agent.Approval{Allowed: true}); err != nil {
		t.Fatalf("ResolveApproval through replica a: %v", err)
	}
	until(agent.ChangeRunEnded)
	stopWatch()
	if err := <-watched; err != context.Canceled {
		t.Fatalf("Watch ended with %v", err)
	}

	if c := got[0]; c.Kind != agent.ChangeCreated || c.SessionID != sess.ID || c.Session.Labels["team"] != "blue" {
		t.Fatalf("first change %s of %s, want the creation of %s with its labels", kindName(c), c.SessionID, sess.ID)
	}
	if c := got[1]; c.Kind != agent.ChangeRunStarted || c.RunID != runID {
		t.Fatalf("second change %s, want run %s started", kindName(c), runID)
	}
	stored := follow(t, r.a, sess.ID, runID)
	var events []*agentdv1.AgentEvent
	added, removed := -1, -1
	for i, c := range got[2 : len(got)-1] {
		if c.SessionID != sess.ID || c.Labels["team"] != "blue" {
			t.Errorf("change %s names session %s with labels %v", kindName(c), c.SessionID, c.Labels)
		}
		switch c.Kind {
		case agent.ChangeEvent:
			events = append(events, c.Event)
		case agent.ChangePendingAdded:
			added = i
		case agent.ChangePendingRemoved:
			removed = i
		default:
			t.Errorf("unexpected change %s during the run", kindName(c))
		}
	}
	if added < 0 || removed < added {
		t.Errorf("pending added at %d, removed at %d; want both, in that order", added, removed)
	}
	if len(events) != len(stored) {
		t.Fatalf("replica a's watch saw %d events of the run, its log holds %d", len(events), len(stored))
	}
	for i, ev := range events {
		if ev.GetSeq() != stored[i].GetSeq() || ev.GetRunId() != runID {
			t.Fatalf("watched event %d is seq %d of %s, want seq %d of %s", i, ev.GetSeq(), ev.GetRunId(), stored[i].GetSeq(), runID)
		}
	}
	if events[0].GetAgentStart() == nil || events[len(events)-1].GetAgentEnd() == nil {
		t.Fatalf("the watched events run from %v to %v, want agent_start to agent_end", events[0], events[len(events)-1])
	}
	if c := got[len(got)-1]; c.RunID != runID || c.Outcome != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("run ended %s with %v, want %s completed", c.RunID, c.Outcome, runID)
	}
	if left, _ := r.a.PendingInteractions(func(*agent.Change) bool { return true }); len(left) != 0 {
		t.Fatalf("replica a still lists %v", left)
	}
	if s := <-wrote; s != "x" {
		t.Fatalf("the tool jotted %q", s)
	}
}
