package service_test

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

var testTime = timestamppb.New(timestamppb.Now().AsTime().Truncate(1000))

func text(s string) *agentdv1.ContentBlock {
	return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}
}

func mustStruct(t testing.TB, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustValue(t *testing.T, v any) *structpb.Value {
	t.Helper()
	s, err := structpb.NewValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// agentMessageCases has one fully populated message per AgentMessage kind,
// keyed by the oneof field name.
func agentMessageCases(t *testing.T) map[string]*agentdv1.AgentMessage {
	exitCode := int32(2)
	payload, err := anypb.New(&agentdv1.Label{TargetEntryId: "e1", Label: "client-defined"})
	if err != nil {
		t.Fatal(err)
	}
	assistant := &agentdv1.AssistantMessage{
		Content: []*agentdv1.ContentBlock{
			{Block: &agentdv1.ContentBlock_Thinking{Thinking: &agentdv1.ThinkingContent{Thinking: "port is in config", ThinkingSignature: "sig/+=="}}},
			{Block: &agentdv1.ContentBlock_Thinking{Thinking: &agentdv1.ThinkingContent{Redacted: true, ThinkingSignature: "opaque"}}},
			{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: "默认端口是 3000", TextSignature: `{"v":1,"id":"msg_1"}`}}},
			{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{
				Id: "call_1", Name: "read_file", ThoughtSignature: "gem",
				Arguments: mustStruct(t, map[string]any{"path": "src/config.ts", "limit": 20.0, "nested": map[string]any{"a": []any{true, nil}}}),
			}}},
		},
		Api: "anthropic-messages", Provider: "anthropic", Model: "claude-x",
		Usage: &agentdv1.Usage{Input: 10, Output: 20, CacheRead: 3, CacheWrite: 4, TotalTokens: 37,
			Cost: &agentdv1.Cost{Input: 0.1, Output: 0.2, CacheRead: 0.01, CacheWrite: 0.02, Total: 0.33}},
		StopReason: agentdv1.StopReason_STOP_REASON_TOOL_USE, ResponseId: "resp_1", Timestamp: testTime,
		StructuredOutput: mustStruct(t, map[string]any{"label": "bug", "tags": []any{"ui", 2.0}}),
	}
	return map[string]*agentdv1.AgentMessage{
		"user": {Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{
			Content: []*agentdv1.ContentBlock{
				text("读取 src/config.ts，告诉我默认端口。"),
				{Block: &agentdv1.ContentBlock_Image{Image: &agentdv1.ImageContent{Data: []byte{0x89, 'P', 'N', 'G', 0}, MimeType: "image/png"}}},
			},
			Timestamp: testTime,
		}}},
		"assistant": {Kind: &agentdv1.AgentMessage_Assistant{Assistant: assistant}},
		"tool_result": {Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: &agentdv1.ToolResultMessage{
			ToolCallId: "call_1", ToolName: "read_file", Content: []*agentdv1.ContentBlock{text("export const port = 3000;")},
			Details: mustValue(t, map[string]any{"lines": 1.0}), IsError: true, Timestamp: testTime,
		}}},
		"approval_notice": {Kind: &agentdv1.AgentMessage_ApprovalNotice{ApprovalNotice: &agentdv1.ApprovalNotice{
			ToolCallId: "call_2", ToolName: "edit_file", Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED,
			Reason: "ok", DecidedBy: "alice", Timestamp: testTime, VisibleInUi: true, IncludeInModelContext: true,
		}}},
		"bash_execution": {Kind: &agentdv1.AgentMessage_BashExecution{BashExecution: &agentdv1.BashExecution{
			Command: "ls", Output: "a\nb", ExitCode: &exitCode, Cancelled: false, Truncated: true,
			FullOutputPath: "/tmp/out", Timestamp: testTime, VisibleInUi: true,
		}}},
		"custom": {Kind: &agentdv1.AgentMessage_Custom{Custom: &agentdv1.CustomMessage{
			CustomType: "job_done", Content: []*agentdv1.ContentBlock{text("job 7 finished")},
			Details: mustValue(t, []any{"x", 1.0}), IncludeInModelContext: true, Timestamp: testTime,
		}}},
		"branch_summary": {Kind: &agentdv1.AgentMessage_BranchSummary{BranchSummary: &agentdv1.BranchSummary{
			Summary: "tried A", FromEntryId: "e9", Timestamp: testTime,
		}}},
		"compaction_summary": {Kind: &agentdv1.AgentMessage_CompactionSummary{CompactionSummary: &agentdv1.CompactionSummary{
			Summary: "earlier work", FirstKeptEntryId: "e5", TokensBefore: 123456, Timestamp: testTime,
		}}},
		"extension": {Kind: &agentdv1.AgentMessage_Extension{Extension: &agentdv1.Extension{
			Payload: payload, ModelContent: []*agentdv1.ContentBlock{text("ext")}, VisibleInUi: true, Timestamp: testTime,
		}}},
		"hook_notice": {Kind: &agentdv1.AgentMessage_HookNotice{HookNotice: &agentdv1.HookNotice{
			RequestId: "r1-hook-1", Event: agentdv1.HookEvent_HOOK_EVENT_USER_PROMPT, Hook: "policy",
			Action: agentdv1.HookAction_HOOK_ACTION_CONTEXT_ADDED, Reason: "house rules", DecidedBy: "app",
			Timestamp: testTime, VisibleInUi: true, IncludeInModelContext: true, Content: []*agentdv1.ContentBlock{text("be brief")},
		}}},
	}
}

