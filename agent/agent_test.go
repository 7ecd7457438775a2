package agent_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/memory"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/faux"
)

func TestMain(m *testing.M) {
	// The provider catalog's Gemini SDK dependencies start an opencensus
	// worker when the package loads; it is not ours to stop.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// harness is an agent over an in-memory store, which a restart hands to a
// new agent as a process restart would.
type harness struct {
	t     testing.TB
	store *memory.Store
	opts  agent.Options
	a     *agent.Agent
}

func newHarness(t testing.TB, opts agent.Options) *harness {
	t.Helper()
	h := &harness{t: t, store: memory.New(), opts: opts}
	h.start()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) start() {
	h.t.Helper()
	a, err := agent.New(context.Background(), h.store, h.opts)
	if err != nil {
		h.t.Fatal(err)
	}
	h.a = a
}

func (h *harness) stop() {
	if h.a == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.a.Close(ctx); err != nil {
		h.t.Errorf("Close: %v", err)
	}
	h.a = nil
}

// restart stops the agent and starts a new one over the same store.
func (h *harness) restart() {
	h.t.Helper()
	h.stop()
	h.store = memory.Reopen(h.store)
	h.start()
}

func (h *harness) session(cfg *agentdv1.SessionConfig) string {
	h.t.Helper()
	if err := h.a.CheckConfig("", cfg); err != nil {
		h.t.Fatalf("CheckConfig: %v", err)
	}
	s, err := h.store.CreateSession(context.Background(), persistence.CreateSessionParams{Config: cfg})
	if err != nil {
		h.t.Fatal(err)
	}
	return s.ID
}

func user(text string) *agentdv1.AgentMessage {
	return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{faux.Text(text)}}}}
}

// follow collects a run's events after seq after until agent_end.
func (h *harness) follow(sessionID, runID string, after uint64) ([]agent.Event, error) {
	var got []agent.Event
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := h.a.Follow(ctx, sessionID, runID, after, agent.FollowOptions{}, func(e agent.Event) error {
		got = append(got, e)
		return nil
	})
	return got, err
}

// prompt runs a prompt to agent_end and returns the run id and its events.
func (h *harness) prompt(sessionID, text string) (string, []agent.Event) {
	h.t.Helper()
	id, err := h.a.Start(context.Background(), agent.StartRequest{SessionID: sessionID, Prompt: user(text)})
	if err != nil {
		h.t.Fatalf("Start: %v", err)
	}
	evs, err := h.follow(sessionID, id, 0)
	if err != nil {
		h.t.Fatalf("Follow: %v", err)
	}
	return id, evs
}

func decode(t testing.TB, evs []agent.Event) []*agentdv1.AgentEvent {
	t.Helper()
	out := make([]*agentdv1.AgentEvent, len(evs))
	for i, e := range evs {
		ev, err := e.Decode()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ev.GetSeq() != e.Seq || e.End != (ev.GetAgentEnd() != nil) {
			t.Fatalf("event %d: seq %d/%d, end %v: %v", i, ev.GetSeq(), e.Seq, e.End, ev)
		}
		out[i] = ev
	}
	return out
}

// kinds names the events, collapsing runs of message_update.
func kinds(evs []*agentdv1.AgentEvent) string {
	var out []string
	for _, ev := range evs {
		k := string(ev.ProtoReflect().WhichOneof(ev.ProtoReflect().Descriptor().Oneofs().ByName("event")).Name())
		if k == "message_update" && len(out) > 0 && out[len(out)-1] == "message_update" {
			continue
		}
		out = append(out, k)
	}
	return strings.Join(out, " ")
}

// checkSeqs checks a run's events are numbered 1, 2, 3, ... and name it.
func checkSeqs(t testing.TB, evs []*agentdv1.AgentEvent, sessionID, runID string) {
	t.Helper()
	for i, ev := range evs {
		if ev.GetSeq() != uint64(i)+1 || ev.GetSessionId() != sessionID || ev.GetRunId() != runID {
			t.Fatalf("event %d is seq %d of %s/%s, want seq %d of %s/%s", i, ev.GetSeq(), ev.GetSessionId(), ev.GetRunId(), i+1, sessionID, runID)
		}
	}
}

func text(s string) *agentdv1.AssistantMessage { return faux.Message(faux.Text(s)) }

func toolCall(t testing.TB, id, name string, args map[string]any) *agentdv1.AssistantMessage {
	t.Helper()
	return faux.Message(faux.ToolCall(id, name, args))
}

func script(answers ...*agentdv1.AssistantMessage) *agentdv1.SessionConfig {
	return &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Responses: answers}}
}

func wantKind(t testing.TB, err, kind error, contains string) {
	t.Helper()
	if !errors.Is(err, kind) || !strings.Contains(fmt.Sprint(err), contains) {
		t.Fatalf("error %v, want %v mentioning %q", err, kind, contains)
	}
}

