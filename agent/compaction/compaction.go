// Package compaction decides where a conversation is cut when it is
// compacted and writes the request that asks a model for the summary,
// following the compaction of pi's coding agent: keep about
// keepRecentTokens of the newest history verbatim, cut only where a turn
// or an answer starts (never at a tool result), summarize the rest in a
// fixed structure, updating the previous summary, with the files read and
// changed kept in a list.
package compaction

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agentd/agentd/agent/contextview"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/tools"
)

// pi's defaults.
const (
	// DefaultReserveTokens is kept free for the answer.
	DefaultReserveTokens = 16384
	// DefaultKeepRecentTokens of the newest history stay verbatim.
	DefaultKeepRecentTokens = 20000
)

// Settings are a session's compaction settings with defaults applied.
type Settings struct {
	Auto             bool
	OverflowRecovery bool
	ReserveTokens    int64
	KeepRecentTokens int64
}

// SettingsOf applies the defaults to a session's settings.
func SettingsOf(c *agentdv1.CompactionSettings) Settings {
	s := Settings{
		Auto:             !c.GetDisableAuto(),
		OverflowRecovery: !c.GetDisableOverflowRecovery(),
		ReserveTokens:    c.GetReserveTokens(),
		KeepRecentTokens: c.GetKeepRecentTokens(),
	}
	if s.ReserveTokens <= 0 {
		s.ReserveTokens = DefaultReserveTokens
	}
	if s.KeepRecentTokens <= 0 {
		s.KeepRecentTokens = DefaultKeepRecentTokens
	}
	return s
}

// Threshold is the estimate above which a call compacts first.
func (s Settings) Threshold(contextWindow int64) int64 {
	return contextWindow - s.ReserveTokens
}

// Plan is where a view is cut and what the summary replaces.
type Plan struct {
	// FirstKept is the index in the view of the first item kept verbatim;
	// FirstKeptEntryID its entry.
	FirstKept        int
	FirstKeptEntryID string
	// Summarize are the messages the summary replaces (the previous
	// summary excluded), in order.
	Summarize []*agentdv1.AgentMessage
	// PreviousSummary is the summary being updated; nil when none.
	PreviousSummary *agentdv1.CompactionSummary
	// TokensBefore estimates the view before compaction.
	TokensBefore int64
	// KeptTokens estimates the items kept verbatim.
	KeptTokens int64
}

// canCut reports whether a view may start at this message: any message but
// a tool result (it must follow its call) or an approval or hook notice
// (it may sit between a call and its result).
func canCut(m *agentdv1.AgentMessage) bool {
	switch m.GetKind().(type) {
	case *agentdv1.AgentMessage_ToolResult, *agentdv1.AgentMessage_ApprovalNotice, *agentdv1.AgentMessage_HookNotice, *agentdv1.AgentMessage_CompactionSummary:
		return false
	}
	return true
}

// Prepare plans the compaction of a view, keeping about keepRecent tokens.
// ok is false when nothing can be summarized: the view is empty, or every
// message is within the kept part and no cut point lies before it.
func Prepare(items []contextview.Item, keepRecent int64) (p Plan, ok bool) {
	est := contextview.EstimateItems(items)
	p.TokensBefore = est.Total
	start := 0
	if len(items) > 0 {
		if s := items[0].Message.GetCompactionSummary(); s != nil {
			p.PreviousSummary = s
			start = 1
		}
	}
	// Walk back from the newest message until keepRecent is reached, then
	// cut at the nearest cut point at or after that message.
	cut := -1
	var acc int64
	for i := len(items) - 1; i >= start; i-- {
		acc += items[i].Size()
		if acc >= keepRecent {
			for j := i; j < len(items); j++ {
				if canCut(items[j].Message) {
					cut = j
					break
				}
			}
			break
		}
	}
	if cut <= start {
		return p, false
	}
	p.FirstKept = cut
	p.FirstKeptEntryID = items[cut].EntryID
	for _, it := range items[start:cut] {
		p.Summarize = append(p.Summarize, it.Message)
	}
	for _, it := range items[cut:] {
		p.KeptTokens += it.Size()
	}
	return p, true
}