// agentEventCases has one populated event per AgentEvent kind, keyed by the
// oneof field name.
func agentEventCases(t *testing.T) map[string]*agentdv1.AgentEvent {
	msgs := agentMessageCases(t)
	assistant := msgs["assistant"].GetAssistant()
	result := msgs["tool_result"].GetToolResult()
	args := mustStruct(t, map[string]any{"path": "src/config.ts"})
	ev := func(e *agentdv1.AgentEvent) *agentdv1.AgentEvent {
		e.SessionId, e.RunId, e.Seq, e.Time = "s1", "r1", 42, testTime
		return e
	}
	update := func(u *agentdv1.MessageUpdate) *agentdv1.AgentEvent {
		return ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_MessageUpdate{MessageUpdate: u}})
	}
	return map[string]*agentdv1.AgentEvent{
		"agent_start":    ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_AgentStart{AgentStart: &agentdv1.AgentStart{}}}),
		"turn_start":     ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_TurnStart{TurnStart: &agentdv1.TurnStart{Turn: 3}}}),
		"message_start":  ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_MessageStart{MessageStart: &agentdv1.MessageStart{Message: msgs["user"]}}}),
		"message_update": update(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_TextDelta{TextDelta: &agentdv1.TextDelta{ContentIndex: 2, Delta: "30"}}}),
		"message_end":    ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_MessageEnd{MessageEnd: &agentdv1.MessageEnd{Message: msgs["assistant"], EntryId: "e3"}}}),
		"tool_execution_start": ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_ToolExecutionStart{ToolExecutionStart: &agentdv1.ToolExecutionStart{
			ToolCallId: "call_1", ToolName: "read_file", Arguments: args}}}),
		"tool_execution_update": ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_ToolExecutionUpdate{ToolExecutionUpdate: &agentdv1.ToolExecutionUpdate{
			ToolCallId: "call_1", ToolName: "bash", Content: []*agentdv1.ContentBlock{text("line\n")}, Details: mustValue(t, map[string]any{"bytes": 5.0})}}}),
		"tool_execution_end": ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_ToolExecutionEnd{ToolExecutionEnd: &agentdv1.ToolExecutionEnd{Result: result}}}),
		"turn_end": ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_TurnEnd{TurnEnd: &agentdv1.TurnEnd{
			Turn: 3, Message: assistant, ToolResults: []*agentdv1.ToolResultMessage{result}}}}),
		"agent_end": ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_AgentEnd{AgentEnd: &agentdv1.AgentEnd{
			Outcome: agentdv1.RunOutcome_RUN_OUTCOME_ERROR, ErrorMessage: "boom", Usage: assistant.GetUsage()}}}),
		"approval_requested": ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_ApprovalRequested{ApprovalRequested: &agentdv1.ApprovalRequested{
			ToolCallId: "call_2", ToolName: "edit_file", Arguments: args, Deadline: testTime}}}),
		"tool_call_requested": ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_ToolCallRequested{ToolCallRequested: &agentdv1.ToolCallRequested{
			ToolCallId: "call_3", ToolName: "pick_color", Arguments: args, Deadline: testTime}}}),
		"compaction_start": ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_CompactionStart{CompactionStart: &agentdv1.CompactionStart{
			Reason: agentdv1.CompactionReason_COMPACTION_REASON_THRESHOLD, TokensBefore: 1234}}}),
		"compaction_end": ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_CompactionEnd{CompactionEnd: &agentdv1.CompactionEnd{
			Reason: agentdv1.CompactionReason_COMPACTION_REASON_OVERFLOW, TokensBefore: 1234, TokensAfter: 99, EntryId: "e9", FirstKeptEntryId: "e4",
			SummarizedMessages: 3, Summary: &agentdv1.CompactionSummary{Summary: "s", FirstKeptEntryId: "e4", ReadFiles: []string{"a.go"}}}}}),
		"context_requested": ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_ContextRequested{ContextRequested: &agentdv1.ContextRequested{
			RequestId: "r-ctx-1", TotalTokens: 10, Items: []*agentdv1.ContextItem{{EntryId: "e1", Kind: agentdv1.MessageKind_MESSAGE_KIND_USER, Tokens: 10}}}}}),
		"queue_update": ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_QueueUpdate{QueueUpdate: &agentdv1.QueueUpdate{
			Steering: []*agentdv1.AgentMessage{msgs["user"]}, FollowUp: []*agentdv1.AgentMessage{msgs["custom"]}}}}),
		"error": ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_Error{Error: &agentdv1.AgentError{
			Message: "transform failed", Stage: "transform_context", Fatal: false}}}),
		"hook_requested": ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_HookRequested{HookRequested: &agentdv1.HookRequested{
			RequestId: "r1-hook-2", Event: agentdv1.HookEvent_HOOK_EVENT_POST_TOOL_USE, Hook: "hooks[0]", HookIndex: 0,
			ToolCall: &agentdv1.ToolCall{Id: "call_1", Name: "bash"}, Deadline: testTime,
			ToolResult: &agentdv1.ToolResultMessage{ToolCallId: "call_1", ToolName: "bash", Content: []*agentdv1.ContentBlock{text("ok")}}}}}),
		"tool_in_doubt": ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_ToolInDoubt{ToolInDoubt: &agentdv1.ToolInDoubt{
			ToolCallId: "call_1", ToolName: "bash", RunId: "r1", IdempotencyKey: "s/r1/call_1", StartEntryId: "e9"}}}),
		"subagent": ev(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_Subagent{Subagent: &agentdv1.SubagentEvent{
			SessionId: "sub-1", RunId: "r2", Profile: "researcher", ToolCallId: "call_4",
			Event: &agentdv1.AgentEvent{SessionId: "sub-1", RunId: "r2", Seq: 1, Time: testTime, Event: &agentdv1.AgentEvent_AgentStart{AgentStart: &agentdv1.AgentStart{
				Origin: &agentdv1.SessionOrigin{SessionId: "s1", RunId: "r1", ToolCallId: "call_4", SubagentProfile: "researcher"}}}},
		}}}),
	}
}

