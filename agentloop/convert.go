package agentloop

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// The fixed wrappers the model sees around summaries, exactly as pi's coding
// agent writes them.
const (
	CompactionSummaryPrefix = "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
	CompactionSummarySuffix = "\n</summary>"
	BranchSummaryPrefix     = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
	BranchSummarySuffix     = "</summary>"
)

// DefaultConvertToLLM is the conversion used when Config.ConvertToLLM is nil
// and the fallback when a custom one fails. It follows docs/ARCHITECTURE.md §1 and pi's
// coding agent: user, assistant and tool results pass through unchanged;
// custom kinds become user messages (keeping their timestamp) only when
// include_in_model_context is true — visible_in_ui is never consulted;
// summaries always reach the model in their fixed wrappers. It never mutates
// its input: passed-through messages are shared, not copied.
func DefaultConvertToLLM(msgs []*agentdv1.AgentMessage) []*agentdv1.Message {
	out := make([]*agentdv1.Message, 0, len(msgs))
	for _, m := range msgs {
		if lm := convertOne(m); lm != nil {
			out = append(out, lm)
		}
	}
	return out
}

func convertOne(m *agentdv1.AgentMessage) *agentdv1.Message {
	switch k := m.GetKind().(type) {
	case *agentdv1.AgentMessage_User:
		return &agentdv1.Message{Role: &agentdv1.Message_User{User: k.User}}
	case *agentdv1.AgentMessage_Assistant:
		return &agentdv1.Message{Role: &agentdv1.Message_Assistant{Assistant: k.Assistant}}
	case *agentdv1.AgentMessage_ToolResult:
		return &agentdv1.Message{Role: &agentdv1.Message_ToolResult{ToolResult: k.ToolResult}}
	case *agentdv1.AgentMessage_ApprovalNotice:
		n := k.ApprovalNotice
		if !n.GetIncludeInModelContext() {
			return nil
		}
		return userMessage([]*agentdv1.ContentBlock{textBlock(ApprovalNoticeText(n))}, n.GetTimestamp())
	case *agentdv1.AgentMessage_HookNotice:
		n := k.HookNotice
		if !n.GetIncludeInModelContext() {
			return nil
		}
		content := []*agentdv1.ContentBlock{textBlock(HookNoticeText(n))}
		if n.GetAction() == agentdv1.HookAction_HOOK_ACTION_CONTEXT_ADDED {
			// The content the hook added is what the notice is for.
			content = append(content, n.GetContent()...)
		}
		return userMessage(content, n.GetTimestamp())
	case *agentdv1.AgentMessage_BashExecution:
		b := k.BashExecution
		if !b.GetIncludeInModelContext() {
			return nil
		}
		return userMessage([]*agentdv1.ContentBlock{textBlock(BashExecutionText(b))}, b.GetTimestamp())
	case *agentdv1.AgentMessage_Custom:
		c := k.Custom
		if !c.GetIncludeInModelContext() || len(c.GetContent()) == 0 {
			return nil
		}
		return userMessage(c.GetContent(), c.GetTimestamp())
	case *agentdv1.AgentMessage_Extension:
		x := k.Extension
		if !x.GetIncludeInModelContext() || len(x.GetModelContent()) == 0 {
			return nil
		}
		return userMessage(x.GetModelContent(), x.GetTimestamp())
	case *agentdv1.AgentMessage_BranchSummary:
		s := k.BranchSummary
		return userMessage([]*agentdv1.ContentBlock{textBlock(BranchSummaryPrefix + s.GetSummary() + BranchSummarySuffix)}, s.GetTimestamp())
	case *agentdv1.AgentMessage_CompactionSummary:
		s := k.CompactionSummary
		return userMessage([]*agentdv1.ContentBlock{textBlock(CompactionSummaryPrefix + s.GetSummary() + CompactionSummarySuffix)}, s.GetTimestamp())
	}
	return nil
}

func userMessage(content []*agentdv1.ContentBlock, ts *timestamppb.Timestamp) *agentdv1.Message {
	return &agentdv1.Message{Role: &agentdv1.Message_User{User: &agentdv1.UserMessage{Content: content, Timestamp: ts}}}
}

func textBlock(s string) *agentdv1.ContentBlock {
	return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}
}

