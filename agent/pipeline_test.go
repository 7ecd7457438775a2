package agent_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agent/contextview"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/faux"
)

// recorder is a model that keeps every context it is sent and answers
// with a text.
type recorder struct {
	mu   sync.Mutex
	sent []*agentdv1.Context
}

func (r *recorder) Resolve(*agentdv1.ModelRef) (provider.Model, provider.StreamFunc, error) {
	model := provider.Model{Provider: "test", ID: "rec", API: "faux", ContextWindow: 200_000}
	return model, func(ctx context.Context, m provider.Model, c *agentdv1.Context, o provider.Options) provider.Stream {
		r.mu.Lock()
		r.sent = append(r.sent, proto.CloneOf(c))
		r.mu.Unlock()
		return faux.New(faux.Options{}, faux.Reply(text("done"))).Stream(ctx, m, c, o)
	}, nil
}

func (r *recorder) List() []*agentdv1.Model { return nil }

// GetContext is what the model receives, byte for byte: for a session with
// a system prompt, a client tool, context blocks, a context policy that
// rewrites an old tool result (whose details the model never sees) and a
// compaction, the context Agent.Context reports equals the one the next
// model call is sent, and so do its per-message token counts.
func TestContextIsWhatTheModelReceives(t *testing.T) {
	rec := &recorder{}
	h := newHarness(t, agent.Options{Models: rec})
	params, err := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := h.session(&agentdv1.SessionConfig{
		Model:         &agentdv1.ModelRef{Provider: "test", Id: "rec"},
		SystemPrompt:  "You are terse.",
		Tools:         []*agentdv1.Tool{{Name: "lookup", Description: "Looks a thing up.", Parameters: params, Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT}},
		ContextBlocks: []*agentdv1.ContextBlock{{Name: "profile", Text: "The user likes port 8080."}},
		ContextPolicy: &agentdv1.ContextPolicy{Rules: []*agentdv1.ContextRule{{Rule: &agentdv1.ContextRule_ElideToolResults{ElideToolResults: &agentdv1.ElideToolResultsRule{}}}}},
	})
	ctx := context.Background()
	answer := func(blocks ...*agentdv1.ContentBlock) *agentdv1.AgentMessage {
		m := faux.Message(blocks...)
		m.Provider, m.Api, m.Model, m.StopReason = "test", "faux", "rec", agentdv1.StopReason_STOP_REASON_STOP
		return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: m}}
	}
	details, _ := structpb.NewValue(map[string]any{"rows": 3})
	result := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: &agentdv1.ToolResultMessage{
		ToolCallId: "c1", ToolName: "lookup", Content: []*agentdv1.ContentBlock{faux.Text("three rows: a, b, c")}, Details: details,
	}}}
	history := []*agentdv1.AgentMessage{
		user(strings.Repeat("an old question ", 300)), answer(faux.Text(strings.Repeat("an old answer ", 300))),
		user("look it up"), answer(faux.ToolCall("c1", "lookup", map[string]any{"q": "x"})), result, answer(faux.Text("found three")),
		user("and now?"), answer(faux.Text("nothing else")),
	}
	if _, err := h.a.AppendMessages(ctx, id, history); err != nil {
		t.Fatal(err)
	}
	if err := h.a.Compact(ctx, id, agent.CompactOptions{Summary: "They talked about ports.", KeepRecentTokens: 100},
		func(*agentdv1.AgentEvent) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := h.a.AppendMessages(ctx, id, []*agentdv1.AgentMessage{user("go on")}); err != nil {
		t.Fatal(err)
	}

	rep, err := h.a.Context(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	runID, err := h.a.Start(ctx, agent.StartRequest{SessionID: id})
	if err != nil {
		t.Fatalf("Continue: %v", err)
	}
	if _, err := h.follow(id, runID, 0); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.sent) != 1 {
		t.Fatalf("%d model calls, want 1", len(rec.sent))
	}
	sent := rec.sent[0]
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(sent)
	if err != nil {
		t.Fatal(err)
	}
	got, err := proto.MarshalOptions{Deterministic: true}.Marshal(rep.Context)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("GetContext differs from the model's request:\n got %v\nwant %v", rep.Context, sent)
	}
	// The pieces the test is about are in it.
	all := []string{}
	for _, m := range sent.GetMessages() {
		for _, b := range append(m.GetUser().GetContent(), m.GetToolResult().GetContent()...) {
			all = append(all, b.GetText().GetText())
		}
		if m.GetToolResult().GetDetails() != nil {
			t.Errorf("a tool result's details reached the model: %v", m)
		}
	}
	joined := strings.Join(all, "\n")
	for _, want := range []string{agent.ContextBlocksHeader, agentloop.CompactionSummaryPrefix + "They talked about ports.", "go on"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the context lacks %q:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "three rows") || strings.Contains(joined, "an old question") {
		t.Errorf("the policy or the compaction was not applied:\n%s", joined)
	}
	if sent.GetSystemPrompt() != "You are terse." || len(sent.GetTools()) != 1 {
		t.Errorf("system prompt %q, tools %v", sent.GetSystemPrompt(), sent.GetTools())
	}
	if len(rep.MessageTokens) != len(sent.GetMessages()) {
		t.Fatalf("%d token counts for %d messages", len(rep.MessageTokens), len(sent.GetMessages()))
	}
	var sum int64
	for i, m := range sent.GetMessages() {
		if n := contextview.MessageTokens(m); rep.MessageTokens[i] != n {
			t.Errorf("message %d: GetContext counts %d tokens, the request has %d", i, rep.MessageTokens[i], n)
		}
		sum += rep.MessageTokens[i]
	}
	if rep.TotalTokens <= 0 || rep.WouldCompact {
		t.Errorf("total %d (messages sum to %d), would compact %v", rep.TotalTokens, sum, rep.WouldCompact)
	}
}