// messageUpdateCases has one update per MessageUpdate delta kind.
func messageUpdateCases(t *testing.T) map[string]*agentdv1.MessageUpdate {
	call := agentMessageCases(t)["assistant"].GetAssistant().GetContent()[3].GetToolCall()
	return map[string]*agentdv1.MessageUpdate{
		"text_start":      {Delta: &agentdv1.MessageUpdate_TextStart{TextStart: &agentdv1.TextStart{ContentIndex: 1}}},
		"text_delta":      {Delta: &agentdv1.MessageUpdate_TextDelta{TextDelta: &agentdv1.TextDelta{ContentIndex: 1, Delta: "端口"}}},
		"text_end":        {Delta: &agentdv1.MessageUpdate_TextEnd{TextEnd: &agentdv1.TextEnd{ContentIndex: 1, TextSignature: "ts"}}},
		"thinking_start":  {Delta: &agentdv1.MessageUpdate_ThinkingStart{ThinkingStart: &agentdv1.ThinkingStart{ContentIndex: 0, Redacted: true}}},
		"thinking_delta":  {Delta: &agentdv1.MessageUpdate_ThinkingDelta{ThinkingDelta: &agentdv1.ThinkingDelta{ContentIndex: 0, Delta: "hm"}}},
		"thinking_end":    {Delta: &agentdv1.MessageUpdate_ThinkingEnd{ThinkingEnd: &agentdv1.ThinkingEnd{ContentIndex: 0, ThinkingSignature: "sig"}}},
		"tool_call_start": {Delta: &agentdv1.MessageUpdate_ToolCallStart{ToolCallStart: &agentdv1.ToolCallStart{ContentIndex: 2, Id: "call_1", Name: "read_file"}}},
		"tool_call_delta": {Delta: &agentdv1.MessageUpdate_ToolCallDelta{ToolCallDelta: &agentdv1.ToolCallDelta{ContentIndex: 2, Delta: `{"pa`}}},
		"tool_call_end":   {Delta: &agentdv1.MessageUpdate_ToolCallEnd{ToolCallEnd: &agentdv1.ToolCallEnd{ContentIndex: 2, ToolCall: call}}},
	}
}

