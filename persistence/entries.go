package persistence

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// MaxIDLength bounds caller-chosen session, entry and run ids, so an id can
// always be echoed in an error message and indexed cheaply.
const MaxIDLength = 128

// NewID returns a fresh random id (16 hex digits). 64 random bits make a
// collision within one session practically impossible, and the unique
// constraint turns the impossible case into ErrConflict rather than damage.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24).
	return hex.EncodeToString(b[:])
}

// EntryKind names what an entry holds, as stored in the kind column so that
// tools reading the database can filter without decoding payloads: the
// AgentMessage kind ("user", "assistant", "tool_result", "approval_notice",
// "bash_execution", "custom", "branch_summary", "compaction_summary",
// "extension", "hook_notice") or the entry payload ("model_change",
// "thinking_level_change", "label", "mcp_tools", "redaction_notice",
// "approval_rule", "approval_rule_removal", "tool_call_started",
// "tool_in_doubt"). An entry without payload is invalid.
func EntryKind(e *agentdv1.Entry) (string, error) {
	switch p := e.GetPayload().(type) {
	case *agentdv1.Entry_Message:
		switch p.Message.GetKind().(type) {
		case *agentdv1.AgentMessage_User:
			return "user", nil
		case *agentdv1.AgentMessage_Assistant:
			return "assistant", nil
		case *agentdv1.AgentMessage_ToolResult:
			return "tool_result", nil
		case *agentdv1.AgentMessage_ApprovalNotice:
			return "approval_notice", nil
		case *agentdv1.AgentMessage_BashExecution:
			return "bash_execution", nil
		case *agentdv1.AgentMessage_Custom:
			return "custom", nil
		case *agentdv1.AgentMessage_BranchSummary:
			return "branch_summary", nil
		case *agentdv1.AgentMessage_CompactionSummary:
			return "compaction_summary", nil
		case *agentdv1.AgentMessage_Extension:
			return "extension", nil
		case *agentdv1.AgentMessage_HookNotice:
			return "hook_notice", nil
		default:
			return "", fmt.Errorf("message has no kind set")
		}
	case *agentdv1.Entry_ModelChange:
		return "model_change", nil
	case *agentdv1.Entry_ThinkingLevelChange:
		return "thinking_level_change", nil
	case *agentdv1.Entry_Label:
		return "label", nil
	case *agentdv1.Entry_McpTools:
		return "mcp_tools", nil
	case *agentdv1.Entry_RedactionNotice:
		return "redaction_notice", nil
	case *agentdv1.Entry_ApprovalRule:
		return "approval_rule", nil
	case *agentdv1.Entry_ApprovalRuleRemoval:
		return "approval_rule_removal", nil
	case *agentdv1.Entry_ToolCallStarted:
		return "tool_call_started", nil
	case *agentdv1.Entry_ToolInDoubt:
		return "tool_in_doubt", nil
	default:
		return "", fmt.Errorf("entry has no payload set")
	}
}

// PageSize applies DefaultPageSize and MaxPageSize to a requested size and
// refuses negative ones.
func PageSize(requested int) (int, error) {
	switch {
	case requested < 0:
		return 0, &Error{Kind: ErrInvalid, Detail: fmt.Sprintf("page size %d is negative", requested)}
	case requested == 0:
		return DefaultPageSize, nil
	case requested > MaxPageSize:
		return MaxPageSize, nil
	default:
		return requested, nil
	}
}

// DecodeEntry decodes a stored entry payload (the plain protobuf) and
// checks it against the row that held it: the payload must name the same
// entry id and hold a payload kind. Anything else is a *CorruptEntryError
// naming the session, entry and seq, because a transcript with a silent
// hole would change what the model sees.
func DecodeEntry(sessionID string, seq int64, id string, payload []byte) (*agentdv1.Entry, error) {
	e := &agentdv1.Entry{}
	if err := proto.Unmarshal(payload, e); err != nil {
		return nil, &CorruptEntryError{SessionID: sessionID, EntryID: id, Seq: seq, Err: err}
	}
	if e.GetId() != id {
		return nil, &CorruptEntryError{SessionID: sessionID, EntryID: id, Seq: seq, Err: fmt.Errorf("payload holds entry id %q", e.GetId())}
	}
	if _, err := EntryKind(e); err != nil {
		return nil, &CorruptEntryError{SessionID: sessionID, EntryID: id, Seq: seq, Err: err}
	}
	return e, nil
}

