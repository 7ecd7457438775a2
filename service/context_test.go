package service_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service"
)

// TestLongConversationCompactsAndNeverOverflows is the seed's first prompt
// and then 300 more turns with tool calls against a faux model whose
// context window is 12,000 tokens: automatic compaction keeps every call
// under the window, the tail after each summary is verbatim, and the first
// turn's fact reaches the model through the summary.
func TestLongConversationCompactsAndNeverOverflows(t *testing.T) {
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	body := "export const config = {\n  port: 3000,\n};\n" + strings.Repeat("// padding line of the config file\n", 40)
	if err := os.WriteFile(filepath.Join(ws, "src", "config.ts"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, agent.Options{Ceilings: agent.Ceilings{Default: agent.Ceiling{WorkspaceRoots: agent.Limit{Values: []string{filepath.Dir(ws)}, Setting: "--workspace-roots"}}}}, service.ServerOptions{})
	var responses []*agentdv1.AssistantMessage
	for range 400 {
		responses = append(responses,
			toolCallAnswer(t, "call_read", "read_file", map[string]any{"path": "src/config.ts"}),
			textAnswer("默认端口是 3000。"))
	}
	const window = 12000
	var summaries []string
	for range 100 {
		summaries = append(summaries, "## Critical Context\n- src/config.ts sets the default port: 3000")
	}
	id := h.createSession(&agentdv1.SessionConfig{
		WorkspaceRoot: ws,
		Tools:         []*agentdv1.Tool{{Name: "read_file"}},
		Compaction:    &agentdv1.CompactionSettings{ReserveTokens: 3000, KeepRecentTokens: 2500},
		Faux:          &agentdv1.FauxScript{Responses: responses, ContextWindow: window, Summaries: summaries},
	})
	compactions := 0
	h.prompt(id, "读取 src/config.ts，告诉我默认端口。")
	first := h.transcript(id)
	// While the budget allows, "把它改成 8080" reaches the model with the
	// first turn's tool call and its result verbatim.
	h.prompt(id, "把它改成 8080。")
	firstResult := first[2].GetMessage().GetToolResult()
	if !contextHasToolResult(h.context(id), firstResult.GetToolCallId(), "port: 3000") {
		t.Fatal("the first turn's tool result is not in the context of the second prompt")
	}
	for turn := range 300 {
		evs := h.prompt(id, "再读一次 src/config.ts。")
		for _, ev := range evs {
			if e := ev.GetCompactionEnd(); e != nil {
				if e.GetErrorMessage() != "" || e.GetEntryId() == "" || e.GetReason() != agentdv1.CompactionReason_COMPACTION_REASON_THRESHOLD {
					t.Fatalf("turn %d: compaction_end %v", turn, e)
				}
				if e.GetTokensAfter() >= e.GetTokensBefore() {
					t.Fatalf("turn %d: compaction did not shrink the context: %v", turn, e)
				}
				compactions++
				verbatimTail(t, h, id)
			}
			if a := ev.GetMessageEnd().GetMessage().GetAssistant(); a.GetStopReason() == agentdv1.StopReason_STOP_REASON_ERROR {
				t.Fatalf("turn %d: the model call failed: %s", turn, a.GetErrorMessage())
			}
		}
		resp, err := h.client.GetContext(h.ctx(), &agentdv1.GetContextRequest{SessionId: id})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetContextWindow() != window || resp.GetTotalTokens() > window {
			t.Fatalf("turn %d: context %d tokens of a %d window", turn, resp.GetTotalTokens(), resp.GetContextWindow())
		}
	}
	if compactions < 5 {
		t.Fatalf("%d compactions in 300 turns; want several", compactions)
	}
	// The original entries stay in the transcript.
	all := h.transcript(id)
	if len(all) < 300*4 || all[0].GetId() != first[0].GetId() {
		t.Fatalf("transcript has %d entries", len(all))
	}
	c := verbatimTail(t, h, id)
	// Later the first turn reaches the model only through the summary.
	for _, m := range c.GetMessages() {
		if u := m.GetUser(); u != nil && u.GetContent()[0].GetText().GetText() == "读取 src/config.ts，告诉我默认端口。" {
			t.Fatal("the first turn is still verbatim after the compactions")
		}
	}
	// After a restart the session goes on from the same context.
	h.restart()
	if after := h.context(id); len(after.GetMessages()) != len(c.GetMessages()) {
		t.Fatalf("after a restart the context has %d messages, before %d", len(after.GetMessages()), len(c.GetMessages()))
	}
}

// TestOverflowIsRecoveredOnceThenReported: with automatic compaction off,
// a provider's context-overflow answer compacts and retries once; when the
// retry overflows too, the run ends with the error.
func TestOverflowIsRecoveredOnceThenReported(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	long := strings.Repeat("lorem ipsum ", 100) // 300 tokens
	id := h.createSession(&agentdv1.SessionConfig{
		Compaction: &agentdv1.CompactionSettings{DisableAuto: true, KeepRecentTokens: 400},
		Faux:       &agentdv1.FauxScript{Echo: true, ContextWindow: 2000},
	})
	for range 3 {
		h.prompt(id, long)
	}
	// 6 messages of 300 tokens: the next prompt overflows 2000.
	evs := h.prompt(id, long)
	var recovered bool
	for _, ev := range evs {
		if e := ev.GetCompactionEnd(); e != nil {
			recovered = e.GetReason() == agentdv1.CompactionReason_COMPACTION_REASON_OVERFLOW && e.GetEntryId() != ""
		}
	}
	end := evs[len(evs)-1].GetAgentEnd()
	if !recovered || end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("overflow not recovered: %s, outcome %v %s", kinds(evs), end.GetOutcome(), end.GetErrorMessage())
	}
	entries := h.transcript(id)
	var failed int
	for _, e := range entries {
		if a := e.GetMessage().GetAssistant(); a != nil && strings.HasPrefix(a.GetErrorMessage(), "Context overflow: ") {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d overflow answers in the transcript; the failed attempt stays, once", failed)
	}

	// A prompt too large for the window even after compaction is reported.
	id2 := h.createSession(&agentdv1.SessionConfig{
		Compaction: &agentdv1.CompactionSettings{DisableAuto: true, KeepRecentTokens: 100},
		Faux:       &agentdv1.FauxScript{Echo: true, ContextWindow: 500},
	})
	h.prompt(id2, "hello")
	evs = h.prompt(id2, strings.Repeat("big ", 1000))
	end = evs[len(evs)-1].GetAgentEnd()
	if end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_ERROR || !strings.Contains(end.GetErrorMessage(), "Context overflow") {
		t.Fatalf("a repeated overflow ended %v %q; want ERROR with the provider's text", end.GetOutcome(), end.GetErrorMessage())
	}
}

// TestContextHook: the hook's answer shapes the call; a timeout and a bad
// answer fall back to the policies' context with an error event.
func TestContextHook(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := h.createSession(&agentdv1.SessionConfig{
		ContextHook: &agentdv1.ContextHook{Timeout: durationpb.New(300 * time.Millisecond), IncludeMessages: true},
		Faux:        &agentdv1.FauxScript{Echo: true},
	})
	run := func(text string, answer func(req *agentdv1.ContextRequested)) []*agentdv1.AgentEvent {
		stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts(text)})
		if err != nil {
			t.Fatal(err)
		}
		evs := recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetContextRequested() != nil })
		answer(evs[len(evs)-1].GetContextRequested())
		rest, err := drain(stream)
		if err != nil {
			t.Fatal(err)
		}
		return append(evs, rest...)
	}
	lastAnswer := func(evs []*agentdv1.AgentEvent) string {
		for i := len(evs) - 1; i >= 0; i-- {
			if a := evs[i].GetMessageEnd().GetMessage().GetAssistant(); a != nil {
				return a.GetContent()[0].GetText().GetText()
			}
		}
		return ""
	}
	// Answered: keep the prompt, inject a message after it.
	evs := run("first", func(req *agentdv1.ContextRequested) {
		if len(req.GetItems()) != 1 || req.GetItems()[0].GetMessage().GetUser() == nil || req.GetItems()[0].GetTokens() == 0 {
			t.Errorf("context_requested items: %v", req.GetItems())
		}
		_, err := h.client.SubmitContext(h.ctx(), &agentdv1.SubmitContextRequest{SessionId: id, RequestId: req.GetRequestId(), Items: []*agentdv1.ContextSelection{
			{Item: &agentdv1.ContextSelection_EntryId{EntryId: req.GetItems()[0].GetEntryId()}},
			{Item: &agentdv1.ContextSelection_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: texts("injected")}}}}},
		}})
		if err != nil {
			t.Errorf("SubmitContext: %v", err)
		}
	})
	if got := lastAnswer(evs); got != "injected" {
		t.Fatalf("the model answered %q; the hook injected a message it should have seen last", got)
	}
	if got := messageKinds(h.transcript(id)); got != "user assistant" {
		t.Fatalf("transcript %s: the injected message must not be stored", got)
	}
	// Timed out.
	evs = run("second", func(*agentdv1.ContextRequested) {})
	if !hasError(evs, "context_hook", "did not answer") || lastAnswer(evs) != "second" {
		t.Fatalf("timeout: %s, answer %q", kinds(evs), lastAnswer(evs))
	}
	// An unknown entry id is refused, and the call goes on.
	evs = run("third", func(req *agentdv1.ContextRequested) {
		_, err := h.client.SubmitContext(h.ctx(), &agentdv1.SubmitContextRequest{SessionId: id, RequestId: req.GetRequestId(), Items: []*agentdv1.ContextSelection{
			{Item: &agentdv1.ContextSelection_EntryId{EntryId: "no-such-entry"}}}})
		wantCode(t, err, codes.InvalidArgument, "items[0].entry_id")
	})
	if !hasError(evs, "context_hook", "refused") || lastAnswer(evs) != "third" {
		t.Fatalf("unknown id: %s, answer %q", kinds(evs), lastAnswer(evs))
	}
	// Garbage: an item with nothing set.
	evs = run("fourth", func(req *agentdv1.ContextRequested) {
		_, err := h.client.SubmitContext(h.ctx(), &agentdv1.SubmitContextRequest{SessionId: id, RequestId: req.GetRequestId(), Items: []*agentdv1.ContextSelection{{}}})
		wantCode(t, err, codes.InvalidArgument, "items[0]")
	})
	if !hasError(evs, "context_hook", "refused") || lastAnswer(evs) != "fourth" {
		t.Fatalf("garbage answer: %s, answer %q", kinds(evs), lastAnswer(evs))
	}
	// An injected message that fails validation is refused the same way.
	evs = run("fifth", func(req *agentdv1.ContextRequested) {
		_, err := h.client.SubmitContext(h.ctx(), &agentdv1.SubmitContextRequest{SessionId: id, RequestId: req.GetRequestId(), Items: []*agentdv1.ContextSelection{
			{Item: &agentdv1.ContextSelection_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{}}}}}}})
		wantCode(t, err, codes.InvalidArgument, "items[0].message")
	})
	if !hasError(evs, "context_hook", "refused") || lastAnswer(evs) != "fifth" {
		t.Fatalf("invalid injected message: %s, answer %q", kinds(evs), lastAnswer(evs))
	}
	if got := messageKinds(h.transcript(id)); got != strings.TrimSpace(strings.Repeat("user assistant ", 5)) {
		t.Fatalf("transcript %s: hook answers must never be stored", got)
	}
}

