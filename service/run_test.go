package service_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
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
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{readFileTool(seedFiles)}}, service.ServerOptions{})
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
	if got, want := messageKinds(entries), "user assistant tool_result assistant"; got != want {
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
	if got, want := messageKinds(entries), "user assistant tool_result assistant user assistant"; got != want {
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

func TestSecondPromptRefusedWhileRunning(t *testing.T) {
	g := newGate()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}}, service.ServerOptions{})
	id := h.createSession(waitConfig(t, textAnswer("done")))
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
	before := h.transcript(id)

	second, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("again")})
	if err == nil {
		_, err = second.Recv()
	}
	wantCode(t, err, codes.FailedPrecondition, "Steer")
	wantCode(t, err, codes.FailedPrecondition, "FollowUp")
	_, err = h.client.AppendMessages(h.ctx(), &agentdv1.AppendMessagesRequest{SessionId: id, Messages: []*agentdv1.AgentMessage{
		{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: texts("x")}}}}})
	wantCode(t, err, codes.FailedPrecondition, "idle")
	if after := h.transcript(id); len(after) != len(before) {
		t.Fatalf("a refused request changed the transcript: %d → %d entries", len(before), len(after))
	}
	sess, err := h.client.GetSession(h.ctx(), &agentdv1.GetSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	if sess.GetSession().GetState() != agentdv1.SessionState_SESSION_STATE_RUNNING || sess.GetSession().GetActiveRunId() == "" {
		t.Fatalf("session while running: %v", sess.GetSession())
	}

	g.open()
	evs, err := drain(stream)
	if err != nil {
		t.Fatal(err)
	}
	if evs[len(evs)-1].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("run: %s", kinds(evs))
	}
	// agent_end means idle: a new prompt is accepted at once.
	h.prompt(id, "now it is fine")
}

func TestSteerAndFollowUp(t *testing.T) {
	g := newGate()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}}, service.ServerOptions{})
	id := h.createSession(waitConfig(t, textAnswer("after steering"), textAnswer("after follow-up")))
	_, err := h.client.Steer(h.ctx(), &agentdv1.SteerRequest{SessionId: id, Content: texts("early")})
	wantCode(t, err, codes.FailedPrecondition, "Prompt")

	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("start")})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
	sr, err := h.client.Steer(h.ctx(), &agentdv1.SteerRequest{SessionId: id, Content: texts("steer: use port 8080")})
	if err != nil || sr.GetQueued() != 1 {
		t.Fatalf("Steer = %v, %v", sr, err)
	}
	fr, err := h.client.FollowUp(h.ctx(), &agentdv1.FollowUpRequest{SessionId: id, Content: texts("follow-up: and update the docs")})
	if err != nil || fr.GetQueued() != 1 {
		t.Fatalf("FollowUp = %v, %v", fr, err)
	}
	g.open()
	evs, err := drain(stream)
	if err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, evs, id, 1)
	if !strings.Contains(kinds(evs), "queue_update") {
		t.Errorf("no queue_update in %s", kinds(evs))
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
	if got, want := messageKinds(h.transcript(id)), "user assistant tool_result user assistant user assistant"; got != want {
		t.Fatalf("transcript %q, want %q (steering after the tool batch, follow-up when the agent would stop)", got, want)
	}
}