// SystemPrompt goes with every summarization call.
const SystemPrompt = "You summarize conversations between a user and an AI assistant that uses tools. " +
	"Read the conversation given to you and write only the structured summary asked for, in the exact format given. " +
	"Do not continue the conversation and do not answer questions asked in it."

// summaryFormat is the structure every summary follows.
const summaryFormat = `## Goal
[What the user wants to achieve; several items if the session covers several tasks.]

## Constraints & Preferences
- [Requirements and preferences the user stated, or "(none)"]

## Progress
### Done
- [x] [Finished tasks and changes]

### In Progress
- [ ] [Current work]

### Blocked
- [What prevents progress, if anything]

## Key Decisions
- **[Decision]**: [Why, briefly]

## Next Steps
1. [What should happen next, in order]

## Critical Context
- [Data, examples and references needed to go on, or "(none)"]

Keep every section short. Keep file paths, function names, values and error messages exactly as they appear.`

// newSummaryPrompt asks for a first summary.
const newSummaryPrompt = "The conversation above is to be summarized. Write a structured checkpoint summary that another model will use to continue the work.\n\nUse exactly this format:\n\n" + summaryFormat

// updateSummaryPrompt asks to fold new messages into an earlier summary.
const updateSummaryPrompt = "The conversation above holds NEW messages to merge into the earlier summary given in <previous-summary> tags.\n\n" +
	"Update that summary: keep everything it says that still holds, add the new progress, decisions and context, move finished items from \"In Progress\" to \"Done\", and revise \"Next Steps\". " +
	"Keep file paths, function names and error messages exactly.\n\nUse exactly this format:\n\n" + summaryFormat

// maxToolResultChars bounds a tool result in the serialized conversation.
const maxToolResultChars = 2000

// Request builds the summarization request for a plan: the conversation as
// text (so the model does not continue it), the earlier summary, the
// instructions.
func Request(p Plan, instructions string) *agentdv1.Context {
	var b strings.Builder
	b.WriteString("<conversation>\n")
	b.WriteString(Serialize(agentloop.DefaultConvertToLLM(p.Summarize)))
	b.WriteString("\n</conversation>\n\n")
	prompt := newSummaryPrompt
	if p.PreviousSummary != nil {
		b.WriteString("<previous-summary>\n")
		b.WriteString(p.PreviousSummary.GetSummary())
		b.WriteString("\n</previous-summary>\n\n")
		prompt = updateSummaryPrompt
	}
	b.WriteString(prompt)
	if instructions != "" {
		b.WriteString("\n\nAlso focus on: ")
		b.WriteString(instructions)
	}
	user := &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: b.String()}}}}}
	return &agentdv1.Context{SystemPrompt: SystemPrompt, Messages: []*agentdv1.Message{{Role: &agentdv1.Message_User{User: user}}}}
}

// Serialize writes LLM messages as labelled text lines: "[User]: ...",
// "[Assistant thinking]: ...", "[Assistant]: ...", "[Assistant tool
// calls]: name(args); ...", "[Tool result]: ..." (cut at 2000 characters).
func Serialize(msgs []*agentdv1.Message) string {
	var parts []string
	for _, m := range msgs {
		switch r := m.GetRole().(type) {
		case *agentdv1.Message_User:
			if t := text(r.User.GetContent()); t != "" {
				parts = append(parts, "[User]: "+t)
			}
		case *agentdv1.Message_Assistant:
			var thinking, said, calls []string
			for _, blk := range r.Assistant.GetContent() {
				switch x := blk.GetBlock().(type) {
				case *agentdv1.ContentBlock_Text:
					said = append(said, x.Text.GetText())
				case *agentdv1.ContentBlock_Thinking:
					thinking = append(thinking, x.Thinking.GetThinking())
				case *agentdv1.ContentBlock_ToolCall:
					calls = append(calls, callText(x.ToolCall))
				}
			}
			if len(thinking) > 0 {
				parts = append(parts, "[Assistant thinking]: "+strings.Join(thinking, "\n"))
			}
			if len(said) > 0 {
				parts = append(parts, "[Assistant]: "+strings.Join(said, "\n"))
			}
			if len(calls) > 0 {
				parts = append(parts, "[Assistant tool calls]: "+strings.Join(calls, "; "))
			}
		case *agentdv1.Message_ToolResult:
			t := text(r.ToolResult.GetContent())
			if n := len([]rune(t)); n > maxToolResultChars {
				t = string([]rune(t)[:maxToolResultChars]) + fmt.Sprintf("\n\n[... %d more characters cut]", n-maxToolResultChars)
			}
			if t != "" {
				parts = append(parts, "[Tool result]: "+t)
			}
		}
	}
	return strings.Join(parts, "\n\n")
}

