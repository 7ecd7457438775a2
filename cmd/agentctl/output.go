package main

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// print writes m as one protojson line with --json, otherwise what
// readable writes.
func (a *app) print(m proto.Message, readable func()) error {
	if a.json {
		b, err := protojson.MarshalOptions{}.Marshal(m)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(a.out, string(b))
		return err
	}
	readable()
	return nil
}

// blocksText is the text of content blocks, tool calls as name(…).
func blocksText(blocks []*agentdv1.ContentBlock) string {
	var parts []string
	for _, b := range blocks {
		switch x := b.GetBlock().(type) {
		case *agentdv1.ContentBlock_Text:
			parts = append(parts, x.Text.GetText())
		case *agentdv1.ContentBlock_ToolCall:
			args, _ := protojson.Marshal(x.ToolCall.GetArguments())
			parts = append(parts, fmt.Sprintf("→ %s(%s)", x.ToolCall.GetName(), args))
		case *agentdv1.ContentBlock_Image:
			parts = append(parts, "[image "+x.Image.GetMimeType()+"]")
		}
	}
	return strings.Join(parts, " ")
}

// messageLine is one readable line of an agent message.
func messageLine(m *agentdv1.AgentMessage) string {
	switch k := m.GetKind().(type) {
	case *agentdv1.AgentMessage_User:
		return "you: " + blocksText(k.User.GetContent())
	case *agentdv1.AgentMessage_Assistant:
		s := "assistant: " + blocksText(k.Assistant.GetContent())
		if e := k.Assistant.GetErrorMessage(); e != "" {
			s += " (" + e + ")"
		}
		return s
	case *agentdv1.AgentMessage_ToolResult:
		mark := "✓"
		if k.ToolResult.GetIsError() {
			mark = "✗"
		}
		return fmt.Sprintf("%s %s: %s", mark, k.ToolResult.GetToolName(), firstLine(blocksText(k.ToolResult.GetContent()), 100))
	case *agentdv1.AgentMessage_CompactionSummary:
		return "[earlier conversation summarized]"
	case *agentdv1.AgentMessage_BranchSummary:
		return "[branch summary] " + firstLine(k.BranchSummary.GetSummary(), 100)
	}
	if line := noticeLine(m); line != "" {
		return line
	}
	b, _ := protojson.Marshal(m)
	return firstLine(string(b), 120)
}

func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// runSummary is the line that closes a run: outcome, tokens, cost and
// how long it took.
func runSummary(end *agentdv1.AgentEnd, took time.Duration) string {
	u := end.GetUsage()
	return fmt.Sprintf("[%s · %d in / %d out tokens · $%.4f · %s]", strings.TrimPrefix(end.GetOutcome().String(), "RUN_OUTCOME_"),
		u.GetInput(), u.GetOutput(), u.GetCost().GetTotal(), took.Round(time.Millisecond))
}

// stageProviderRetry is the stage of the error event agentd sends before
// it retries a failed model call; its message says what failed, which
// attempt follows and when ("model call failed (…); retry 1 in 2s").
const stageProviderRetry = "provider_retry"

// isRetry reports whether ev announces the retry of a failed model call.
func isRetry(ev *agentdv1.AgentEvent) bool {
	return ev.GetError().GetStage() == stageProviderRetry
}

// errorLine is one readable line of an error event: a retry as ↻ and its
// message, any other error with its stage.
func errorLine(e *agentdv1.AgentError) string {
	if e.GetStage() == stageProviderRetry {
		return "↻ " + e.GetMessage()
	}
	return fmt.Sprintf("error (%s): %s", e.GetStage(), e.GetMessage())
}
