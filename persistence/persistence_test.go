package persistence_test

import (
	"errors"
	"io"
	"testing"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

func msg(m *agentdv1.AgentMessage) *agentdv1.Entry {
	return &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: m}}
}

func TestEntryKind(t *testing.T) {
	tests := []struct {
		entry   *agentdv1.Entry
		want    string
		wantErr bool
	}{
		{msg(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{}}}), "user", false},
		{msg(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: &agentdv1.AssistantMessage{}}}), "assistant", false},
		{msg(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: &agentdv1.ToolResultMessage{}}}), "tool_result", false},
		{msg(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ApprovalNotice{ApprovalNotice: &agentdv1.ApprovalNotice{}}}), "approval_notice", false},
		{msg(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_BashExecution{BashExecution: &agentdv1.BashExecution{}}}), "bash_execution", false},
		{msg(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Custom{Custom: &agentdv1.CustomMessage{}}}), "custom", false},
		{msg(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_BranchSummary{BranchSummary: &agentdv1.BranchSummary{}}}), "branch_summary", false},
		{msg(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_CompactionSummary{CompactionSummary: &agentdv1.CompactionSummary{}}}), "compaction_summary", false},
		{msg(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Extension{Extension: &agentdv1.Extension{}}}), "extension", false},
		{&agentdv1.Entry{Payload: &agentdv1.Entry_ModelChange{ModelChange: &agentdv1.ModelChange{}}}, "model_change", false},
		{&agentdv1.Entry{Payload: &agentdv1.Entry_ThinkingLevelChange{ThinkingLevelChange: &agentdv1.ThinkingLevelChange{}}}, "thinking_level_change", false},
		{&agentdv1.Entry{Payload: &agentdv1.Entry_Label{Label: &agentdv1.Label{}}}, "label", false},
		{&agentdv1.Entry{Payload: &agentdv1.Entry_McpTools{McpTools: &agentdv1.McpToolsSnapshot{}}}, "mcp_tools", false},
		{&agentdv1.Entry{Payload: &agentdv1.Entry_ToolCallStarted{ToolCallStarted: &agentdv1.ToolCallStarted{}}}, "tool_call_started", false},
		{&agentdv1.Entry{Payload: &agentdv1.Entry_ToolInDoubt{ToolInDoubt: &agentdv1.ToolInDoubt{}}}, "tool_in_doubt", false},
		{msg(&agentdv1.AgentMessage{}), "", true},
		{&agentdv1.Entry{}, "", true},
		{nil, "", true},
	}
	for _, tc := range tests {
		got, err := persistence.EntryKind(tc.entry)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("EntryKind(%v) = %q, %v; want %q, error %v", tc.entry, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestPageSize(t *testing.T) {
	tests := []struct {
		in, want int
		wantErr  bool
	}{
		{0, persistence.DefaultPageSize, false},
		{1, 1, false},
		{persistence.MaxPageSize, persistence.MaxPageSize, false},
		{persistence.MaxPageSize + 1, persistence.MaxPageSize, false},
		{-1, 0, true},
	}
	for _, tc := range tests {
		got, err := persistence.PageSize(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, persistence.ErrInvalid)) {
			t.Errorf("PageSize(%d) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		err      error
		is       error
		isNot    error
		wantText string
	}{
		{persistence.SessionNotFound("s1"), persistence.ErrNotFound, persistence.ErrInvalid, `session "s1": not found`},
		{persistence.EntryNotFound("s1", "e9"), persistence.ErrNotFound, persistence.ErrConflict, `session "s1": entry "e9": not found`},
		{persistence.RunNotFound("r2"), persistence.ErrNotFound, persistence.ErrCorrupt, `run "r2": not found`},
		{&persistence.Error{Kind: persistence.ErrConflict, SessionID: "s", Detail: "taken"}, persistence.ErrConflict, persistence.ErrNotFound, `session "s": conflict: taken`},
		{&persistence.CorruptEntryError{SessionID: "s", EntryID: "e", Seq: 4, Err: io.ErrUnexpectedEOF}, persistence.ErrCorrupt, persistence.ErrNotFound, `session "s": entry "e" (seq 4): corrupt payload: unexpected EOF`},
	}
	for _, tc := range tests {
		wrapped := errors.Join(errors.New("context"), tc.err)
		if !errors.Is(wrapped, tc.is) || errors.Is(wrapped, tc.isNot) {
			t.Errorf("%v: Is(%v) = %v, Is(%v) = %v", tc.err, tc.is, errors.Is(wrapped, tc.is), tc.isNot, errors.Is(wrapped, tc.isNot))
		}
		if tc.err.Error() != tc.wantText {
			t.Errorf("Error() = %q, want %q", tc.err.Error(), tc.wantText)
		}
	}
	ce := &persistence.CorruptEntryError{Err: io.ErrUnexpectedEOF}
	if !errors.Is(ce, io.ErrUnexpectedEOF) {
		t.Error("CorruptEntryError hides its cause")
	}
	var pe *persistence.Error
	if !errors.As(errors.Join(persistence.EntryNotFound("s", "e")), &pe) || pe.EntryID != "e" {
		t.Error("errors.As does not find *persistence.Error")
	}
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := persistence.NewID()
		if len(id) != 16 || seen[id] {
			t.Fatalf("NewID() = %q: wrong length or repeated", id)
		}
		seen[id] = true
	}
}
