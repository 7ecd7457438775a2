package agent

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// RedactedText is what a redacted entry says in place of its content.
const RedactedText = "[redacted]"

// Redaction is one RedactEntries call.
type Redaction struct {
	// EntryIDs are the entries to redact.
	EntryIDs []string
	// Reason and By are recorded with each entry and in the notice.
	Reason, By string
	// Tenant is the tenant of the caller that asked, recorded in the
	// notice.
	Tenant string
}

// RedactEntries replaces the content of entries of an idle session with
// tombstones of their kinds (see tombstone) and records who, when and why
// in a RedactionNotice entry at the leaf, through the store's Redact,
// which also drops the session's event logs. It returns the tombstones as
// stored, then the notice. A session with an active run is refused with
// ErrBusy; an entry the session does not hold with ErrNotFound; a
// redaction notice is not redacted (a *FieldError).
func (a *Agent) RedactEntries(ctx context.Context, sessionID string, r Redaction) ([]*agentdv1.Entry, error) {
	release, err := a.hold(ctx, sessionID, "RedactEntries")
	if err != nil {
		return nil, err
	}
	defer release()
	record := &agentdv1.Redaction{Time: timestamppb.New(a.opts.Now()), RedactedBy: r.By, Reason: r.Reason}
	out := make([]*agentdv1.Entry, 0, len(r.EntryIDs)+1)
	for i, id := range r.EntryIDs {
		e, err := a.store.GetEntry(ctx, sessionID, id)
		if errors.Is(err, persistence.ErrNotFound) {
			return nil, refuse(agentdv1.ErrorReason_ERROR_REASON_ENTRY_NOT_FOUND, "entry %q (entry_ids[%d]) is not in session %q; GetTree lists its entries", id, i, sessionID)
		} else if err != nil {
			return nil, err
		}
		if e.GetRedactionNotice() != nil {
			return nil, invalid(fmt.Sprintf("entry_ids[%d]", i), "%q is a redaction notice, the record of a redaction; it is not redacted", id)
		}
		out = append(out, tombstone(e, record))
	}
	notice := &agentdv1.Entry{Payload: &agentdv1.Entry_RedactionNotice{RedactionNotice: &agentdv1.RedactionNotice{
		EntryIds: r.EntryIDs, RedactedBy: r.By, Reason: r.Reason, Tenant: r.Tenant}}}
	if err := a.store.Redact(ctx, sessionID, out, notice); err != nil {
		return nil, err
	}
	return append(out, notice), nil
}

// tombstone is e with its content removed and record set: every text
// RedactedText, tool call arguments, tool result and custom details,
// provider signatures, thinking and images gone; its kind, its tool calls
// (ids and names) and what pairs a tool result with its call kept, so a
// context built from it is still one a provider accepts.
func tombstone(e *agentdv1.Entry, record *agentdv1.Redaction) *agentdv1.Entry {
	out := proto.CloneOf(e)
	out.Redaction = record
	switch p := out.GetPayload().(type) {
	case *agentdv1.Entry_Message:
		redactMessage(p.Message)
	case *agentdv1.Entry_Label:
		if p.Label.GetLabel() != "" {
			p.Label.Label = RedactedText
		}
	case *agentdv1.Entry_ApprovalRule:
		// The rule keeps deciding as it did; only the words go.
		if p.ApprovalRule.GetReason() != "" {
			p.ApprovalRule.Reason = RedactedText
		}
	}
	return out
}

func redactMessage(m *agentdv1.AgentMessage) {
	text := func(s string) string {
		if s == "" {
			return ""
		}
		return RedactedText
	}
	switch k := m.GetKind().(type) {
	case *agentdv1.AgentMessage_User:
		k.User.Content = redactBlocks(k.User.GetContent())
	case *agentdv1.AgentMessage_Assistant:
		k.Assistant.Content = redactBlocks(k.Assistant.GetContent())
		k.Assistant.ErrorMessage = text(k.Assistant.GetErrorMessage())
	case *agentdv1.AgentMessage_ToolResult:
		k.ToolResult.Content = redactBlocks(k.ToolResult.GetContent())
		k.ToolResult.Details = nil
	case *agentdv1.AgentMessage_ApprovalNotice:
		k.ApprovalNotice.Reason = text(k.ApprovalNotice.GetReason())
	case *agentdv1.AgentMessage_HookNotice:
		k.HookNotice.Reason = text(k.HookNotice.GetReason())
		if len(k.HookNotice.GetContent()) > 0 {
			k.HookNotice.Content = redactBlocks(k.HookNotice.GetContent())
		}
	case *agentdv1.AgentMessage_BashExecution:
		b := k.BashExecution
		b.Command, b.Output, b.FullOutputPath = RedactedText, text(b.GetOutput()), ""
	case *agentdv1.AgentMessage_Custom:
		k.Custom.Content = redactBlocks(k.Custom.GetContent())
		k.Custom.Details = nil
	case *agentdv1.AgentMessage_BranchSummary:
		k.BranchSummary.Summary = RedactedText
	case *agentdv1.AgentMessage_CompactionSummary:
		k.CompactionSummary.Summary = RedactedText
		k.CompactionSummary.ReadFiles, k.CompactionSummary.ModifiedFiles = nil, nil
	case *agentdv1.AgentMessage_Extension:
		k.Extension.ModelContent = redactBlocks(k.Extension.GetModelContent())
		if k.Extension.GetPayload() != nil {
			k.Extension.Payload.Value = nil
		}
	}
}

// redactBlocks keeps the tool calls of blocks (without arguments or
// signatures) and puts one RedactedText where the rest was.
func redactBlocks(blocks []*agentdv1.ContentBlock) []*agentdv1.ContentBlock {
	var out []*agentdv1.ContentBlock
	said := false
	for _, b := range blocks {
		if tc := b.GetToolCall(); tc != nil {
			out = append(out, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{
				Id: tc.GetId(), Name: tc.GetName(), Arguments: &structpb.Struct{}}}})
			continue
		}
		if !said {
			out = append(out, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: RedactedText}}})
			said = true
		}
	}
	return out
}