// CheckEventBatch checks that a batch of events continues a run's event
// log, stored up to lastSeq, without a gap: the error every engine's
// AppendEvents returns otherwise (ErrConflict: another writer got there
// first, or the caller lost track).
func CheckEventBatch(runID string, lastSeq uint64, events []Event) error {
	for i, ev := range events {
		if want := lastSeq + 1 + uint64(i); ev.Seq != want {
			return &Error{Kind: ErrConflict, RunID: runID,
				Detail: fmt.Sprintf("event %d of the batch has seq %d, want %d (the run's log holds seqs up to %d)", i, ev.Seq, want, lastSeq)}
		}
	}
	return nil
}

// CheckReservedEventBatch is CheckEventBatch for a run whose log is
// stored up to lastSeq and reserved up to reserved (Run.ReservedSeq): once
// the run ended, a batch may also start right after the reservation,
// leaving a gap where events streamed and were lost (see
// Store.AppendEvents).
func CheckReservedEventBatch(runID string, lastSeq, reserved uint64, ended bool, events []Event) error {
	err := CheckEventBatch(runID, lastSeq, events)
	if err != nil && ended && reserved > lastSeq && len(events) > 0 && events[0].Seq == reserved+1 {
		return CheckEventBatch(runID, reserved, events)
	}
	return err
}

// ContextStart returns where the model context of a path starts: at the
// latest compaction summary's first_kept_entry_id when that is an earlier
// entry of the path, otherwise at the latest summary itself; 0 without a
// summary. The entries before it are replaced by the summary.
func ContextStart(path []*agentdv1.Entry) int {
	for i := len(path) - 1; i >= 0; i-- {
		s := path[i].GetMessage().GetCompactionSummary()
		if s == nil {
			continue
		}
		if id := s.GetFirstKeptEntryId(); id != "" {
			for j := i - 1; j >= 0; j-- {
				if path[j].GetId() == id {
					return j
				}
			}
		}
		return i
	}
	return 0
}

// AnswerStart returns the index in a context path (path[ContextStart(path):])
// of its latest assistant message, or 0 when it holds none: where
// [Store.PathSinceAnswer] starts.
func AnswerStart(path []*agentdv1.Entry) int {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i].GetMessage().GetAssistant() != nil {
			return i
		}
	}
	return 0
}

// MaxPreviewRunes bounds a tree node's preview.
const MaxPreviewRunes = 120

// Preview is the short text GetTree shows for an entry: the start of what
// it says, on one line, at most MaxPreviewRunes characters. Engines store
// it beside the payload so a tree is listed without decoding payloads.
func Preview(e *agentdv1.Entry) string {
	var s string
	switch p := e.GetPayload().(type) {
	case *agentdv1.Entry_Message:
		s = messagePreview(p.Message)
	case *agentdv1.Entry_ModelChange:
		s = p.ModelChange.GetProvider() + "/" + p.ModelChange.GetModelId()
	case *agentdv1.Entry_ThinkingLevelChange:
		s = p.ThinkingLevelChange.GetThinkingLevel().String()
	case *agentdv1.Entry_Label:
		s = p.Label.GetLabel()
	case *agentdv1.Entry_McpTools:
		s = fmt.Sprintf("tools of MCP server %s: %d", p.McpTools.GetServer(), len(p.McpTools.GetTools()))
	case *agentdv1.Entry_RedactionNotice:
		s = fmt.Sprintf("%d entries redacted: %s", len(p.RedactionNotice.GetEntryIds()), prefix(p.RedactionNotice.GetReason()))
	case *agentdv1.Entry_ApprovalRule:
		s = rulePreview(p.ApprovalRule)
	case *agentdv1.Entry_ApprovalRuleRemoval:
		s = "approval rule " + p.ApprovalRuleRemoval.GetRuleId() + " removed"
	case *agentdv1.Entry_ToolCallStarted:
		s = "started " + p.ToolCallStarted.GetToolName() + " " + p.ToolCallStarted.GetToolCallId()
	case *agentdv1.Entry_ToolInDoubt:
		s = "in doubt: " + p.ToolInDoubt.GetToolName() + " " + p.ToolInDoubt.GetToolCallId()
	}
	return oneLine(s, MaxPreviewRunes)
}