// verbatimTail checks that the session's context is its latest compaction
// summary followed by the transcript from the summary's first kept entry
// on, verbatim (tool results without details), and returns the context.
func verbatimTail(t *testing.T, h *harness, id string) *agentdv1.Context {
	t.Helper()
	// The store directly: paging GetTranscript after every compaction of
	// a 1,200-entry transcript would dominate the test.
	all, err := h.store.Path(h.ctx(), id)
	if err != nil {
		t.Fatal(err)
	}
	var sum *agentdv1.CompactionSummary
	at := -1
	for i, e := range all {
		if s := e.GetMessage().GetCompactionSummary(); s != nil {
			sum, at = s, i
		}
	}
	if sum == nil {
		t.Fatal("no compaction summary in the transcript")
	}
	c := h.context(id)
	head := c.GetMessages()[0].GetUser().GetContent()[0].GetText().GetText()
	if !strings.HasPrefix(head, agentloop.CompactionSummaryPrefix) || !strings.Contains(head, "port: 3000") {
		t.Fatalf("the context does not start with the summary: %.200q", head)
	}
	var tail []*agentdv1.Message
	keep := false
	for i, e := range all {
		keep = keep || e.GetId() == sum.GetFirstKeptEntryId()
		if keep && i != at && e.GetMessage() != nil {
			tail = append(tail, agentloop.DefaultConvertToLLM([]*agentdv1.AgentMessage{e.GetMessage()})...)
		}
	}
	if len(tail) == 0 || len(c.GetMessages()) != 1+len(tail) {
		t.Fatalf("context has %d messages; want the summary and %d kept", len(c.GetMessages()), len(tail))
	}
	for i, m := range tail {
		if tr := m.GetToolResult(); tr != nil {
			tr = proto.CloneOf(tr)
			tr.Details = nil
			m = &agentdv1.Message{Role: &agentdv1.Message_ToolResult{ToolResult: tr}}
		}
		if !proto.Equal(c.GetMessages()[1+i], m) {
			t.Fatalf("kept message %d differs from the transcript:\n%v\n%v", i, c.GetMessages()[1+i], m)
		}
	}
	return c
}

