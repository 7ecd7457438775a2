package main

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

func TestEntryLines(t *testing.T) {
	exit := int32(2)
	msg := func(m *agentdv1.AgentMessage) *agentdv1.Entry {
		return &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: m}}
	}
	tests := []struct {
		entry *agentdv1.Entry
		want  string
	}{
		{msg(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ApprovalNotice{ApprovalNotice: &agentdv1.ApprovalNotice{
			ToolName: "write_file", Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED, DecidedBy: "agentctl", Reason: "not on main"}}}),
			"[approval] denied write_file by agentctl: not on main"},
		{msg(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_HookNotice{HookNotice: &agentdv1.HookNotice{
			Hook: "guard", Event: agentdv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE, Action: agentdv1.HookAction_HOOK_ACTION_DENIED, ToolName: "bash", Reason: "no rm"}}}),
			"[hook guard, pre_tool_use] denied bash: no rm"},
		{msg(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_BashExecution{BashExecution: &agentdv1.BashExecution{Command: "make test", ExitCode: &exit, Output: "FAIL\nmore"}}}),
			"$ make test (exit 2): FAIL"},
		{msg(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Custom{Custom: &agentdv1.CustomMessage{CustomType: "job_done", Content: texts("nightly finished")}}}),
			"[job_done] nightly finished"},
		{msg(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Extension{Extension: &agentdv1.Extension{Payload: &anypb.Any{TypeUrl: "type.example.com/app.Note"}, ModelContent: texts("a note")}}}),
			"[extension type.example.com/app.Note] a note"},
		{&agentdv1.Entry{Payload: &agentdv1.Entry_ModelChange{ModelChange: &agentdv1.ModelChange{Provider: "anthropic", ModelId: "claude-sonnet-4-5"}}},
			"[model → anthropic/claude-sonnet-4-5]"},
		{&agentdv1.Entry{Payload: &agentdv1.Entry_Label{Label: &agentdv1.Label{TargetEntryId: "e1", Label: "start"}}}, `[label "start" on e1]`},
		{&agentdv1.Entry{Payload: &agentdv1.Entry_RedactionNotice{RedactionNotice: &agentdv1.RedactionNotice{EntryIds: []string{"e1", "e2"}, RedactedBy: "ops", Reason: "PII"}}},
			"[redacted e1, e2] by ops: PII"},
		{&agentdv1.Entry{Payload: &agentdv1.Entry_ToolInDoubt{ToolInDoubt: &agentdv1.ToolInDoubt{ToolCallId: "c1", ToolName: "bash"}}}, "[tool call c1 in doubt: bash]"},
	}
	for _, tt := range tests {
		if got := entryLine(tt.entry); got != tt.want {
			t.Errorf("entryLine = %q, want %q", got, tt.want)
		}
	}
}

// Every kind of entry and of agent message has a readable line: none is
// printed as raw JSON or as unknown, also kinds added later.
func TestEveryEntryKindIsReadable(t *testing.T) {
	check := func(e *agentdv1.Entry, kind protoreflect.Name) {
		if line := entryLine(e); line == "" || strings.HasPrefix(line, "{") || line == "[unknown entry]" {
			t.Errorf("entry kind %s reads %q", kind, line)
		}
	}
	payload := (&agentdv1.Entry{}).ProtoReflect().Descriptor().Oneofs().ByName("payload")
	for i := range payload.Fields().Len() {
		f := payload.Fields().Get(i)
		e := &agentdv1.Entry{}
		e.ProtoReflect().Set(f, protoreflect.ValueOfMessage(e.ProtoReflect().NewField(f).Message()))
		if f.Name() != "message" {
			check(e, f.Name())
			continue
		}
		kinds := (&agentdv1.AgentMessage{}).ProtoReflect().Descriptor().Oneofs().ByName("kind")
		for j := range kinds.Fields().Len() {
			k := kinds.Fields().Get(j)
			m := &agentdv1.AgentMessage{}
			m.ProtoReflect().Set(k, protoreflect.ValueOfMessage(m.ProtoReflect().NewField(k).Message()))
			check(&agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: m}}, k.Name())
		}
	}
}
