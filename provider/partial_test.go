package provider_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

// TestPartialMatchesEmitter: a consumer that rebuilds the message from the
// emitter's events with a Partial holds exactly the content the emitter
// finishes the message with, for a completed stream and for one cut off
// mid-block.
func TestPartialMatchesEmitter(t *testing.T) {
	tests := []struct {
		name   string
		stream func(e *provider.Emitter)
		want   []*agentdv1.ContentBlock
	}{
		{"completed", func(e *provider.Emitter) {
			th, _ := e.BeginThinking(false)
			e.Delta(th, "let me ")
			e.Delta(th, "think")
			e.AppendSignature(th, "sig-")
			e.AppendSignature(th, "1")
			tx, _ := e.BeginText()
			e.Delta(tx, "hello")
			tc, _ := e.BeginToolCall("call_1", "read")
			e.Delta(tc, `{"path":`)
			e.Delta(tc, `"a.txt"}`)
			e.SetToolCallID(tc, "call_1|fc_1")
			e.Done(agentdv1.StopReason_STOP_REASON_TOOL_USE)
		}, []*agentdv1.ContentBlock{
			{Block: &agentdv1.ContentBlock_Thinking{Thinking: &agentdv1.ThinkingContent{Thinking: "let me think", ThinkingSignature: "sig-1"}}},
			{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: "hello"}}},
			{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: "call_1|fc_1", Name: "read", Arguments: provider.ParseToolArguments(`{"path":"a.txt"}`)}}},
		}},
		{"aborted inside a tool call", func(e *provider.Emitter) {
			tx, _ := e.BeginText()
			e.Delta(tx, "partial answer")
			e.End(tx)
			tc, _ := e.BeginToolCall("call_2", "write")
			e.Delta(tc, `{"path":"b.t`)
			e.Abort()
		}, []*agentdv1.ContentBlock{
			{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: "partial answer"}}},
			{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: "call_2", Name: "write", Arguments: provider.ParseToolArguments(`{}`)}}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var rebuilt provider.Partial
			var final *agentdv1.AssistantMessage
			e := provider.NewEmitter(provider.Model{ID: "m"}, func(ev provider.Event) bool {
				rebuilt.Add(ev)
				if ev.Type == provider.EventDone || ev.Type == provider.EventError {
					final = ev.Message
				}
				return true
			}, nil)
			tc.stream(e)
			if final == nil {
				t.Fatal("no final message")
			}
			if diff := cmp.Diff(tc.want, final.GetContent(), protocmp.Transform()); diff != "" {
				t.Errorf("emitter's final content (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(final.GetContent(), rebuilt.Content(), protocmp.Transform()); diff != "" {
				t.Errorf("rebuilt from events differs from the emitter's (-emitter +rebuilt):\n%s", diff)
			}
		})
	}
}
