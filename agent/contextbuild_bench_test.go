package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agent/contextview"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider/faux"
)

// benchPath is a transcript of n messages: turns of a prompt, a tool call,
// its result and an answer.
func benchPath(n int) []*agentdv1.Entry {
	text := func(s string) []*agentdv1.ContentBlock {
		return []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}}
	}
	out := make([]*agentdv1.Entry, 0, n)
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("c%d", i)
		answer := func(stop agentdv1.StopReason, c []*agentdv1.ContentBlock) *agentdv1.AgentMessage {
			return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: &agentdv1.AssistantMessage{
				Api: faux.API, Provider: faux.ProviderName, Model: faux.ModelID, StopReason: stop,
				Usage: &agentdv1.Usage{Input: 100, Output: 10}, Content: c}}}
		}
		msgs := []*agentdv1.AgentMessage{
			{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: text(fmt.Sprintf("question %d", i))}}},
			answer(agentdv1.StopReason_STOP_REASON_TOOL_USE, []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: id, Name: "read_file"}}}}),
			{Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: &agentdv1.ToolResultMessage{ToolCallId: id, ToolName: "read_file", Content: text(strings.Repeat("line\n", 40))}}},
			answer(agentdv1.StopReason_STOP_REASON_STOP, text("done")),
		}
		for _, m := range msgs {
			out = append(out, &agentdv1.Entry{Id: fmt.Sprintf("e%d", len(out)), Payload: &agentdv1.Entry_Message{Message: m}})
		}
	}
	return out[:n]
}

// BenchmarkContextPipeline builds one call's context from a 10,000-message
// transcript with a session's policies (the compaction view, tool-result
// elision, a token budget, a context block and the size estimate), and,
// in the same iteration, the plain pipeline (convert and replay only);
// x-plain is the ratio of the two.
func BenchmarkContextPipeline(b *testing.B) {
	path := benchPath(10000)
	model := faux.DefaultModel()
	ctx := context.Background()
	sh := newShaper(&agentdv1.SessionConfig{
		ContextPolicy: &agentdv1.ContextPolicy{Rules: []*agentdv1.ContextRule{
			{Rule: &agentdv1.ContextRule_ElideToolResults{ElideToolResults: &agentdv1.ElideToolResultsRule{KeepTurns: 10}}},
			{Rule: &agentdv1.ContextRule_TokenBudget{TokenBudget: &agentdv1.TokenBudgetRule{MaxTokens: 1 << 40}}},
		}},
		ContextBlocks: []*agentdv1.ContextBlock{{Name: "user profile", Text: "prefers Go"}},
	}, model)
	var plain, shaped time.Duration
	for b.Loop() {
		start := time.Now()
		msgs := make([]*agentdv1.AgentMessage, len(path))
		for i, e := range path {
			msgs[i] = e.GetMessage()
		}
		agentloop.BuildContext(ctx, agentloop.State{Messages: msgs}, agentloop.Config{Model: model})
		mid := time.Now()
		items := sh.policies(contextview.FromPath(path), func(string, error) {})
		sh.wouldCompact(sh.estimate(items))
		agentloop.BuildContext(ctx, agentloop.State{Messages: sh.messages(items)}, agentloop.Config{Model: model})
		plain += mid.Sub(start)
		shaped += time.Since(mid)
	}
	b.ReportMetric(float64(plain.Microseconds())/float64(b.N)/1e3, "plain-ms")
	b.ReportMetric(float64(shaped.Microseconds())/float64(b.N)/1e3, "policies-ms")
	b.ReportMetric(float64(shaped)/float64(plain), "x-plain")
}