// requireEveryOneofField fails when cases lacks a case for a field of the
// oneof, so adding a kind to the contract without a round-trip case fails.
func requireEveryOneofField[M proto.Message](t *testing.T, oneof protoreflect.OneofDescriptor, cases map[string]M) {
	t.Helper()
	fields := oneof.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		c, ok := cases[string(f.Name())]
		if !ok {
			t.Errorf("%s: no round-trip case for kind %q", oneof.FullName(), f.Name())
			continue
		}
		if got := c.ProtoReflect().WhichOneof(oneof); got == nil || got.Name() != f.Name() {
			t.Errorf("%s: case %q sets %v", oneof.FullName(), f.Name(), got)
		}
	}
	if len(cases) != fields.Len() {
		t.Errorf("%s: %d cases for %d kinds", oneof.FullName(), len(cases), fields.Len())
	}
}

func roundTrip[M proto.Message](t *testing.T, name string, m M) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		bin, err := proto.Marshal(m)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		fromBin := m.ProtoReflect().Type().New().Interface()
		if err := proto.Unmarshal(bin, fromBin); err != nil {
			t.Fatalf("unmarshal: %v", err)
		}
		if !proto.Equal(m, fromBin) {
			t.Errorf("binary round trip changed the message:\n got %v\nwant %v", fromBin, m)
		}
		js, err := protojson.Marshal(m)
		if err != nil {
			t.Fatalf("protojson marshal: %v", err)
		}
		fromJSON := m.ProtoReflect().Type().New().Interface()
		if err := protojson.Unmarshal(js, fromJSON); err != nil {
			t.Fatalf("protojson unmarshal of %s: %v", js, err)
		}
		if !proto.Equal(m, fromJSON) {
			t.Errorf("protojson round trip changed the message:\n got %v\nwant %v\njson %s", fromJSON, m, js)
		}
	})
}

func TestEveryAgentMessageKindRoundTrips(t *testing.T) {
	cases := agentMessageCases(t)
	requireEveryOneofField(t, (&agentdv1.AgentMessage{}).ProtoReflect().Descriptor().Oneofs().ByName("kind"), cases)
	for name, m := range cases {
		roundTrip(t, name, m)
		entry := &agentdv1.Entry{Id: "e2", ParentId: "e1", Time: testTime, RunId: "r1", Payload: &agentdv1.Entry_Message{Message: m}}
		roundTrip(t, "entry/"+name, entry)
	}
}

