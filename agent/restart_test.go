package agent_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/memory"
	"github.com/agentd/agentd/provider"
)

func TestRestartRestoresSessionsAndContext(t *testing.T) {
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{testkit.ReadFileTool(seedFiles)}})
	ctx := context.Background()
	ids := []string{h.session(seedConfig(t)), h.session(seedConfig(t)), h.session(&agentdv1.SessionConfig{})}
	h.run(ids[0], "读取 src/config.ts，告诉我默认端口。")
	if _, err := h.a.AppendMessages(ctx, ids[1], []*agentdv1.AgentMessage{
		{Kind: &agentdv1.AgentMessage_Custom{Custom: &agentdv1.CustomMessage{CustomType: "note", Content: texts("job 7 done"), IncludeInModelContext: true}}},
	}); err != nil {
		t.Fatal(err)
	}
	before := map[string]*agent.ContextReport{}
	sessions := map[string]*persistence.Session{}
	transcripts := map[string][]*agentdv1.Entry{}
	for _, id := range ids {
		before[id] = h.report(id, "")
		s, err := h.store.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		sessions[id] = s
		transcripts[id] = h.transcript(id)
	}

	h.restart()

	list, err := h.store.ListSessions(ctx, persistence.ListSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Sessions) != len(ids) {
		t.Fatalf("%d sessions after restart, want %d", len(list.Sessions), len(ids))
	}
	for _, id := range ids {
		if after := h.report(id, ""); !cmp.Equal(after, before[id], protocmp.Transform()) {
			t.Errorf("session %s: the context changed across the restart:\nbefore %v\nafter  %v", id, before[id], after)
		}
		s, err := h.store.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if !cmp.Equal(s, sessions[id], protocmp.Transform()) {
			t.Errorf("session %s changed across the restart:\nbefore %+v\nafter  %+v", id, sessions[id], s)
		}
		if r := activeRun(h.a, id); r != "" {
			t.Errorf("session %s runs %s after the restart", id, r)
		}
		after := h.transcript(id)
		if len(after) != len(transcripts[id]) {
			t.Fatalf("session %s: %d entries after restart, want %d", id, len(after), len(transcripts[id]))
		}
		for i := range after {
			if !proto.Equal(after[i], transcripts[id][i]) {
				t.Errorf("session %s entry %d changed across the restart", id, i)
			}
		}
	}
	// The conversation goes on where it stopped.
	h.run(ids[0], "把它改成 8080。")
}

func TestRestartAfterCrashClosesInterruptedRun(t *testing.T) {
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{testkit.ReadFileTool(seedFiles)}})
	id := h.session(seedConfig(t))
	h.stop()

	// What a crash in the middle of a tool batch leaves: a started run, the
	// prompt and the assistant's tool calls, and no results.
	st := memory.Reopen(h.store)
	ctx := context.Background()
	if err := st.StartRun(ctx, id, "run-crashed", nil); err != nil {
		t.Fatal(err)
	}
	call := toolCall(t, "call_read", "read_file", map[string]any{"path": "src/config.ts"})
	call.Content = append(call.Content, toolCall(t, "call_2", "read_file", map[string]any{"path": "b"}).Content...)
	call.StopReason = agentdv1.StopReason_STOP_REASON_TOOL_USE
	if err := st.Append(ctx, id,
		&agentdv1.Entry{RunId: "run-crashed", Payload: &agentdv1.Entry_Message{Message: user("读取 src/config.ts")}},
		&agentdv1.Entry{RunId: "run-crashed", Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: call}}}},
	); err != nil {
		t.Fatal(err)
	}
	h.store = memory.Reopen(st)
	h.start()

	if r := activeRun(h.a, id); r != "" {
		t.Fatalf("session after crash recovery runs %s", r)
	}
	run, err := h.store.GetRun(ctx, "run-crashed")
	if err != nil {
		t.Fatal(err)
	}
	if run.Outcome != agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED {
		t.Fatalf("crashed run outcome %v, want INTERRUPTED", run.Outcome)
	}
	entries := h.transcript(id)
	if got, want := testkit.MessageKinds(entries), "user assistant tool_result tool_result"; got != want {
		t.Fatalf("transcript after recovery %q, want %q", got, want)
	}
	for i, callID := range []string{"call_read", "call_2"} {
		tr := entries[2+i].GetMessage().GetToolResult()
		if tr.GetToolCallId() != callID || !tr.GetIsError() || tr.GetContent()[0].GetText().GetText() != "No result provided" {
			t.Errorf("synthetic result %d: %v", i, tr)
		}
	}
	// Continue picks up from the repaired transcript: the model answers
	// the first unanswered script position.
	evs := h.startRun(agent.StartRequest{SessionID: id}, false).rest()
	if end := evs[len(evs)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("Continue after recovery: %s %v", allKinds(evs), end)
	}
	if got := testkit.MessageKinds(h.transcript(id)); got != "user assistant tool_result tool_result assistant" {
		t.Fatalf("transcript after Continue: %s", got)
	}
	// Now the last message is the assistant's: Continue refuses.
	_, err = h.a.Start(ctx, agent.StartRequest{SessionID: id})
	wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_CANNOT_CONTINUE, "Cannot continue from message role: assistant")
}

func TestRetriedModelCallIsRecordedAndHiddenFromTheModel(t *testing.T) {
	models := &testkit.FlakyModels{}
	h := newHarness(t, agent.Options{Models: models, Retry: provider.RetryPolicy{BaseDelay: time.Millisecond}})
	var fe *agent.FieldError
	if err := h.a.CheckConfig("", &agentdv1.SessionConfig{Model: &agentdv1.ModelRef{Provider: "test", Id: "nope"}}); !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, "config.model") {
		t.Fatalf("an unknown model: %v, want a refusal of config.model", err)
	}
	if list := h.a.Models(); len(list) != 2 || list[1].GetRef().GetId() != "flaky" {
		t.Fatalf("Models: %v", list)
	}

	id := h.session(&agentdv1.SessionConfig{Model: &agentdv1.ModelRef{Provider: "test", Id: "flaky"}})
	evs := h.run(id, "hi")
	retried := false
	for _, ev := range evs {
		if e := ev.GetError(); e.GetStage() == "provider_retry" && strings.Contains(e.GetMessage(), "429") && !e.GetFatal() {
			retried = true
		}
	}
	if !retried || evs[len(evs)-1].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("no retry event or run failed: %s", allKinds(evs))
	}
	entries := h.transcript(id)
	if got := testkit.MessageKinds(entries); got != "user assistant assistant" {
		t.Fatalf("transcript %q: the failed attempt must stay", got)
	}
	if a := entries[1].GetMessage().GetAssistant(); a.GetStopReason() != agentdv1.StopReason_STOP_REASON_ERROR {
		t.Fatalf("first answer: %v", a)
	}
	// The model context (what the next call gets) hides the failed attempt.
	c := h.context(id)
	if len(c.GetMessages()) != 2 || c.GetMessages()[1].GetAssistant().GetContent()[0].GetText().GetText() != testkit.FlakyAnswer {
		t.Fatalf("context: %v", c.GetMessages())
	}
}