// previewScanBytes bounds how much of one text a preview reads: a long
// answer costs no more to preview than a short one.
const previewScanBytes = 16 << 10

// prefix is at most the first previewScanBytes of s, cut at a rune's
// start.
func prefix(s string) string {
	if len(s) <= previewScanBytes {
		return s
	}
	n := previewScanBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// oneLine is s with runs of white space collapsed to single spaces and
// trimmed, cut to max runes with "…" as the last one when it is longer;
// it reads no more of s than that needs.
func oneLine(s string, max int) string {
	var b strings.Builder
	n, cut := 0, 0 // runes written; bytes of the first max-1 of them
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) {
			space = n > 0
			continue
		}
		for _, out := range [2]rune{' ', r} {
			if out == ' ' && !space {
				continue
			}
			if n == max {
				return b.String()[:cut] + "…"
			}
			if n == max-1 {
				cut = b.Len()
			}
			b.WriteRune(out)
			n++
		}
		space = false
	}
	return b.String()
}

// rulePreview is an approval rule in a few words: "allow bash: git",
// "deny write_file: secrets/*", "allow ls".
func rulePreview(r *agentdv1.ApprovalRule) string {
	verb := "allow"
	if r.GetDecision() != agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED {
		verb = "deny"
	}
	s := verb + " " + r.GetToolName()
	if p := r.GetCommandPrefix() + r.GetPathGlob(); p != "" {
		s += ": " + prefix(p)
	}
	return s
}

func messagePreview(m *agentdv1.AgentMessage) string {
	switch k := m.GetKind().(type) {
	case *agentdv1.AgentMessage_User:
		return blocksPreview(k.User.GetContent())
	case *agentdv1.AgentMessage_Assistant:
		a := k.Assistant
		if t := blocksPreview(a.GetContent()); t != "" {
			return t
		}
		return prefix(a.GetErrorMessage())
	case *agentdv1.AgentMessage_ToolResult:
		return k.ToolResult.GetToolName() + ": " + blocksPreview(k.ToolResult.GetContent())
	case *agentdv1.AgentMessage_ApprovalNotice:
		n := k.ApprovalNotice
		return n.GetToolName() + ": " + n.GetDecision().String()
	case *agentdv1.AgentMessage_BashExecution:
		return "$ " + prefix(k.BashExecution.GetCommand())
	case *agentdv1.AgentMessage_Custom:
		return k.Custom.GetCustomType() + ": " + blocksPreview(k.Custom.GetContent())
	case *agentdv1.AgentMessage_BranchSummary:
		return prefix(k.BranchSummary.GetSummary())
	case *agentdv1.AgentMessage_CompactionSummary:
		return prefix(k.CompactionSummary.GetSummary())
	case *agentdv1.AgentMessage_Extension:
		return k.Extension.GetPayload().GetTypeUrl()
	case *agentdv1.AgentMessage_HookNotice:
		n := k.HookNotice
		return n.GetHook() + ": " + n.GetAction().String()
	}
	return ""
}

// blocksPreview is the text of blocks, with tool calls as name(...) and
// images as [image].
func blocksPreview(blocks []*agentdv1.ContentBlock) string {
	var parts []string
	n := 0
	for _, b := range blocks {
		var t string
		switch x := b.GetBlock().(type) {
		case *agentdv1.ContentBlock_Text:
			t = prefix(x.Text.GetText())
		case *agentdv1.ContentBlock_ToolCall:
			t = x.ToolCall.GetName() + "(…)"
		case *agentdv1.ContentBlock_Image:
			t = "[image]"
		}
		if t == "" {
			continue
		}
		parts = append(parts, t)
		if n += len(t); n > 4*MaxPreviewRunes {
			break
		}
	}
	return strings.Join(parts, " ")
}

// Labels folds Label entries, in append order, into the current label of
// each target: the latest wins, and an empty label removes it.
func Labels(labelEntries []*agentdv1.Entry) map[string]string {
	out := map[string]string{}
	for _, e := range labelEntries {
		l := e.GetLabel()
		if l == nil {
			continue
		}
		if l.GetLabel() == "" {
			delete(out, l.GetTargetEntryId())
		} else {
			out[l.GetTargetEntryId()] = l.GetLabel()
		}
	}
	return out
}
