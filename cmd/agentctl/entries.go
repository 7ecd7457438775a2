package main

import (
	"fmt"
	"strings"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// lowerEnum is an enum value's name without its prefix, in lower case:
// APPROVAL_DECISION_ALLOWED is "allowed".
func lowerEnum(name, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(name, prefix))
}

// noticeLine is one readable line of the agent messages that record
// something rather than converse (approval and hook decisions, shell
// commands, application messages); empty for the others.
func noticeLine(m *agentdv1.AgentMessage) string {
	switch k := m.GetKind().(type) {
	case *agentdv1.AgentMessage_ApprovalNotice:
		n := k.ApprovalNotice
		s := fmt.Sprintf("[approval] %s %s", lowerEnum(n.GetDecision().String(), "APPROVAL_DECISION_"), n.GetToolName())
		if n.GetDecidedBy() != "" {
			s += " by " + n.GetDecidedBy()
		}
		if n.GetReason() != "" {
			s += ": " + firstLine(n.GetReason(), 80)
		}
		return s
	case *agentdv1.AgentMessage_HookNotice:
		n := k.HookNotice
		s := fmt.Sprintf("[hook %s, %s] %s", n.GetHook(), lowerEnum(n.GetEvent().String(), "HOOK_EVENT_"), lowerEnum(n.GetAction().String(), "HOOK_ACTION_"))
		if n.GetToolName() != "" {
			s += " " + n.GetToolName()
		}
		if n.GetReason() != "" {
			s += ": " + firstLine(n.GetReason(), 80)
		}
		return s
	case *agentdv1.AgentMessage_BashExecution:
		b := k.BashExecution
		status := "cancelled"
		if b.ExitCode != nil {
			status = fmt.Sprintf("exit %d", b.GetExitCode())
		} else if !b.GetCancelled() {
			status = "no exit code"
		}
		return fmt.Sprintf("$ %s (%s): %s", firstLine(b.GetCommand(), 60), status, firstLine(b.GetOutput(), 60))
	case *agentdv1.AgentMessage_Custom:
		return fmt.Sprintf("[%s] %s", k.Custom.GetCustomType(), firstLine(blocksText(k.Custom.GetContent()), 100))
	case *agentdv1.AgentMessage_Extension:
		e := k.Extension
		return fmt.Sprintf("[extension %s] %s", e.GetPayload().GetTypeUrl(), firstLine(blocksText(e.GetModelContent()), 80))
	}
	return ""
}

// entryLine is one readable line of a transcript entry: its message, or
// what the entry records (a model change, a label, a rule, ...).
func entryLine(e *agentdv1.Entry) string {
	switch p := e.GetPayload().(type) {
	case *agentdv1.Entry_Message:
		return messageLine(p.Message)
	case *agentdv1.Entry_ModelChange:
		return fmt.Sprintf("[model → %s/%s]", p.ModelChange.GetProvider(), p.ModelChange.GetModelId())
	case *agentdv1.Entry_ThinkingLevelChange:
		return "[thinking → " + lowerEnum(p.ThinkingLevelChange.GetThinkingLevel().String(), "THINKING_LEVEL_") + "]"
	case *agentdv1.Entry_Label:
		if p.Label.GetLabel() == "" {
			return "[label cleared on " + p.Label.GetTargetEntryId() + "]"
		}
		return fmt.Sprintf("[label %q on %s]", p.Label.GetLabel(), p.Label.GetTargetEntryId())
	case *agentdv1.Entry_McpTools:
		return fmt.Sprintf("[MCP server %s: %d tools]", p.McpTools.GetServer(), len(p.McpTools.GetTools()))
	case *agentdv1.Entry_RedactionNotice:
		n := p.RedactionNotice
		s := fmt.Sprintf("[redacted %s]", strings.Join(n.GetEntryIds(), ", "))
		if n.GetRedactedBy() != "" {
			s += " by " + n.GetRedactedBy()
		}
		if n.GetReason() != "" {
			s += ": " + firstLine(n.GetReason(), 80)
		}
		return s
	case *agentdv1.Entry_ApprovalRule:
		return "[rule] " + ruleLine(p.ApprovalRule)
	case *agentdv1.Entry_ApprovalRuleRemoval:
		return "[rule " + p.ApprovalRuleRemoval.GetRuleId() + " removed]"
	case *agentdv1.Entry_ToolCallStarted:
		return fmt.Sprintf("[tool call %s started: %s]", p.ToolCallStarted.GetToolCallId(), p.ToolCallStarted.GetToolName())
	case *agentdv1.Entry_ToolInDoubt:
		return fmt.Sprintf("[tool call %s in doubt: %s]", p.ToolInDoubt.GetToolCallId(), p.ToolInDoubt.GetToolName())
	}
	return "[unknown entry]"
}
