package service_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/service"
)

var seedFiles = map[string]string{"src/config.ts": "export const config = { port: 3000 };\n"}

func seedConfig(t *testing.T, extra ...*agentdv1.AssistantMessage) *agentdv1.SessionConfig {
	responses := append([]*agentdv1.AssistantMessage{
		toolCallAnswer(t, "call_read", "read_file", map[string]any{"path": "src/config.ts"}),
		textAnswer("默认端口是 3000。"),
	}, extra...)
	return &agentdv1.SessionConfig{
		SystemPrompt: "你是桌面开发助手。",
		Tools:        []*agentdv1.Tool{{Name: "read_file"}},
		Faux:         &agentdv1.FauxScript{Responses: responses},
	}
}

// checkSeqs fails unless the events carry the session and run ids and seqs
// increasing by one from first.
func checkSeqs(t *testing.T, evs []*agentdv1.AgentEvent, sessionID string, first uint64) {
	t.Helper()
	for i, ev := range evs {
		if ev.GetSeq() != first+uint64(i) || ev.GetSessionId() != sessionID || ev.GetRunId() == "" || ev.GetRunId() != evs[0].GetRunId() {
			t.Fatalf("event %d (%s): session %q run %q seq %d; want session %q, one run id, seq %d",
				i, eventKind(ev), ev.GetSessionId(), ev.GetRunId(), ev.GetSeq(), sessionID, first+uint64(i))
		}
	}
}

func TestSeedTwoPromptScenario(t *testing.T) {
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{testkit.ReadFileTool(seedFiles)}}, service.ServerOptions{})
	id := h.createSession(seedConfig(t, textAnswer("好的，我会把端口改成 8080。")))

	evs := h.prompt(id, "读取 src/config.ts，告诉我默认端口。")
	checkSeqs(t, evs, id, 1)
	wantOrder := []string{
		"agent_start", "turn_start", "message_start", "message_end", // the prompt
		"message_start", // assistant tool call, then deltas
	}
	got := strings.Fields(kinds(evs))
	for i, k := range wantOrder {
		if got[i] != k {
			t.Fatalf("event %d is %s, want %s; all: %s", i, got[i], k, kinds(evs))
		}
	}
	if got[len(got)-1] != "agent_end" || evs[len(evs)-1].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("run did not complete: %s", kinds(evs))
	}
	for _, want := range []string{"tool_execution_start", "tool_execution_end", "message_update", "turn_end"} {
		if !strings.Contains(kinds(evs), want) {
			t.Errorf("no %s in %s", want, kinds(evs))
		}
	}
	// Every message_end names the entry that stores it.
	entries := h.transcript(id)
	var endIDs []string
	for _, ev := range evs {
		if me := ev.GetMessageEnd(); me != nil {
			endIDs = append(endIDs, me.GetEntryId())
		}
	}
	if len(endIDs) != len(entries) {
		t.Fatalf("%d message_end events for %d entries", len(endIDs), len(entries))
	}
	for i, e := range entries {
		if e.GetId() != endIDs[i] {
			t.Fatalf("entry %d is %s, message_end named %s", i, e.GetId(), endIDs[i])
		}
	}
	if got, want := testkit.MessageKinds(entries), "user assistant tool_result assistant"; got != want {
		t.Fatalf("transcript %q, want %q", got, want)
	}

	// What the model sees next: the whole first turn.
	c := h.context(id)
	if c.GetSystemPrompt() != "你是桌面开发助手。" || len(c.GetTools()) != 1 || c.GetTools()[0].GetName() != "read_file" {
		t.Fatalf("context header: %v", c)
	}
	if len(c.GetMessages()) != 4 {
		t.Fatalf("context has %d messages, want 4", len(c.GetMessages()))
	}
	call := c.GetMessages()[1].GetAssistant().GetContent()[0].GetToolCall()
	result := c.GetMessages()[2].GetToolResult()
	answer := c.GetMessages()[3].GetAssistant()
	if call.GetName() != "read_file" || call.GetArguments().GetFields()["path"].GetStringValue() != "src/config.ts" {
		t.Errorf("tool call in context: %v", call)
	}
	if result.GetToolCallId() != call.GetId() || !strings.Contains(result.GetContent()[0].GetText().GetText(), "port: 3000") {
		t.Errorf("tool result in context: %v", result)
	}
	if answer.GetContent()[0].GetText().GetText() != "默认端口是 3000。" {
		t.Errorf("answer in context: %v", answer)
	}

	evs = h.prompt(id, "把它改成 8080。")
	checkSeqs(t, evs, id, 1)
	if evs[0].GetRunId() == "" {
		t.Fatal("no run id")
	}
	entries = h.transcript(id)
	if got, want := testkit.MessageKinds(entries), "user assistant tool_result assistant user assistant"; got != want {
		t.Fatalf("transcript %q, want %q", got, want)
	}
	c2 := h.context(id)
	for i := range 4 {
		if !proto.Equal(c2.GetMessages()[i], c.GetMessages()[i]) {
			t.Errorf("message %d of the first turn changed in the second context", i)
		}
	}
	if c2.GetMessages()[4].GetUser().GetContent()[0].GetText().GetText() != "把它改成 8080。" {
		t.Errorf("second prompt not in context: %v", c2.GetMessages()[4])
	}
}

