package agent_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/persistence"
)

func TestSecondPromptRefusedWhileRunning(t *testing.T) {
	g := newGate()
	defer g.open()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}})
	ctx := context.Background()
	id := h.session(waitConfig(t, text("done")))
	s := h.promptRun(id, "go")
	<-g.entered
	before := h.transcript(id)

	_, err := h.a.Start(ctx, agent.StartRequest{SessionID: id, Prompt: user("again")})
	wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_SESSION_BUSY, "Steer")
	wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_SESSION_BUSY, "FollowUp")
	_, err = h.a.AppendMessages(ctx, id, []*agentdv1.AgentMessage{user("x")})
	wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_SESSION_BUSY, "idle")
	if after := h.transcript(id); len(after) != len(before) {
		t.Fatalf("a refused request changed the transcript: %d → %d entries", len(before), len(after))
	}
	if activeRun(h.a, id) != s.runID {
		t.Fatalf("active run %q while %s runs", activeRun(h.a, id), s.runID)
	}

	g.open()
	evs := s.rest()
	if evs[len(evs)-1].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("run: %s", allKinds(evs))
	}
	// agent_end means idle: a new prompt is accepted at once.
	h.run(id, "now it is fine")
}

func TestSteerAndFollowUp(t *testing.T) {
	g := newGate()
	defer g.open()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}})
	ctx := context.Background()
	id := h.session(waitConfig(t, text("after steering"), text("after follow-up")))
	_, err := h.a.Steer(ctx, id, user("early"))
	wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_RUN_NOT_ACTIVE, "Prompt")

	s := h.promptRun(id, "start")
	<-g.entered
	if n, err := h.a.Steer(ctx, id, user("steer: use port 8080")); err != nil || n != 1 {
		t.Fatalf("Steer = %d, %v", n, err)
	}
	if n, err := h.a.FollowUp(ctx, id, user("follow-up: and update the docs")); err != nil || n != 1 {
		t.Fatalf("FollowUp = %d, %v", n, err)
	}
	g.open()
	evs := s.rest()
	checkSeqsFrom(t, evs, id, 1)
	if !strings.Contains(allKinds(evs), "queue_update") {
		t.Errorf("no queue_update in %s", allKinds(evs))
	}
	var userTexts []string
	for _, e := range h.transcript(id) {
		if u := e.GetMessage().GetUser(); u != nil {
			userTexts = append(userTexts, u.GetContent()[0].GetText().GetText())
		}
	}
	want := "start|steer: use port 8080|follow-up: and update the docs"
	if got := strings.Join(userTexts, "|"); got != want {
		t.Fatalf("user messages %q, want %q", got, want)
	}
	if got, want := testkit.MessageKinds(h.transcript(id)), "user assistant tool_result user assistant user assistant"; got != want {
		t.Fatalf("transcript %q, want %q (steering after the tool batch, follow-up when the agent would stop)", got, want)
	}
}

func TestAbortDuringTool(t *testing.T) {
	g := newGate()
	defer g.open()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}})
	ctx := context.Background()
	id := h.session(waitConfig(t, text("never")))
	s := h.promptRun(id, "start")
	<-g.entered
	_, err := h.a.Abort(ctx, id, "run-other")
	wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_RUN_NOT_ACTIVE, "run-other")
	aborted, err := h.a.Abort(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	// Abort returns once the run ended: the session is idle at once.
	if r := activeRun(h.a, id); r != "" {
		t.Fatalf("active run %q after Abort", r)
	}
	evs := s.rest()
	end := evs[len(evs)-1].GetAgentEnd()
	if end == nil || evs[0].GetRunId() != aborted {
		t.Fatalf("stream after abort: %s", allKinds(evs))
	}
	// What completed stays: the prompt, the tool call and its cancelled
	// result; the next model call ends at once as ABORTED (pi's rule).
	entries := testkit.MessageEntries(h.transcript(id))
	if got, want := testkit.MessageKinds(entries), "user assistant tool_result assistant"; got != want {
		t.Fatalf("transcript %q, want %q", got, want)
	}
	if !entries[2].GetMessage().GetToolResult().GetIsError() ||
		entries[3].GetMessage().GetAssistant().GetStopReason() != agentdv1.StopReason_STOP_REASON_ABORTED {
		t.Fatalf("after abort: %v / %v", entries[2], entries[3])
	}
	if end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_ABORTED {
		t.Fatalf("agent_end outcome %v, want ABORTED", end.GetOutcome())
	}
	_, err = h.a.Abort(ctx, id, "")
	wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_RUN_NOT_ACTIVE, "no active run")
}

