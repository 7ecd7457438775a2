package service_test

import (
	"strings"
	"testing"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence/postgres/pgtest"
	"github.com/agentd/agentd/service"
)

// TestWatchAcrossReplicas (PostgreSQL; skipped without a server, see
// pgtest): watches connected to replica a see what replica b does. A
// session created through b shows in a's WatchSessions; a run b runs
// shows in a's WatchSession (its start, every event in order, its end)
// and as run states in WatchSessions; the approval it waits for shows in
// a's WatchPendingInteractions and ListPendingInteractions, is answered
// through a, and is removed.
func TestWatchAcrossReplicas(t *testing.T) {
	dsn := pgtest.DSN(t)
	a := newHarnessOn(t, dsn, agent.Options{ReplicaID: "a"}, service.ServerOptions{})
	b := newHarnessOn(t, dsn, agent.Options{ReplicaID: "b"}, service.ServerOptions{})
	ctx := a.ctx()
	sessions, err := a.client.WatchSessions(ctx, &agentdv1.WatchSessionsRequest{LabelFilter: map[string]string{"team": "blue"}})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := sessions.Recv(); err != nil || ev.GetStarted() == nil {
		t.Fatalf("WatchSessions on a: %v, %v; want started", ev, err)
	}
	pending, err := a.client.WatchPendingInteractions(ctx, &agentdv1.WatchPendingInteractionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := pending.Recv(); err != nil || ev.GetStarted() == nil {
		t.Fatalf("WatchPendingInteractions on a: %v, %v; want started", ev, err)
	}

	created, err := b.client.CreateSession(b.ctx(), &agentdv1.CreateSessionRequest{Labels: map[string]string{"team": "blue"},
		Config: &agentdv1.SessionConfig{WorkspaceRoot: t.TempDir(), Tools: []*agentdv1.Tool{{Name: "bash"}},
			Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{bashCall(t, "c1", "echo hi"), textAnswer("done")}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	if ev, err := sessions.Recv(); err != nil || ev.GetCreated().GetId() != id || ev.GetSessionId() != id || ev.GetCreated().GetLabels()["team"] != "blue" {
		t.Fatalf("WatchSessions on a after b created %s: %v, %v", id, ev, err)
	}

	watch := watchSession(t, ctx, a.client, id, "")
	recvWatch(t, watch, func(ev *agentdv1.SessionWatchEvent) bool { return ev.GetStarted() != nil })
	stream, err := b.client.Prompt(b.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}

	ev, err := pending.Recv()
	if err != nil {
		t.Fatal(err)
	}
	p := ev.GetAdded()
	if p.GetSessionId() != id || p.GetId() != "c1" || p.GetRunId() == "" || p.GetKind() != agentdv1.PendingInteractionKind_PENDING_INTERACTION_KIND_APPROVAL ||
		p.GetRequest().GetApprovalRequested().GetToolCallId() != "c1" {
		t.Fatalf("WatchPendingInteractions on a: %v, want the approval of c1 of session %s", ev, id)
	}
	list, err := a.client.ListPendingInteractions(ctx, &agentdv1.ListPendingInteractionsRequest{SessionId: id})
	if err != nil || len(list.GetInteractions()) != 1 || list.GetInteractions()[0].GetId() != "c1" {
		t.Fatalf("ListPendingInteractions on a: %v, %v", list, err)
	}
	if _, err := a.client.ResolveApproval(ctx, &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "c1", Decision: allowed}); err != nil {
		t.Fatalf("ResolveApproval through a: %v", err)
	}
	if ev, err := pending.Recv(); err != nil || ev.GetRemoved().GetId() != "c1" || ev.GetRemoved().GetRunId() != p.GetRunId() {
		t.Fatalf("WatchPendingInteractions on a after the answer: %v, %v; want c1 removed", ev, err)
	}
	evs, err := drain(stream)
	if err != nil {
		t.Fatal(err)
	}
	if end := evs[len(evs)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("b's run: %s", kinds(evs))
	}
	runID := evs[0].GetRunId()

	got := recvWatch(t, watch, func(ev *agentdv1.SessionWatchEvent) bool { return ev.GetRunEnded() != nil })
	want := []string{"run_started"}
	for _, ev := range evs {
		want = append(want, eventKind(ev))
	}
	want = append(want, "run_ended")
	var seen []string
	for _, ev := range got {
		seen = append(seen, watchKind(ev))
	}
	if strings.Join(seen, " ") != strings.Join(want, " ") {
		t.Fatalf("a's WatchSession saw\n  %v\nwant\n  %v", seen, want)
	}
	for i, ev := range evs {
		if w := got[1+i].GetEvent(); w.GetSeq() != ev.GetSeq() || w.GetRunId() != runID {
			t.Fatalf("watched event %d is seq %d of %q, b streamed seq %d of %q", i, w.GetSeq(), w.GetRunId(), ev.GetSeq(), runID)
		}
	}
	if r := got[0].GetRunStarted(); r.GetRunId() != runID {
		t.Fatalf("run_started names %q, want %q", r.GetRunId(), runID)
	}
	if r := got[len(got)-1].GetRunEnded(); r.GetRunId() != runID || r.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("run_ended %v, want %s completed", r, runID)
	}

	var states []agentdv1.SessionState
	for {
		ev, err := sessions.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if rs := ev.GetRunState(); rs != nil {
			if rs.GetRunId() != runID || ev.GetSessionId() != id {
				t.Fatalf("run state %v of session %s, want run %s of %s", rs, ev.GetSessionId(), runID, id)
			}
			states = append(states, rs.GetState())
			if rs.GetState() == agentdv1.SessionState_SESSION_STATE_IDLE {
				break
			}
		}
	}
	if len(states) != 2 || states[0] != agentdv1.SessionState_SESSION_STATE_RUNNING {
		t.Fatalf("run states on a: %v, want running then idle", states)
	}

	// A session deleted through b ends a's watch of it.
	if _, err := b.client.DeleteSession(b.ctx(), &agentdv1.DeleteSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	recvWatch(t, watch, func(ev *agentdv1.SessionWatchEvent) bool { return ev.GetDeleted() != nil })
}