func TestEveryAgentEventKindRoundTrips(t *testing.T) {
	cases := agentEventCases(t)
	requireEveryOneofField(t, (&agentdv1.AgentEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event"), cases)
	for name, e := range cases {
		roundTrip(t, name, e)
	}
	updates := messageUpdateCases(t)
	requireEveryOneofField(t, (&agentdv1.MessageUpdate{}).ProtoReflect().Descriptor().Oneofs().ByName("delta"), updates)
	for name, u := range updates {
		roundTrip(t, "message_update/"+name, &agentdv1.AgentEvent{SessionId: "s", RunId: "r", Seq: 7, Time: testTime,
			Event: &agentdv1.AgentEvent_MessageUpdate{MessageUpdate: u}})
	}
}

func TestEntryPayloadKindsRoundTrip(t *testing.T) {
	cases := map[string]*agentdv1.Entry{
		"message": {Id: "a", Payload: &agentdv1.Entry_Message{Message: agentMessageCases(t)["user"]}},
		"model_change": {Id: "b", ParentId: "a", Time: testTime,
			Payload: &agentdv1.Entry_ModelChange{ModelChange: &agentdv1.ModelChange{Provider: "openai", ModelId: "gpt-x"}}},
		"thinking_level_change": {Id: "c", ParentId: "b",
			Payload: &agentdv1.Entry_ThinkingLevelChange{ThinkingLevelChange: &agentdv1.ThinkingLevelChange{ThinkingLevel: agentdv1.ThinkingLevel_THINKING_LEVEL_HIGH}}},
		"label": {Id: "d", ParentId: "c", Payload: &agentdv1.Entry_Label{Label: &agentdv1.Label{TargetEntryId: "a", Label: "start"}}},
		"mcp_tools": {Id: "e", ParentId: "d", RunId: "r", Payload: &agentdv1.Entry_McpTools{McpTools: &agentdv1.McpToolsSnapshot{Server: "fs", Tools: []*agentdv1.McpTool{{
			Name: "read_text_file", Title: "Read", Description: "Reads a file.", ReadOnlyHint: true,
			InputSchema: mustStruct(t, map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}})}}}}},
		"redaction_notice": {Id: "f", ParentId: "e", Time: testTime, Payload: &agentdv1.Entry_RedactionNotice{RedactionNotice: &agentdv1.RedactionNotice{
			EntryIds: []string{"a", "b"}, RedactedBy: "support", Reason: "asked to be forgotten", Tenant: "acme"}}},
		"approval_rule": {Id: "g", ParentId: "f", Time: testTime, Payload: &agentdv1.Entry_ApprovalRule{ApprovalRule: &agentdv1.ApprovalRule{
			Id: "g", ToolName: "bash", CommandPrefix: "git status", Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED,
			CreatedBy: "ops", Created: testTime}}},
		"approval_rule_removal": {Id: "h", ParentId: "g", Time: testTime, Payload: &agentdv1.Entry_ApprovalRuleRemoval{
			ApprovalRuleRemoval: &agentdv1.ApprovalRuleRemoval{RuleId: "g", Tenant: "acme"}}},
		"tool_call_started": {Id: "i", ParentId: "h", Time: testTime, RunId: "r1", Payload: &agentdv1.Entry_ToolCallStarted{
			ToolCallStarted: &agentdv1.ToolCallStarted{ToolCallId: "call_1", ToolName: "bash", IdempotencyKey: "s/r1/call_1"}}},
		"tool_in_doubt": {Id: "j", ParentId: "i", Time: testTime, Payload: &agentdv1.Entry_ToolInDoubt{
			ToolInDoubt: &agentdv1.ToolInDoubt{ToolCallId: "call_1", ToolName: "bash", RunId: "r1", StartEntryId: "i"}}},
	}
	cases["message"].Redaction = &agentdv1.Redaction{Time: testTime, RedactedBy: "support", Reason: "asked to be forgotten"}
	requireEveryOneofField(t, (&agentdv1.Entry{}).ProtoReflect().Descriptor().Oneofs().ByName("payload"), cases)
	for name, e := range cases {
		roundTrip(t, name, e)
	}
}