// A prompt runs end to end: every message is committed with its entry id
// before its message_end is seen, the run's record ends, and its event log
// in the store is exactly what the live follower saw.
func TestPromptRunsAndLogsDurably(t *testing.T) {
	h := newHarness(t, agent.Options{})
	id := h.session(script(text("默认端口是 3000。")))
	runID, evs := h.prompt(id, "默认端口是多少？")
	got := decode(t, evs)
	checkSeqs(t, got, id, runID)
	if k := kinds(got); k != "agent_start turn_start message_start message_end message_start message_update message_end turn_end agent_end" {
		t.Fatalf("events: %s", k)
	}
	path, err := h.store.Path(context.Background(), id)
	if err != nil || len(path) != 2 {
		t.Fatalf("transcript %d entries, %v", len(path), err)
	}
	var ends []*agentdv1.MessageEnd
	for _, ev := range got {
		if e := ev.GetMessageEnd(); e != nil {
			ends = append(ends, e)
		}
	}
	for i, end := range ends {
		if end.GetEntryId() != path[i].GetId() || !cmp.Equal(end.GetMessage(), path[i].GetMessage(), protocmp.Transform()) {
			t.Fatalf("message_end %d names entry %q with %v; transcript has %v", i, end.GetEntryId(), end.GetMessage(), path[i])
		}
	}
	// The last batch is stored right after agent_end is published (a
	// follower reads it from memory until then).
	var run *persistence.Run
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		run, err = h.store.GetRun(context.Background(), runID)
		if err != nil || run.LastSeq == uint64(len(evs)) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || run.Outcome != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED || run.LastSeq != uint64(len(evs)) {
		t.Fatalf("run record %+v, %v; want %d events stored", run, err, len(evs))
	}
	stored, err := h.store.Events(context.Background(), runID, 0, 100)
	if err != nil || len(stored) != len(evs) {
		t.Fatalf("%d stored events, %v; want %d", len(stored), err, len(evs))
	}
	for i := range stored {
		if stored[i].Seq != evs[i].Seq || string(stored[i].Data) != string(evs[i].Data) {
			t.Fatalf("stored event %d differs from the one streamed", i)
		}
	}
	if activeRun(h.a, id) != "" {
		t.Fatal("session still running after agent_end")
	}
}

// Follow of a finished run, and after a restart, replays it from the store,
// byte for byte; from the middle it gives exactly the rest, and from its
// agent_end nothing, at once.
func TestFollowFinishedRunAfterRestart(t *testing.T) {
	h := newHarness(t, agent.Options{})
	id := h.session(script(text("one two three four five six")))
	runID, live := h.prompt(id, "count")
	for _, restart := range []bool{false, true} {
		if restart {
			h.restart()
		}
		for _, after := range []uint64{0, 3, uint64(len(live)) - 1, uint64(len(live))} {
			start := time.Now()
			got, err := h.follow(id, runID, after)
			// The stored agent_end says the log is complete: no wait for
			// last events that cannot come.
			if d := time.Since(start); d > time.Second {
				t.Fatalf("restart %v, after %d: Follow took %v", restart, after, d)
			}
			if err != nil {
				t.Fatalf("restart %v, after %d: %v", restart, after, err)
			}
			if len(got) != len(live)-int(after) {
				t.Fatalf("restart %v, after %d: %d events, want %d", restart, after, len(got), len(live)-int(after))
			}
			for i, e := range got {
				if want := live[int(after)+i]; e.Seq != want.Seq || string(e.Data) != string(want.Data) {
					t.Fatalf("restart %v, after %d: event %d differs", restart, after, i)
				}
			}
		}
		// Past its agent_end (events a client saw that the store lost):
		// the run's agent_end all the same.
		got, err := h.follow(id, runID, uint64(len(live))+1)
		if end := live[len(live)-1]; err != nil || len(got) != 1 || got[0].Seq != end.Seq || string(got[0].Data) != string(end.Data) {
			t.Fatalf("restart %v, after %d: %d events, %v; want the agent_end", restart, len(live)+1, len(got), err)
		}
		_, err = h.follow("other-session", runID, 0)
		wantKind(t, err, agent.ErrNotFound, runID)
		_, err = h.follow(id, "run-nope", 0)
		wantKind(t, err, agent.ErrNotFound, "run-nope")
	}
}