// BashExecutionText formats a user's shell command the way pi's coding agent
// shows it to the model.
func BashExecutionText(b *agentdv1.BashExecution) string {
	var sb strings.Builder
	sb.WriteString("Ran `" + b.GetCommand() + "`\n")
	if b.GetOutput() != "" {
		sb.WriteString("```\n" + b.GetOutput() + "\n```")
	} else {
		sb.WriteString("(no output)")
	}
	if b.GetCancelled() {
		sb.WriteString("\n\n(command cancelled)")
	} else if b.ExitCode != nil && b.GetExitCode() != 0 {
		fmt.Fprintf(&sb, "\n\nCommand exited with code %d", b.GetExitCode())
	}
	if b.GetTruncated() && b.GetFullOutputPath() != "" {
		sb.WriteString("\n\n[Output truncated. Full output: " + b.GetFullOutputPath() + "]")
	}
	return sb.String()
}

// ApprovalNoticeText is the short user text that tells the model how an
// approval was decided: the seed's example ("用户批准/拒绝了工具调用。") in
// English, naming the call so the model can relate it to its request.
func ApprovalNoticeText(n *agentdv1.ApprovalNotice) string {
	who := "The user"
	if n.GetDecidedBy() == "policy" {
		who = "Policy"
	}
	call := fmt.Sprintf("the tool call %s (%s)", n.GetToolName(), n.GetToolCallId())
	var s string
	switch n.GetDecision() {
	case agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED:
		s = fmt.Sprintf("%s allowed %s.", who, call)
	case agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED:
		s = fmt.Sprintf("%s denied %s.", who, call)
	case agentdv1.ApprovalDecision_APPROVAL_DECISION_TIMED_OUT:
		s = fmt.Sprintf("Nobody approved %s in time, so it did not run.", call)
	default:
		s = fmt.Sprintf("The approval of %s is undecided.", call)
	}
	if r := n.GetReason(); r != "" {
		s += " Reason: " + r
	}
	return s
}

// HookNoticeText is the short user text that tells the model what a
// lifecycle hook decided: the event, the hook, the action, the tool call
// concerned and the reason, such as `The pre_tool_use hook "policy"
// refused the tool call bash (call_1). Reason: no network`.
func HookNoticeText(n *agentdv1.HookNotice) string {
	event := strings.ToLower(strings.TrimPrefix(n.GetEvent().String(), "HOOK_EVENT_"))
	var did string
	switch n.GetAction() {
	case agentdv1.HookAction_HOOK_ACTION_DENIED:
		did = "refused"
	case agentdv1.HookAction_HOOK_ACTION_ARGUMENTS_REPLACED:
		did = "replaced the arguments of"
	case agentdv1.HookAction_HOOK_ACTION_RESULT_REPLACED:
		did = "replaced the result of"
	case agentdv1.HookAction_HOOK_ACTION_RESULT_REDACTED:
		did = "redacted the result of"
	case agentdv1.HookAction_HOOK_ACTION_CONTEXT_ADDED:
		did = "added context"
	case agentdv1.HookAction_HOOK_ACTION_CONTINUED:
		did = "continued the run"
	case agentdv1.HookAction_HOOK_ACTION_INSTRUCTIONS_SUPPLIED:
		did = "supplied the compaction's instructions"
	case agentdv1.HookAction_HOOK_ACTION_TIMED_OUT:
		did = "was not answered in time"
	default:
		did = "decided"
	}
	s := fmt.Sprintf("The %s hook %q %s", event, n.GetHook(), did)
	if n.GetToolCallId() != "" {
		if n.GetAction() == agentdv1.HookAction_HOOK_ACTION_TIMED_OUT {
			s += " about"
		}
		s += fmt.Sprintf(" the tool call %s (%s)", n.GetToolName(), n.GetToolCallId())
	}
	s += "."
	if r := n.GetReason(); r != "" {
		s += " Reason: " + r
	}
	return s
}

// cloneMessages deep-copies a transcript so that a user-supplied transform
// cannot reach the stored messages, whatever it does to its input.
func cloneMessages(msgs []*agentdv1.AgentMessage) []*agentdv1.AgentMessage {
	out := make([]*agentdv1.AgentMessage, len(msgs))
	for i, m := range msgs {
		out[i] = proto.Clone(m).(*agentdv1.AgentMessage)
	}
	return out
}