func text(blocks []*agentdv1.ContentBlock) string {
	var parts []string
	for _, b := range blocks {
		if t := b.GetText(); t != nil {
			parts = append(parts, t.GetText())
		}
	}
	return strings.Join(parts, "")
}

func callText(tc *agentdv1.ToolCall) string {
	var args []string
	fields := tc.GetArguments().GetFields()
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v, _ := fields[k].MarshalJSON()
		args = append(args, k+"="+string(v))
	}
	return tc.GetName() + "(" + strings.Join(args, ", ") + ")"
}

// FileOps are the files a conversation read and changed.
type FileOps struct {
	Read     []string
	Modified []string
}

// Files collects the files the built-in file tools read and changed in
// msgs, added to the previous summary's lists; a file both read and
// changed is listed as changed.
func Files(prev *agentdv1.CompactionSummary, msgs []*agentdv1.AgentMessage) FileOps {
	read := map[string]bool{}
	mod := map[string]bool{}
	for _, f := range prev.GetReadFiles() {
		read[f] = true
	}
	for _, f := range prev.GetModifiedFiles() {
		mod[f] = true
	}
	for _, m := range msgs {
		for _, b := range m.GetAssistant().GetContent() {
			tc := b.GetToolCall()
			if tc == nil {
				continue
			}
			path := tc.GetArguments().GetFields()["path"].GetStringValue()
			if path == "" {
				continue
			}
			switch tc.GetName() {
			case tools.ReadFile:
				read[path] = true
			case tools.WriteFile, tools.EditFile:
				mod[path] = true
			}
		}
	}
	var ops FileOps
	for f := range read {
		if !mod[f] {
			ops.Read = append(ops.Read, f)
		}
	}
	for f := range mod {
		ops.Modified = append(ops.Modified, f)
	}
	slices.Sort(ops.Read)
	slices.Sort(ops.Modified)
	return ops
}

// WithFiles appends the file lists to a summary text, as pi does, so the
// model sees them.
func WithFiles(summary string, ops FileOps) string {
	var b strings.Builder
	b.WriteString(strings.TrimRight(summary, "\n"))
	if len(ops.Read) > 0 {
		b.WriteString("\n\n<read-files>\n" + strings.Join(ops.Read, "\n") + "\n</read-files>")
	}
	if len(ops.Modified) > 0 {
		b.WriteString("\n\n<modified-files>\n" + strings.Join(ops.Modified, "\n") + "\n</modified-files>")
	}
	return b.String()
}

// Digest is the faux model's summary when its script has none left: the
// earlier summary's digest lines and the user messages summarized, one
// line each, so tests can see what a summary covered.
func Digest(p Plan) string {
	var lines []string
	if p.PreviousSummary != nil {
		for _, l := range strings.Split(p.PreviousSummary.GetSummary(), "\n") {
			if strings.HasPrefix(l, "- user: ") {
				lines = append(lines, l)
			}
		}
	}
	for _, m := range p.Summarize {
		if u := m.GetUser(); u != nil {
			t := text(u.GetContent())
			if r := []rune(t); len(r) > 200 {
				t = string(r[:200]) + "…"
			}
			lines = append(lines, "- user: "+strings.ReplaceAll(t, "\n", " "))
		}
	}
	// Keep the digest bounded however often it is updated: the newest
	// lines matter most.
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return "## Goal\nSummary of the earlier conversation (faux digest).\n\n## Critical Context\n" + strings.Join(lines, "\n")
}
