package agent

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// A child's configuration is the parent's with the overlay's set fields
// replacing (lists whole), and its profiles carry the depth left.
func TestSubagentConfig(t *testing.T) {
	parent := &agentdv1.SessionConfig{
		SystemPrompt:  "parent",
		MaxTurns:      7,
		Tools:         []*agentdv1.Tool{{Name: "read_file"}, {Name: "bash"}},
		WorkspaceRoot: "/ws",
		Budget:        &agentdv1.Budget{MaxCostUsd: 2},
		Subagents: []*agentdv1.SubagentProfile{
			{Name: "a", Description: "a", MaxDepth: 3},
			{Name: "b", Description: "b"},
		},
	}
	tests := []struct {
		name    string
		profile *agentdv1.SubagentProfile
		want    *agentdv1.SessionConfig
	}{
		{"no overlay, no depth", &agentdv1.SubagentProfile{Name: "b"}, &agentdv1.SessionConfig{
			SystemPrompt: "parent", MaxTurns: 7, Tools: parent.Tools, WorkspaceRoot: "/ws", Budget: parent.Budget}},
		{"overlay replaces", &agentdv1.SubagentProfile{Name: "x", Config: &agentdv1.SessionConfig{
			SystemPrompt: "child", Tools: []*agentdv1.Tool{{Name: "ls"}}, Budget: &agentdv1.Budget{MaxTokens: 5}}},
			&agentdv1.SessionConfig{SystemPrompt: "child", MaxTurns: 7, Tools: []*agentdv1.Tool{{Name: "ls"}}, WorkspaceRoot: "/ws", Budget: &agentdv1.Budget{MaxTokens: 5}}},
		{"depth 3 leaves 2 below", &agentdv1.SubagentProfile{Name: "a", MaxDepth: 3}, &agentdv1.SessionConfig{
			SystemPrompt: "parent", MaxTurns: 7, Tools: parent.Tools, WorkspaceRoot: "/ws", Budget: parent.Budget,
			Subagents: []*agentdv1.SubagentProfile{{Name: "a", Description: "a", MaxDepth: 2}, {Name: "b", Description: "b", MaxDepth: 1}}}},
		{"own profiles", &agentdv1.SubagentProfile{Name: "a", MaxDepth: 2, Config: &agentdv1.SessionConfig{
			Subagents: []*agentdv1.SubagentProfile{{Name: "c", Description: "c", MaxDepth: 4}}}}, &agentdv1.SessionConfig{
			SystemPrompt: "parent", MaxTurns: 7, Tools: parent.Tools, WorkspaceRoot: "/ws", Budget: parent.Budget,
			Subagents: []*agentdv1.SubagentProfile{{Name: "c", Description: "c", MaxDepth: 1}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := proto.CloneOf(parent)
			got := SubagentConfig(parent, tc.profile)
			if !proto.Equal(got, tc.want) {
				t.Fatalf("got %v\nwant %v", got, tc.want)
			}
			if !proto.Equal(parent, before) {
				t.Fatal("the parent's configuration changed")
			}
		})
	}
}

// A child's transcript holds its answer only when it ends with an
// assistant message that stopped without calling tools; a structured
// answer is its JSON.
func TestFinalAnswer(t *testing.T) {
	msg := func(m *agentdv1.AgentMessage) *agentdv1.Entry {
		return &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: m}}
	}
	assistant := func(stop agentdv1.StopReason, blocks ...*agentdv1.ContentBlock) *agentdv1.Entry {
		return msg(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: &agentdv1.AssistantMessage{StopReason: stop, Content: blocks}}})
	}
	user := msg(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: textBlocks("task")}}})
	call := &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: "c", Name: "x"}}}
	out, _ := structpb.NewStruct(map[string]any{"n": 1})
	structured := msg(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: &agentdv1.AssistantMessage{
		StopReason: agentdv1.StopReason_STOP_REASON_STOP, Content: textBlocks(`{"n": 1}`), StructuredOutput: out}}})
	notice := &agentdv1.Entry{Payload: &agentdv1.Entry_ToolCallStarted{ToolCallStarted: &agentdv1.ToolCallStarted{ToolCallId: "c"}}}
	tests := []struct {
		name   string
		path   []*agentdv1.Entry
		answer string
		ok     bool
	}{
		{"empty", nil, "", false},
		{"prompted only", []*agentdv1.Entry{user}, "", false},
		{"answered", []*agentdv1.Entry{user, assistant(agentdv1.StopReason_STOP_REASON_STOP, textBlocks("done")...), notice}, "done", true},
		{"calling tools", []*agentdv1.Entry{user, assistant(agentdv1.StopReason_STOP_REASON_TOOL_USE, call)}, "", false},
		{"aborted", []*agentdv1.Entry{user, assistant(agentdv1.StopReason_STOP_REASON_ABORTED, textBlocks("half")...)}, "", false},
		{"structured", []*agentdv1.Entry{user, structured}, `{"n":1}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			answer, ok := finalAnswer(tc.path)
			if ok != tc.ok || (ok && answer != tc.answer) {
				t.Fatalf("finalAnswer = %q, %v; want %q, %v", answer, ok, tc.answer, tc.ok)
			}
		})
	}
	if a, b := SubagentSessionID("s", "r", "c"), SubagentSessionID("s", "r", "d"); a == b || a != SubagentSessionID("s", "r", "c") || a[:4] != "sub-" {
		t.Fatalf("child ids %q, %q", a, b)
	}
}
