package service_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence/sqlite"
	"github.com/agentd/agentd/service"
)

func TestRestartRestoresSessionsAndContext(t *testing.T) {
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{readFileTool(seedFiles)}}, service.ServerOptions{})
	ids := []string{h.createSession(seedConfig(t)), h.createSession(seedConfig(t)), h.createSession(&agentdv1.SessionConfig{})}
	h.prompt(ids[0], "读取 src/config.ts，告诉我默认端口。")
	if _, err := h.client.AppendMessages(h.ctx(), &agentdv1.AppendMessagesRequest{SessionId: ids[1], Messages: []*agentdv1.AgentMessage{
		{Kind: &agentdv1.AgentMessage_Custom{Custom: &agentdv1.CustomMessage{CustomType: "note", Content: texts("job 7 done"), IncludeInModelContext: true}}},
	}}); err != nil {
		t.Fatal(err)
	}
	before := map[string]*agentdv1.Context{}
	sessions := map[string]*agentdv1.Session{}
	transcripts := map[string][]*agentdv1.Entry{}
	for _, id := range ids {
		before[id] = h.context(id)
		s, err := h.client.GetSession(h.ctx(), &agentdv1.GetSessionRequest{SessionId: id})
		if err != nil {
			t.Fatal(err)
		}
		sessions[id] = s.GetSession()
		transcripts[id] = h.transcript(id)
	}

	h.restart()

	list, err := h.client.ListSessions(h.ctx(), &agentdv1.ListSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetSessions()) != len(ids) {
		t.Fatalf("%d sessions after restart, want %d", len(list.GetSessions()), len(ids))
	}
	for _, id := range ids {
		if after := h.context(id); !proto.Equal(after, before[id]) {
			t.Errorf("session %s: GetContext changed across the restart:\nbefore %v\nafter  %v", id, before[id], after)
		}
		s, err := h.client.GetSession(h.ctx(), &agentdv1.GetSessionRequest{SessionId: id})
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(s.GetSession(), sessions[id]) {
			t.Errorf("session %s changed across the restart:\nbefore %v\nafter  %v", id, sessions[id], s.GetSession())
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
	h.prompt(ids[0], "把它改成 8080。")
}

func TestRestartAfterCrashClosesInterruptedRun(t *testing.T) {
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{readFileTool(seedFiles)}}, service.ServerOptions{})
	id := h.createSession(seedConfig(t))
	h.stop()

	// What a crash in the middle of a tool batch leaves: a started run, the
	// prompt and the assistant's tool calls, and no results.
	st, err := sqlite.Open(context.Background(), h.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.StartRun(ctx, id, "run-crashed"); err != nil {
		t.Fatal(err)
	}
	call := toolCallAnswer(t, "call_read", "read_file", map[string]any{"path": "src/config.ts"})
	call.Content = append(call.Content, toolCallAnswer(t, "call_2", "read_file", map[string]any{"path": "b"}).Content...)
	call.StopReason = agentdv1.StopReason_STOP_REASON_TOOL_USE
	if err := st.Append(ctx, id,
		&agentdv1.Entry{RunId: "run-crashed", Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: texts("读取 src/config.ts")}}}}},
		&agentdv1.Entry{RunId: "run-crashed", Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: call}}}},
	); err != nil {
		t.Fatal(err)
	}
	st.Close()

	h.start()
	s, err := h.client.GetSession(h.ctx(), &agentdv1.GetSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	if s.GetSession().GetState() != agentdv1.SessionState_SESSION_STATE_IDLE {
		t.Fatalf("session after crash recovery: %v", s.GetSession().GetState())
	}
	run, err := h.store.GetRun(ctx, "run-crashed")
	if err != nil {
		t.Fatal(err)
	}
	if run.Outcome != agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED {
		t.Fatalf("crashed run outcome %v, want INTERRUPTED", run.Outcome)
	}
	entries := h.transcript(id)
	if got, want := messageKinds(entries), "user assistant tool_result tool_result"; got != want {
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
	stream, err := h.client.Continue(h.ctx(), &agentdv1.ContinueRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := drain(stream)
	if err != nil {
		t.Fatal(err)
	}
	if end := evs[len(evs)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("Continue after recovery: %s %v", kinds(evs), end)
	}
	if got := messageKinds(h.transcript(id)); got != "user assistant tool_result tool_result assistant" {
		t.Fatalf("transcript after Continue: %s", got)
	}
	// Now the last message is the assistant's: Continue refuses.
	stream, err = h.client.Continue(h.ctx(), &agentdv1.ContinueRequest{SessionId: id})
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.FailedPrecondition, "Cannot continue from message role: assistant")
}