// Attach end to end: without a run id it follows the session's active
// run, which GetSession shows running until agent_end. (Follow itself is
// tested in agent.)
func TestAttachFollowsTheActiveRun(t *testing.T) {
	g := newGate()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}}, service.ServerOptions{})
	id := h.createSession(waitConfig(t, textAnswer("done")))
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
	sess, err := h.client.GetSession(h.ctx(), &agentdv1.GetSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	if sess.GetSession().GetState() != agentdv1.SessionState_SESSION_STATE_RUNNING || sess.GetSession().GetActiveRunId() == "" {
		t.Fatalf("session while running: %v", sess.GetSession())
	}
	att, err := h.client.Attach(h.ctx(), &agentdv1.AttachRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	first, err := att.Recv() // the replay starts at once: the run is held open
	if err != nil {
		t.Fatal(err)
	}
	g.open()
	rest, err := drain(att)
	if err != nil {
		t.Fatal(err)
	}
	own, err := drain(stream)
	if err != nil {
		t.Fatal(err)
	}
	all := append([]*agentdv1.AgentEvent{first}, rest...)
	checkSeqs(t, all, id, 1)
	if kinds(all) != kinds(own) {
		t.Fatalf("Attach from seq 0 saw %s\nthe Prompt stream saw %s", kinds(all), kinds(own))
	}
	if all[0].GetRunId() != sess.GetSession().GetActiveRunId() {
		t.Fatalf("Attach followed run %s; GetSession named %s", all[0].GetRunId(), sess.GetSession().GetActiveRunId())
	}
	// agent_end means idle.
	sess, err = h.client.GetSession(h.ctx(), &agentdv1.GetSessionRequest{SessionId: id})
	if err != nil || sess.GetSession().GetState() != agentdv1.SessionState_SESSION_STATE_IDLE || sess.GetSession().GetActiveRunId() != "" {
		t.Fatalf("session after agent_end: %v, %v", sess.GetSession(), err)
	}
}

// waitConfig is a session whose model first calls the test's blocking
// "wait" tool (see gate) and then gives the answers that follow.
func waitConfig(t testing.TB, answers ...*agentdv1.AssistantMessage) *agentdv1.SessionConfig {
	return &agentdv1.SessionConfig{
		Tools: []*agentdv1.Tool{{Name: "wait"}},
		Faux:  &agentdv1.FauxScript{Responses: append([]*agentdv1.AssistantMessage{toolCallAnswer(t, "c1", "wait", nil)}, answers...)},
	}
}
