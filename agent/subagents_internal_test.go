package agent

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/memory"
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

// A crash between a child's run record and its prompt leaves a child
// session with an ended run and no messages; the call's retry starts the
// child afresh instead of finding that run again, and gets its answer.
func TestSpawnAfterACrashBeforeTheChildsPrompt(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	a, err := New(ctx, store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(ctx) })
	args, _ := structpb.NewStruct(map[string]any{"profile": "helper", "task": "help"})
	spawn := &agentdv1.AssistantMessage{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_ToolCall{
		ToolCall: &agentdv1.ToolCall{Id: "c1", Name: SpawnAgentTool, Arguments: args}}}}}
	text := func(s string) *agentdv1.AssistantMessage {
		return &agentdv1.AssistantMessage{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}}}
	}
	profile := &agentdv1.SubagentProfile{Name: "helper", Description: "Helps.",
		Config: &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{text("helped")}}}}
	cfg := &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{spawn, text("done")}},
		Subagents: []*agentdv1.SubagentProfile{profile}}
	parent, err := store.CreateSession(ctx, persistence.CreateSessionParams{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	parentRun := runID(parent.ID, "r1")
	childID := SubagentSessionID(parent.ID, parentRun, "c1")
	if _, err := store.CreateSession(ctx, persistence.CreateSessionParams{ID: childID, Config: SubagentConfig(cfg, profile),
		Origin: persistence.Origin{SessionID: parent.ID, RunID: parentRun, ToolCallID: "c1", Profile: "helper"}}); err != nil {
		t.Fatal(err)
	}
	crashed := runID(childID, subagentRequestID)
	if err := store.StartRun(ctx, childID, crashed, &agentdv1.RunRequest{Method: SubagentMethod}); err != nil {
		t.Fatal(err)
	}
	if err := store.EndRun(ctx, crashed, persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED}); err != nil {
		t.Fatal(err)
	}

	id, err := a.Start(ctx, StartRequest{SessionID: parent.ID, RequestID: "r1", Prompt: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{
		User: &agentdv1.UserMessage{Content: text("go").Content}}}})
	if err != nil || id != parentRun {
		t.Fatalf("Start: %q, %v; want run %q", id, err, parentRun)
	}
	if err := a.Follow(ctx, parent.ID, id, 0, FollowOptions{}, func(Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	path, err := store.Path(ctx, parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	var result *agentdv1.ToolResultMessage
	for _, e := range path {
		if tr := e.GetMessage().GetToolResult(); tr.GetToolCallId() == "c1" {
			result = tr
		}
	}
	if result.GetIsError() || len(result.GetContent()) == 0 || result.GetContent()[0].GetText().GetText() != "helped" {
		t.Fatalf("the spawn's result after the crash: %v", result)
	}
}