// The retention prunes finished runs' events; Follow then says so.
func TestEventRetention(t *testing.T) {
	h := newHarness(t, agent.Options{EventRetention: time.Second})
	id := h.session(script(text("soon gone")))
	runID, _ := h.prompt(id, "hi")
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := h.follow(id, runID, 0)
		if errors.Is(err, agent.ErrNotFound) {
			wantKind(t, err, agent.ErrNotFound, "no longer retained")
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("events were never pruned")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if path, err := h.store.Path(context.Background(), id); err != nil || len(path) != 2 {
		t.Fatalf("the transcript must stay: %d entries, %v", len(path), err)
	}
}

// A run that a stopped agentd left active is closed at the next start: its
// pending tool call gets "No result provided", and its event log, up to its
// last stored batch, ends with those results and agent_end INTERRUPTED.
func TestRepairEndsTheInterruptedRunsLog(t *testing.T) {
	h := newHarness(t, agent.Options{})
	id := h.session(script(toolCall(t, "c1", "wait", nil)))
	ctx := context.Background()
	// What a killed agentd leaves: a started run, its messages, the events
	// of its last stored batch, no end.
	if err := h.store.StartRun(ctx, id, "run-killed", nil); err != nil {
		t.Fatal(err)
	}
	call := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: agent.ScriptedAnswer(toolCall(t, "c1", "wait", nil))}}
	if err := h.store.Append(ctx, id, &agentdv1.Entry{RunId: "run-killed", Payload: &agentdv1.Entry_Message{Message: user("go")}},
		&agentdv1.Entry{RunId: "run-killed", Payload: &agentdv1.Entry_Message{Message: call}}); err != nil {
		t.Fatal(err)
	}
	var stored []persistence.Event
	for i, ev := range []*agentdv1.AgentEvent{
		{Event: &agentdv1.AgentEvent_AgentStart{AgentStart: &agentdv1.AgentStart{}}},
		{Event: &agentdv1.AgentEvent_TurnStart{TurnStart: &agentdv1.TurnStart{Turn: 1}}},
	} {
		ev.SessionId, ev.RunId, ev.Seq = id, "run-killed", uint64(i+1)
		stored = append(stored, persistence.Event{Seq: ev.Seq, Data: mustMarshal(t, ev)})
	}
	if err := h.store.AppendEvents(ctx, "run-killed", stored); err != nil {
		t.Fatal(err)
	}
	h.restart()

	evs, err := h.follow(id, "run-killed", 0)
	if err != nil {
		t.Fatal(err)
	}
	got := decode(t, evs)
	// The repair's events come after the seqs the run had reserved when
	// it started, which it may have streamed to clients.
	checkSeqs(t, got[:min(2, len(got))], id, "run-killed")
	checkSeqsFrom(t, got[min(2, len(got)):], id, persistence.StartReservedSeq+1)
	if k := kinds(got); k != "agent_start turn_start message_start message_end agent_end" {
		t.Fatalf("events: %s", k)
	}
	if end := got[4].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED || end.GetErrorMessage() != agent.InterruptedText {
		t.Fatalf("agent_end %v", end)
	}
	path, _ := h.store.Path(ctx, id)
	result := path[len(path)-1]
	if r := result.GetMessage().GetToolResult(); r.GetToolCallId() != "c1" || !r.GetIsError() || got[3].GetMessageEnd().GetEntryId() != result.GetId() {
		t.Fatalf("repair result %v, event names entry %q", result, got[3].GetMessageEnd().GetEntryId())
	}
	// The session can go on.
	if _, err := h.a.Start(ctx, agent.StartRequest{SessionID: id, Prompt: user("again")}); err != nil {
		t.Fatal(err)
	}
}

// After a run ends in ERROR, Continue decides on what the model would see:
// the failed answer is left out, so the prompt is last and Continue makes
// the call again.
func TestContinueAfterAFailedRun(t *testing.T) {
	h := newHarness(t, agent.Options{Models: &testkit.FlakyModels{}, Retry: provider.RetryPolicy{MaxRetries: -1}})
	id := h.session(&agentdv1.SessionConfig{Model: &agentdv1.ModelRef{Provider: "test", Id: "flaky"}})
	_, evs := h.prompt(id, "hi")
	got := decode(t, evs)
	if end := got[len(got)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_ERROR {
		t.Fatalf("first run: %v", end)
	}
	runID, err := h.a.Start(context.Background(), agent.StartRequest{SessionID: id})
	if err != nil {
		t.Fatalf("Continue after an ERROR run: %v", err)
	}
	evs, err = h.follow(id, runID, 0)
	if err != nil {
		t.Fatal(err)
	}
	got = decode(t, evs)
	if end := got[len(got)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("Continue run: %s %v", kinds(got), end)
	}
	if got := testkit.MessageKinds(h.transcript(id)); got != "user assistant assistant" {
		t.Fatalf("transcript %q", got)
	}
	// With the answer in place, Continue is refused as before.
	_, err = h.a.Start(context.Background(), agent.StartRequest{SessionID: id})
	wantKind(t, err, agent.ErrPrecondition, agentloop.ErrTextFromAssistant)
}

func mustMarshal(t testing.TB, ev *agentdv1.AgentEvent) []byte {
	t.Helper()
	b, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
