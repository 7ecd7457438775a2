package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agent/contextpolicy"
	"github.com/agentd/agentd/agent/contextview"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/benchenv"
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
// transcript (AGENTD_BENCH_CONTEXT_MESSAGES) with a session's policies (tool-result elision, a token
// budget, a context block and the size estimate) and, in the same
// iteration, with the plain pipeline (convert and replay only). cold is
// GetContext and a run's first call (the view built from the path, every
// size estimated, every placeholder written); warm is each later call of
// a run, whose view, sizes and placeholders carry over. x-plain is the
// ratio to the plain pipeline.
func BenchmarkContextPipeline(b *testing.B) {
	messages := benchenv.Int(b, "CONTEXT_MESSAGES", 10_000)
	path := benchPath(messages)
	model := faux.DefaultModel()
	ctx := context.Background()
	sh := newShaper(&agentdv1.SessionConfig{
		ContextPolicy: &agentdv1.ContextPolicy{Rules: []*agentdv1.ContextRule{
			{Rule: &agentdv1.ContextRule_ElideToolResults{ElideToolResults: &agentdv1.ElideToolResultsRule{KeepTurns: 10}}},
			{Rule: &agentdv1.ContextRule_TokenBudget{TokenBudget: &agentdv1.TokenBudgetRule{MaxTokens: 1 << 40}}},
		}},
		ContextBlocks: []*agentdv1.ContextBlock{{Name: "user profile", Text: "prefers Go"}},
	}, model)
	plainPipeline := func(p []*agentdv1.Entry) {
		msgs := make([]*agentdv1.AgentMessage, 0, len(p))
		for _, e := range p {
			msgs = append(msgs, e.GetMessage())
		}
		agentloop.BuildContext(ctx, agentloop.State{Messages: msgs}, agentloop.Config{Model: model})
	}
	shapedPipeline := func(view []contextview.Item, memo *contextpolicy.Memo) {
		items := sh.policies(view, memo, func(string, error) {})
		sh.wouldCompact(sh.estimate(items))
		agentloop.BuildContext(ctx, agentloop.State{Messages: sh.messages(items)}, agentloop.Config{Model: model})
	}
	for _, warm := range []bool{false, true} {
		name := "cold"
		if warm {
			name = "warm"
		}
		b.Run(name, func(b *testing.B) {
			benchenv.Procs(b)
			builder := contextview.NewBuilder(path)
			memo := contextpolicy.NewMemo()
			shapedPipeline(builder.View(), memo)
			var plain, shaped time.Duration
			i := 0
			for b.Loop() {
				// Each iteration is a later call: the run appended a message.
				i++
				builder.Append(&agentdv1.Entry{Id: fmt.Sprintf("x%d", i), Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{
					Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{
						{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: "and then?"}}}}}}}}})
				runPlain := func() {
					start := time.Now()
					plainPipeline(builder.Path())
					plain += time.Since(start)
				}
				runShaped := func() {
					start := time.Now()
					if warm {
						shapedPipeline(builder.View(), memo)
					} else {
						shapedPipeline(contextview.FromPath(builder.Path()), nil)
					}
					shaped += time.Since(start)
				}
				// Alternate the order: the garbage of whichever runs first
				// is collected while the second runs.
				if i%2 == 0 {
					runPlain()
					runShaped()
				} else {
					runShaped()
					runPlain()
				}
			}
			b.ReportMetric(float64(plain.Microseconds())/float64(b.N)/1e3, "plain-ms")
			b.ReportMetric(float64(shaped.Microseconds())/float64(b.N)/1e3, "policies-ms")
			b.ReportMetric(float64(shaped)/float64(plain), "x-plain")
			b.ReportMetric(float64(messages), "messages")
		})
	}
}