func TestClientDisconnectAbortsUnlessDetached(t *testing.T) {
	for _, detach := range []bool{false, true} {
		t.Run(map[bool]string{false: "attached", true: "detached"}[detach], func(t *testing.T) {
			g := newGate()
			defer g.open()
			h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}})
			id := h.session(waitConfig(t, text("finished")))
			s := h.startRun(agent.StartRequest{SessionID: id, Prompt: user("start")}, detach)
			seen := s.until(func(ev *agentdv1.AgentEvent) bool { return ev.GetToolExecutionStart() != nil })
			<-g.entered
			s.cancel()
			if _, err := s.drain(); !errors.Is(err, context.Canceled) {
				t.Fatalf("the dropped follower: %v", err)
			}
			if detach {
				g.open()
			}
			// The run ends either way: follow it to agent_end.
			if _, err := h.follow(id, s.runID, seen[len(seen)-1].GetSeq()); err != nil {
				t.Fatal(err)
			}
			entries := testkit.MessageEntries(h.transcript(id))
			if detach {
				if got, want := testkit.MessageKinds(entries), "user assistant tool_result assistant"; got != want {
					t.Fatalf("detached run: transcript %q, want %q", got, want)
				}
				// The run can be re-joined after it ended, from where the
				// client left off.
				rest := h.attach(id, seen[0].GetRunId(), seen[len(seen)-1].GetSeq(), agent.FollowOptions{}).rest()
				checkSeqsFrom(t, rest, id, seen[len(seen)-1].GetSeq()+1)
				if rest[len(rest)-1].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
					t.Fatalf("detached run ended %v", rest[len(rest)-1])
				}
			} else {
				if got, want := testkit.MessageKinds(entries), "user assistant tool_result assistant"; got != want {
					t.Fatalf("aborted run: transcript %q, want %q", got, want)
				}
				if sr := entries[3].GetMessage().GetAssistant().GetStopReason(); sr != agentdv1.StopReason_STOP_REASON_ABORTED {
					t.Fatalf("the dropped stream did not abort the run: last answer %v", sr)
				}
			}
		})
	}
}

func TestAttachAfterDroppedStreamGetsEveryEventOnce(t *testing.T) {
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{testkit.ReadFileTool(seedFiles)}})
	cfg := seedConfig(t)
	cfg.Faux.TokensPerSecond = 2000 // paced, so the run outlives the first stream
	cfg.Faux.Responses[1] = text(strings.Repeat("端口是 3000。", 60))
	id := h.session(cfg)

	// The reference: the same run on a second session, read in one go.
	refID := h.session(cfg)
	ref := h.run(refID, "读取 src/config.ts，告诉我默认端口。")

	s := h.startRun(agent.StartRequest{SessionID: id, Prompt: user("读取 src/config.ts，告诉我默认端口。")}, true)
	first := s.until(func(ev *agentdv1.AgentEvent) bool { return ev.GetMessageUpdate().GetTextDelta() != nil })
	s.cancel()
	last := first[len(first)-1]
	rest := h.attach(id, last.GetRunId(), last.GetSeq(), agent.FollowOptions{}).rest()
	all := append(first, rest...)
	checkSeqsFrom(t, all, id, 1)
	if allKinds(all) != allKinds(ref) {
		t.Fatalf("resumed stream differs from an uninterrupted one:\n got %s\nwant %s", allKinds(all), allKinds(ref))
	}
	if all[len(all)-1].GetAgentEnd() == nil {
		t.Fatal("resumed stream did not end with agent_end")
	}
}

