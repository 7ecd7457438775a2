package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
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
	h := newHarness(t, agent.Options{Ceilings: agent.Ceilings{Default: agent.Ceiling{WorkspaceRoots: agent.Limit{Values: []string{filepath.Dir(ws)}, Setting: "--workspace-roots"}}}})
	var responses []*agentdv1.AssistantMessage
	for range 400 {
		responses = append(responses,
			toolCall(t, "call_read", "read_file", map[string]any{"path": "src/config.ts"}),
			text("默认端口是 3000。"))
	}
	const window = 12000
	var summaries []string
	for range 100 {
		summaries = append(summaries, "## Critical Context\n- src/config.ts sets the default port: 3000")
	}
	id := h.session(&agentdv1.SessionConfig{
		WorkspaceRoot: ws,
		Tools:         []*agentdv1.Tool{{Name: "read_file"}},
		Compaction:    &agentdv1.CompactionSettings{ReserveTokens: 3000, KeepRecentTokens: 2500},
		Faux:          &agentdv1.FauxScript{Responses: responses, ContextWindow: window, Summaries: summaries},
	})
	compactions := 0
	h.run(id, "读取 src/config.ts，告诉我默认端口。")
	first := h.transcript(id)
	// While the budget allows, "把它改成 8080" reaches the model with the
	// first turn's tool call and its result verbatim.
	h.run(id, "把它改成 8080。")
	firstResult := first[2].GetMessage().GetToolResult()
	if !contextHasToolResult(h.context(id), firstResult.GetToolCallId(), "port: 3000") {
		t.Fatal("the first turn's tool result is not in the context of the second prompt")
	}
	for turn := range 300 {
		evs := h.run(id, "再读一次 src/config.ts。")
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
		if rep := h.report(id, ""); rep.ContextWindow != window || rep.TotalTokens > window {
			t.Fatalf("turn %d: context %d tokens of a %d window", turn, rep.TotalTokens, rep.ContextWindow)
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
	h := newHarness(t, agent.Options{})
	long := strings.Repeat("lorem ipsum ", 100) // 300 tokens
	id := h.session(&agentdv1.SessionConfig{
		Compaction: &agentdv1.CompactionSettings{DisableAuto: true, KeepRecentTokens: 400},
		Faux:       &agentdv1.FauxScript{Echo: true, ContextWindow: 2000},
	})
	for range 3 {
		h.run(id, long)
	}
	// 6 messages of 300 tokens: the next prompt overflows 2000.
	evs := h.run(id, long)
	var recovered bool
	for _, ev := range evs {
		if e := ev.GetCompactionEnd(); e != nil {
			recovered = e.GetReason() == agentdv1.CompactionReason_COMPACTION_REASON_OVERFLOW && e.GetEntryId() != ""
		}
	}
	end := evs[len(evs)-1].GetAgentEnd()
	if !recovered || end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("overflow not recovered: %s, outcome %v %s", allKinds(evs), end.GetOutcome(), end.GetErrorMessage())
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
	id2 := h.session(&agentdv1.SessionConfig{
		Compaction: &agentdv1.CompactionSettings{DisableAuto: true, KeepRecentTokens: 100},
		Faux:       &agentdv1.FauxScript{Echo: true, ContextWindow: 500},
	})
	h.run(id2, "hello")
	evs = h.run(id2, strings.Repeat("big ", 1000))
	end = evs[len(evs)-1].GetAgentEnd()
	if end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_ERROR || !strings.Contains(end.GetErrorMessage(), "Context overflow") {
		t.Fatalf("a repeated overflow ended %v %q; want ERROR with the provider's text", end.GetOutcome(), end.GetErrorMessage())
	}
}

// TestContextHook: the hook's answer shapes the call; a timeout, an
// answer naming an entry the request did not offer, and an answer refused
// before it arrived (RefuseContext, as the service does for one that fails
// validation) fall back to the policies' context with an error event.
func TestContextHook(t *testing.T) {
	h := newHarness(t, agent.Options{})
	ctx := context.Background()
	id := h.session(&agentdv1.SessionConfig{
		ContextHook: &agentdv1.ContextHook{Timeout: durationpb.New(300 * time.Millisecond), IncludeMessages: true},
		Faux:        &agentdv1.FauxScript{Echo: true},
	})
	run := func(text string, answer func(req *agentdv1.ContextRequested)) []*agentdv1.AgentEvent {
		s := h.promptRun(id, text)
		evs := s.until(func(ev *agentdv1.AgentEvent) bool { return ev.GetContextRequested() != nil })
		answer(evs[len(evs)-1].GetContextRequested())
		return append(evs, s.rest()...)
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
		err := h.a.SubmitContext(ctx, id, req.GetRequestId(), []*agentdv1.ContextSelection{
			{Item: &agentdv1.ContextSelection_EntryId{EntryId: req.GetItems()[0].GetEntryId()}},
			{Item: &agentdv1.ContextSelection_Message{Message: user("injected")}},
		})
		if err != nil {
			t.Errorf("SubmitContext: %v", err)
		}
	})
	if got := lastAnswer(evs); got != "injected" {
		t.Fatalf("the model answered %q; the hook injected a message it should have seen last", got)
	}
	if got := testkit.MessageKinds(h.transcript(id)); got != "user assistant" {
		t.Fatalf("transcript %s: the injected message must not be stored", got)
	}
	// Timed out.
	evs = run("second", func(*agentdv1.ContextRequested) {})
	if !hasError(evs, "context_hook", "did not answer") || lastAnswer(evs) != "second" {
		t.Fatalf("timeout: %s, answer %q", allKinds(evs), lastAnswer(evs))
	}
	// An unknown entry id is refused, and the call goes on.
	evs = run("third", func(req *agentdv1.ContextRequested) {
		err := h.a.SubmitContext(ctx, id, req.GetRequestId(), []*agentdv1.ContextSelection{
			{Item: &agentdv1.ContextSelection_EntryId{EntryId: "no-such-entry"}}})
		wantField(t, err, "items[0].entry_id")
	})
	if !hasError(evs, "context_hook", "refused") || lastAnswer(evs) != "third" {
		t.Fatalf("unknown id: %s, answer %q", allKinds(evs), lastAnswer(evs))
	}
	// An answer refused before it arrives: the call goes on at once.
	evs = run("fourth", func(req *agentdv1.ContextRequested) {
		h.a.RefuseContext(ctx, id, req.GetRequestId(), errors.New("items[0]: set entry_id or message"))
	})
	if !hasError(evs, "context_hook", "refused") || lastAnswer(evs) != "fourth" {
		t.Fatalf("refused answer: %s, answer %q", allKinds(evs), lastAnswer(evs))
	}
	if got := testkit.MessageKinds(h.transcript(id)); got != strings.TrimSpace(strings.Repeat("user assistant ", 4)) {
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
	all, err := h.store.Path(context.Background(), id)
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