func TestAbortDuringTool(t *testing.T) {
	g := newGate()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}}, service.ServerOptions{})
	id := h.createSession(waitConfig(t, textAnswer("never")))
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("start")})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
	_, err = h.client.Abort(h.ctx(), &agentdv1.AbortRequest{SessionId: id, RunId: "run-other"})
	wantCode(t, err, codes.FailedPrecondition, "run-other")
	ar, err := h.client.Abort(h.ctx(), &agentdv1.AbortRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	// Abort returns once the run ended: the session is idle at once.
	sess, err := h.client.GetSession(h.ctx(), &agentdv1.GetSessionRequest{SessionId: id})
	if err != nil || sess.GetSession().GetState() != agentdv1.SessionState_SESSION_STATE_IDLE {
		t.Fatalf("session after Abort: %v, %v", sess, err)
	}
	evs, err := drain(stream)
	if err != nil {
		t.Fatal(err)
	}
	end := evs[len(evs)-1].GetAgentEnd()
	if end == nil || evs[0].GetRunId() != ar.GetRunId() {
		t.Fatalf("stream after abort: %s", kinds(evs))
	}
	// What completed stays: the prompt, the tool call and its cancelled
	// result; the next model call ends at once as ABORTED (pi's rule).
	entries := h.transcript(id)
	if got, want := messageKinds(entries), "user assistant tool_result assistant"; got != want {
		t.Fatalf("transcript %q, want %q", got, want)
	}
	if !entries[2].GetMessage().GetToolResult().GetIsError() ||
		entries[3].GetMessage().GetAssistant().GetStopReason() != agentdv1.StopReason_STOP_REASON_ABORTED {
		t.Fatalf("after abort: %v / %v", entries[2], entries[3])
	}
	if end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_ABORTED {
		t.Fatalf("agent_end outcome %v, want ABORTED", end.GetOutcome())
	}
	_, err = h.client.Abort(h.ctx(), &agentdv1.AbortRequest{SessionId: id})
	wantCode(t, err, codes.FailedPrecondition, "no active run")
}

func TestClientDisconnectAbortsUnlessDetached(t *testing.T) {
	for _, detach := range []bool{false, true} {
		t.Run(map[bool]string{false: "attached", true: "detached"}[detach], func(t *testing.T) {
			g := newGate()
			h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}}, service.ServerOptions{})
			id := h.createSession(waitConfig(t, textAnswer("finished")))
			ctx, cancel := context.WithCancel(h.ctx())
			stream, err := h.client.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Content: texts("start"), Detach: detach})
			if err != nil {
				t.Fatal(err)
			}
			seen := recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetToolExecutionStart() != nil })
			<-g.entered
			cancel()
			if detach {
				g.open()
			}
			h.waitIdle(id)
			entries := h.transcript(id)
			if detach {
				if got, want := messageKinds(entries), "user assistant tool_result assistant"; got != want {
					t.Fatalf("detached run: transcript %q, want %q", got, want)
				}
				// The run can be re-joined after it ended, from where the
				// client left off.
				att, err := h.client.Attach(h.ctx(), &agentdv1.AttachRequest{SessionId: id, RunId: seen[0].GetRunId(), AfterSeq: seen[len(seen)-1].GetSeq()})
				if err != nil {
					t.Fatal(err)
				}
				rest, err := drain(att)
				if err != nil {
					t.Fatal(err)
				}
				checkSeqs(t, rest, id, seen[len(seen)-1].GetSeq()+1)
				if rest[len(rest)-1].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
					t.Fatalf("detached run ended %v", rest[len(rest)-1])
				}
			} else {
				if got, want := messageKinds(entries), "user assistant tool_result assistant"; got != want {
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
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{readFileTool(seedFiles)}}, service.ServerOptions{})
	cfg := seedConfig(t)
	cfg.Faux.TokensPerSecond = 2000 // paced, so the run outlives the first stream
	cfg.Faux.Responses[1] = textAnswer(strings.Repeat("端口是 3000。", 60))
	id := h.createSession(cfg)

	// The reference: the same run on a second session, read in one go.
	refID := h.createSession(cfg)
	ref := h.prompt(refID, "读取 src/config.ts，告诉我默认端口。")

	ctx, cancel := context.WithCancel(h.ctx())
	stream, err := h.client.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Content: texts("读取 src/config.ts，告诉我默认端口。"), Detach: true})
	if err != nil {
		t.Fatal(err)
	}
	first := recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetMessageUpdate().GetTextDelta() != nil })
	cancel()
	last := first[len(first)-1]
	att, err := h.client.Attach(h.ctx(), &agentdv1.AttachRequest{SessionId: id, RunId: last.GetRunId(), AfterSeq: last.GetSeq()})
	if err != nil {
		t.Fatal(err)
	}
	rest, err := drain(att)
	if err != nil {
		t.Fatal(err)
	}
	all := append(first, rest...)
	checkSeqs(t, all, id, 1)
	if kinds(all) != kinds(ref) {
		t.Fatalf("resumed stream differs from an uninterrupted one:\n got %s\nwant %s", kinds(all), kinds(ref))
	}
	if all[len(all)-1].GetAgentEnd() == nil {
		t.Fatal("resumed stream did not end with agent_end")
	}
}