// contextHasToolResult reports whether c holds the first tool result
// answering callID with text in it.
func contextHasToolResult(c *agentdv1.Context, callID, text string) bool {
	for _, m := range c.GetMessages() {
		if tr := m.GetToolResult(); tr != nil && tr.GetToolCallId() == callID {
			return strings.Contains(tr.GetContent()[0].GetText().GetText(), text)
		}
	}
	return false
}

func hasError(evs []*agentdv1.AgentEvent, stage, text string) bool {
	for _, ev := range evs {
		if e := ev.GetError(); e != nil && e.GetStage() == stage && strings.Contains(e.GetMessage(), text) {
			return true
		}
	}
	return false
}

// TestUpdateSessionAndCompact: UpdateSession writes model and thinking
// changes as entries and changes what GetContext shows; Compact with a
// client summary and a dry run.
func TestUpdateSessionAndCompact(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
	for _, s := range []string{"one", "two", "three"} {
		h.prompt(id, strings.Repeat(s+" ", 200))
	}
	_, err := h.client.UpdateSession(h.ctx(), &agentdv1.UpdateSessionRequest{SessionId: id})
	wantCode(t, err, codes.InvalidArgument, "update_mask")
	_, err = h.client.UpdateSession(h.ctx(), &agentdv1.UpdateSessionRequest{SessionId: id, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"config.nope"}}})
	wantCode(t, err, codes.InvalidArgument, "update_mask.paths[0]")
	resp, err := h.client.UpdateSession(h.ctx(), &agentdv1.UpdateSessionRequest{SessionId: id,
		Config: &agentdv1.SessionConfig{ThinkingLevel: agentdv1.ThinkingLevel_THINKING_LEVEL_HIGH, SystemPrompt: "be brief",
			ContextBlocks: []*agentdv1.ContextBlock{{Name: "user profile", Text: "prefers Go"}}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"config.thinking_level", "config.system_prompt", "config.context_blocks"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetEntries()) != 1 || resp.GetEntries()[0].GetThinkingLevelChange().GetThinkingLevel() != agentdv1.ThinkingLevel_THINKING_LEVEL_HIGH {
		t.Fatalf("entries %v", resp.GetEntries())
	}
	if !resp.GetSession().GetConfig().GetFaux().GetEcho() {
		t.Fatal("fields outside the mask changed")
	}
	c := h.context(id)
	if c.GetSystemPrompt() != "be brief" || !strings.Contains(c.GetMessages()[0].GetUser().GetContent()[0].GetText().GetText(), "prefers Go") {
		t.Fatalf("context after the update: %v", c.GetMessages()[0])
	}
	// While a run is active the session cannot be updated or compacted.
	slow := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true, TokensPerSecond: 50}})
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: slow, Content: texts(strings.Repeat("slow ", 200))})
	if err != nil {
		t.Fatal(err)
	}
	recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetMessageUpdate() != nil })
	_, err = h.client.UpdateSession(h.ctx(), &agentdv1.UpdateSessionRequest{SessionId: slow, Title: "x", UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"title"}}})
	wantCode(t, err, codes.FailedPrecondition, "needs an idle session")
	cs, err := h.client.Compact(h.ctx(), &agentdv1.CompactRequest{SessionId: slow, Summary: "s"})
	if err == nil {
		_, err = drain(cs)
	}
	wantCode(t, err, codes.FailedPrecondition, "needs an idle session")
	if _, err := h.client.Abort(h.ctx(), &agentdv1.AbortRequest{SessionId: slow}); err != nil {
		t.Fatal(err)
	}
	if _, err := drain(stream); err != nil {
		t.Fatal(err)
	}

	// Dry run: the cut point and counts, nothing stored.
	before := len(h.transcript(id))
	stream, err = h.client.Compact(h.ctx(), &agentdv1.CompactRequest{SessionId: id, DryRun: true, KeepRecentTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := drain(stream)
	if err != nil || len(evs) != 1 || !evs[0].GetCompactionEnd().GetDryRun() || evs[0].GetCompactionEnd().GetFirstKeptEntryId() == "" {
		t.Fatalf("dry run: %v %v", evs, err)
	}
	if len(h.transcript(id)) != before {
		t.Fatal("a dry run wrote to the transcript")
	}
	stream, err = h.client.Compact(h.ctx(), &agentdv1.CompactRequest{SessionId: id, Summary: "my own summary", KeepRecentTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	evs, err = drain(stream)
	if err != nil || kinds(evs) != "compaction_start compaction_end" || evs[1].GetSeq() != 2 {
		t.Fatalf("Compact: %s %v", kinds(evs), err)
	}
	end := evs[1].GetCompactionEnd()
	if end.GetEntryId() == "" || end.GetTokensAfter() >= end.GetTokensBefore() || end.GetReason() != agentdv1.CompactionReason_COMPACTION_REASON_MANUAL {
		t.Fatalf("compaction_end %v", end)
	}
	c = h.context(id)
	if !strings.Contains(c.GetMessages()[1].GetUser().GetContent()[0].GetText().GetText(), "my own summary") {
		t.Fatalf("the context does not carry the client's summary after the blocks: %v", c.GetMessages()[:2])
	}
	// Nothing left to compact with a huge keep.
	stream, err = h.client.Compact(h.ctx(), &agentdv1.CompactRequest{SessionId: id, KeepRecentTokens: 1 << 30})
	if err == nil {
		_, err = drain(stream)
	}
	wantCode(t, err, codes.FailedPrecondition, "nothing to compact")
}