func TestIdempotentPromptAttachesToTheSameRun(t *testing.T) {
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{testkit.ReadFileTool(seedFiles)}})
	id := h.session(seedConfig(t))
	req := agent.StartRequest{SessionID: id, Prompt: user("读取 src/config.ts"), RequestID: "req-1"}
	evs1 := h.startRun(req, false).rest()
	evs2 := h.startRun(req, false).rest()
	if len(evs1) != len(evs2) || evs1[0].GetRunId() != evs2[0].GetRunId() {
		t.Fatalf("retry did not replay the same run: %d events of %s, %d events of %s", len(evs1), evs1[0].GetRunId(), len(evs2), evs2[0].GetRunId())
	}
	if got := testkit.MessageKinds(h.transcript(id)); got != "user assistant tool_result assistant" {
		t.Fatalf("the retried prompt was appended again: %s", got)
	}
	// After a restart the request is remembered and its run replayed from
	// the durable event log.
	h.restart()
	evs3 := h.startRun(req, false).rest()
	if len(evs3) != len(evs1) || evs3[0].GetRunId() != evs1[0].GetRunId() || allKinds(evs3) != allKinds(evs1) {
		t.Fatalf("retry after restart did not replay the run: %s", allKinds(evs3))
	}
	if got := testkit.MessageKinds(h.transcript(id)); got != "user assistant tool_result assistant" {
		t.Fatalf("the retried prompt was appended after restart: %s", got)
	}
}

func TestConcurrentRunLimit(t *testing.T) {
	g := newGate()
	defer g.open()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}, MaxConcurrentRuns: 1})
	cfg := waitConfig(t, text("ok"))
	a, b := h.session(cfg), h.session(cfg)
	sa := h.promptRun(a, "go")
	<-g.entered
	_, err := h.a.Start(context.Background(), agent.StartRequest{SessionID: b, Prompt: user("go")})
	wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_CONCURRENCY_LIMIT, "runs are active")
	g.open()
	sa.rest()
	if got := testkit.MessageKinds(h.transcript(b)); got != "" {
		t.Fatalf("refused prompt changed session b: %q", got)
	}
}

func TestDeleteSessionWhileRunning(t *testing.T) {
	g := newGate()
	defer g.open()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}})
	ctx := context.Background()
	id := h.session(waitConfig(t))
	s := h.promptRun(id, "go")
	<-g.entered
	// The follower must be attached before the delete: one that attaches
	// only afterwards finds no run, which is right for it but not this test.
	s.until(func(ev *agentdv1.AgentEvent) bool { return ev.GetToolExecutionStart() != nil })
	wantReason(t, h.a.DeleteSession(ctx, id, false), agentdv1.ErrorReason_ERROR_REASON_SESSION_BUSY, "force")
	if err := h.a.DeleteSession(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	if evs := s.rest(); evs[len(evs)-1].GetAgentEnd() == nil {
		t.Fatalf("stream of the deleted session: %s", allKinds(evs))
	}
	if _, err := h.store.GetSession(ctx, id); !errors.Is(err, persistence.ErrNotFound) || !strings.Contains(err.Error(), id) {
		t.Fatalf("the deleted session: %v", err)
	}
}

// Follow without a run id follows the session's active run.
func TestFollowTheActiveRun(t *testing.T) {
	g := newGate()
	defer g.open()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}})
	id := h.session(waitConfig(t, text("done")))
	own := h.promptRun(id, "go")
	<-g.entered
	att := h.attach(id, "", 0, agent.FollowOptions{})
	first, err := att.recv() // the replay starts at once: the run is held open
	if err != nil {
		t.Fatal(err)
	}
	g.open()
	all := append([]*agentdv1.AgentEvent{first}, att.rest()...)
	checkSeqsFrom(t, all, id, 1)
	if got, want := allKinds(all), allKinds(own.rest()); got != want {
		t.Fatalf("Follow from seq 0 saw %s\nthe starting follower saw %s", got, want)
	}
}