func TestIdempotentPromptAttachesToTheSameRun(t *testing.T) {
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{readFileTool(seedFiles)}}, service.ServerOptions{})
	id := h.createSession(seedConfig(t))
	req := &agentdv1.PromptRequest{SessionId: id, Content: texts("读取 src/config.ts"), RequestId: "req-1"}
	s1, err := h.client.Prompt(h.ctx(), req)
	if err != nil {
		t.Fatal(err)
	}
	evs1, err := drain(s1)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := h.client.Prompt(h.ctx(), req)
	if err != nil {
		t.Fatal(err)
	}
	evs2, err := drain(s2)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs1) != len(evs2) || evs1[0].GetRunId() != evs2[0].GetRunId() {
		t.Fatalf("retry did not replay the same run: %d events of %s, %d events of %s", len(evs1), evs1[0].GetRunId(), len(evs2), evs2[0].GetRunId())
	}
	if got := messageKinds(h.transcript(id)); got != "user assistant tool_result assistant" {
		t.Fatalf("the retried prompt was appended again: %s", got)
	}
	// After a restart the request is remembered and its run replayed from
	// the durable event log.
	h.restart()
	s3, err := h.client.Prompt(h.ctx(), req)
	if err != nil {
		t.Fatal(err)
	}
	evs3, err := drain(s3)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs3) != len(evs1) || evs3[0].GetRunId() != evs1[0].GetRunId() || kinds(evs3) != kinds(evs1) {
		t.Fatalf("retry after restart did not replay the run: %s", kinds(evs3))
	}
	if got := messageKinds(h.transcript(id)); got != "user assistant tool_result assistant" {
		t.Fatalf("the retried prompt was appended after restart: %s", got)
	}
}

func TestConcurrentRunLimit(t *testing.T) {
	g := newGate()
	defer g.open()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}, MaxConcurrentRuns: 1}, service.ServerOptions{})
	cfg := waitConfig(t, textAnswer("ok"))
	a, b := h.createSession(cfg), h.createSession(cfg)
	sa, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: a, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
	sb, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: b, Content: texts("go")})
	if err == nil {
		_, err = sb.Recv()
	}
	wantCode(t, err, codes.ResourceExhausted, "runs are active")
	g.open()
	if _, err := drain(sa); err != nil {
		t.Fatal(err)
	}
	if got := messageKinds(h.transcript(b)); got != "" {
		t.Fatalf("refused prompt changed session b: %q", got)
	}
}

func TestDeleteSessionWhileRunning(t *testing.T) {
	g := newGate()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}}, service.ServerOptions{})
	id := h.createSession(waitConfig(t))
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
	_, err = h.client.DeleteSession(h.ctx(), &agentdv1.DeleteSessionRequest{SessionId: id})
	wantCode(t, err, codes.FailedPrecondition, "force")
	if _, err := h.client.DeleteSession(h.ctx(), &agentdv1.DeleteSessionRequest{SessionId: id, Force: true}); err != nil {
		t.Fatal(err)
	}
	evs, err := drain(stream)
	if err != nil || evs[len(evs)-1].GetAgentEnd() == nil {
		t.Fatalf("stream of the deleted session: %s, %v", kinds(evs), err)
	}
	_, err = h.client.GetSession(h.ctx(), &agentdv1.GetSessionRequest{SessionId: id})
	wantCode(t, err, codes.NotFound, id)
}

// Attach without a run id follows the session's active run.
func TestAttachFollowsTheActiveRun(t *testing.T) {
	g := newGate()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}}, service.ServerOptions{})
	id := h.createSession(waitConfig(t, textAnswer("done")))
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
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
}

// waitConfig is a session whose model first calls the test's blocking
// "wait" tool (see gate) and then gives the answers that follow.
func waitConfig(t testing.TB, answers ...*agentdv1.AssistantMessage) *agentdv1.SessionConfig {
	return &agentdv1.SessionConfig{
		Tools: []*agentdv1.Tool{{Name: "wait"}},
		Faux:  &agentdv1.FauxScript{Responses: append([]*agentdv1.AssistantMessage{toolCallAnswer(t, "c1", "wait", nil)}, answers...)},
	}
}
