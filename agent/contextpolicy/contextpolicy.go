// Package contextpolicy applies a session's declarative context policy
// (agentdv1.ContextPolicy) to one model call's view: the transformContext
// step of docs/ARCHITECTURE.md §4. Policies are pure: they return new slices, copy a
// message before changing it, and never change the transcript.
package contextpolicy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/agentd/agentd/agent/contextview"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// The lines the model sees in place of what a policy left out.
const (
	// ElidedToolResultText replaces an old tool result's content; the
	// arguments are the tool's name and the entry id.
	ElidedToolResultText = "[The output of tool %q (entry %s) was elided to keep the context small; call the tool again if you need it.]"
	// OmittedImageText replaces an image beyond the cap; the arguments are
	// its MIME type and the entry id.
	OmittedImageText = "[An image (%s, entry %s) was omitted to keep the context small.]"
)

// MaxRules bounds the rules of one policy.
const MaxRules = 16

// Kind returns the MessageKind of a message: the field number of its kind
// in AgentMessage.
func Kind(m *agentdv1.AgentMessage) agentdv1.MessageKind {
	fd := m.ProtoReflect().WhichOneof(kindOneof)
	if fd == nil {
		return agentdv1.MessageKind_MESSAGE_KIND_UNSPECIFIED
	}
	return agentdv1.MessageKind(fd.Number())
}

var kindOneof = (&agentdv1.AgentMessage{}).ProtoReflect().Descriptor().Oneofs().ByName(protoreflect.Name("kind"))

// Structural reports whether a kind carries the conversation's structure
// (user input, answers, tool results), which DropKindsRule may not drop.
func Structural(k agentdv1.MessageKind) bool {
	switch k {
	case agentdv1.MessageKind_MESSAGE_KIND_USER, agentdv1.MessageKind_MESSAGE_KIND_ASSISTANT, agentdv1.MessageKind_MESSAGE_KIND_TOOL_RESULT:
		return true
	}
	return false
}

// Check reports the first rule of p that cannot apply, naming its field
// below prefix (such as "config.context_policy").
func Check(prefix string, p *agentdv1.ContextPolicy) (field string, err error) {
	rules := p.GetRules()
	if len(rules) > MaxRules {
		return prefix + ".rules", fmt.Errorf("%d rules exceed the limit of %d", len(rules), MaxRules)
	}
	for i, r := range rules {
		f := fmt.Sprintf("%s.rules[%d]", prefix, i)
		switch x := r.GetRule().(type) {
		case nil:
			return f, errors.New("set one of token_budget, elide_tool_results, drop_kinds or cap_images")
		case *agentdv1.ContextRule_TokenBudget:
			if x.TokenBudget.GetMaxTokens() < 1 {
				return f + ".token_budget.max_tokens", errors.New("must be at least 1")
			}
		case *agentdv1.ContextRule_DropKinds:
			kinds := x.DropKinds.GetKinds()
			if len(kinds) == 0 {
				return f + ".drop_kinds.kinds", errors.New("name at least one kind")
			}
			for j, k := range kinds {
				kf := fmt.Sprintf("%s.drop_kinds.kinds[%d]", f, j)
				if _, known := agentdv1.MessageKind_name[int32(k)]; !known || k == agentdv1.MessageKind_MESSAGE_KIND_UNSPECIFIED {
					return kf, fmt.Errorf("%d is not a MessageKind", k)
				}
				if Structural(k) {
					return kf, fmt.Errorf("%v cannot be dropped (it would break the conversation); use token_budget or elide_tool_results", k)
				}
			}
		}
	}
	return "", nil
}

// Memo remembers the placeholders rules wrote for stored messages, which
// never change, so a run's later calls reuse them instead of writing them
// again. A nil *Memo remembers nothing. Not safe for concurrent use.
type Memo struct {
	elided map[*agentdv1.AgentMessage]contextview.Item
}

// NewMemo returns an empty memo.
func NewMemo() *Memo {
	return &Memo{elided: map[*agentdv1.AgentMessage]contextview.Item{}}
}

// lookup returns the placeholder item remembered for a message.
func (m *Memo) lookup(orig *agentdv1.AgentMessage) (contextview.Item, bool) {
	if m == nil {
		return contextview.Item{}, false
	}
	it, ok := m.elided[orig]
	return it, ok
}

// Apply applies the policy's rules in order. It never changes items or
// their messages; memo may be nil.
func Apply(p *agentdv1.ContextPolicy, items []contextview.Item, memo *Memo) ([]contextview.Item, error) {
	out := items
	for i, r := range p.GetRules() {
		switch x := r.GetRule().(type) {
		case *agentdv1.ContextRule_TokenBudget:
			out = TokenBudget(out, x.TokenBudget.GetMaxTokens(), int(x.TokenBudget.GetPinnedMessages()))
		case *agentdv1.ContextRule_ElideToolResults:
			out = ElideToolResults(out, int(x.ElideToolResults.GetKeepTurns()), memo)
		case *agentdv1.ContextRule_DropKinds:
			out = DropKinds(out, x.DropKinds.GetKinds())
		case *agentdv1.ContextRule_CapImages:
			out = CapImages(out, int(x.CapImages.GetMaxImages()))
		default:
			return items, fmt.Errorf("context_policy.rules[%d] sets no rule", i)
		}
	}
	return out, nil
}

// startsTurn reports whether a message opens a turn: anything the user side
// sends. Approval and hook notices sit between an answer and its tool
// results, so they belong to the turn they are in.
func startsTurn(m *agentdv1.AgentMessage) bool {
	switch m.GetKind().(type) {
	case *agentdv1.AgentMessage_Assistant, *agentdv1.AgentMessage_ToolResult, *agentdv1.AgentMessage_ApprovalNotice, *agentdv1.AgentMessage_HookNotice:
		return false
	}
	return true
}

// lastUser returns the index of the last user message, or len(items).
func lastUser(items []contextview.Item) int {
	for i := len(items) - 1; i >= 0; i-- {
		if items[i].Message.GetUser() != nil {
			return i
		}
	}
	return len(items)
}

// TokenBudget drops the oldest turns after the first pinned items until
// the estimate fits maxTokens. It never drops the last user message or
// anything after it, and never separates a tool call from its results.
func TokenBudget(items []contextview.Item, maxTokens int64, pinned int) []contextview.Item {
	pinned = min(pinned, len(items))
	// Tool results (and approvals) of a pinned answer are pinned with it.
	for pinned > 0 && pinned < len(items) && !startsTurn(items[pinned].Message) && items[pinned].Message.GetAssistant() == nil {
		pinned++
	}
	keepFrom := lastUser(items)
	if keepFrom < len(items) {
		// The turn of the last user message starts at it.
		for keepFrom > pinned && !startsTurn(items[keepFrom].Message) {
			keepFrom--
		}
	} else {
		keepFrom = len(items)
	}
	keepFrom = max(keepFrom, pinned)
	var total int64
	for _, it := range items {
		total += it.Size()
	}
	drop := pinned // items[pinned:drop] are dropped
	for drop < keepFrom && total > maxTokens {
		// Drop one turn: up to the next turn start.
		end := drop + 1
		for end < keepFrom && !startsTurn(items[end].Message) {
			end++
		}
		for _, it := range items[drop:end] {
			total -= it.Size()
		}
		drop = end
	}
	if drop == pinned {
		return items
	}
	out := make([]contextview.Item, 0, len(items)-(drop-pinned))
	out = append(out, items[:pinned]...)
	return append(out, items[drop:]...)
}

// ElideToolResults replaces the content of tool results in turns before
// the current one and the keepTurns turns before it with one line; memo
// may be nil.
func ElideToolResults(items []contextview.Item, keepTurns int, memo *Memo) []contextview.Item {
	// Find where the kept turns start: walk back over keepTurns+1 turn
	// starts.
	cut := len(items)
	starts := 0
	for i := len(items) - 1; i >= 0; i-- {
		if startsTurn(items[i].Message) {
			starts++
			cut = i
			if starts > keepTurns {
				break
			}
		}
	}
	if starts <= keepTurns {
		return items // fewer turns than kept
	}
	n, fresh := 0, 0
	for _, it := range items[:cut] {
		if it.Message.GetToolResult() != nil {
			n++
			if _, ok := memo.lookup(it.Message); !ok {
				fresh++
			}
		}
	}
	if n == 0 {
		return items
	}
	out := append([]contextview.Item(nil), items...)
	// One allocation for all the new placeholders: eliding is the common
	// case in a long session.
	results := make([]agentdv1.ToolResultMessage, fresh)
	msgs := make([]agentdv1.AgentMessage, fresh)
	kinds := make([]agentdv1.AgentMessage_ToolResult, fresh)
	blocks := make([]agentdv1.ContentBlock, fresh)
	texts := make([]agentdv1.ContentBlock_Text, fresh)
	contents := make([]agentdv1.TextContent, fresh)
	j := 0
	for i := range items[:cut] {
		orig := items[i].Message
		tr := orig.GetToolResult()
		if tr == nil {
			continue
		}
		if done, ok := memo.lookup(orig); ok {
			out[i] = done
			continue
		}
		contents[j].Text = ElidedToolResult(tr.GetToolName(), items[i].EntryID)
		texts[j].Text = &contents[j]
		blocks[j].Block = &texts[j]
		r := &results[j]
		r.ToolCallId, r.ToolName, r.IsError, r.Timestamp = tr.GetToolCallId(), tr.GetToolName(), tr.GetIsError(), tr.GetTimestamp()
		r.Content = []*agentdv1.ContentBlock{&blocks[j]}
		kinds[j].ToolResult = r
		msgs[j].Kind = &kinds[j]
		out[i] = items[i].Rewritten(&msgs[j], contextview.TextTokens(contents[j].Text))
		if memo != nil {
			memo.elided[orig] = out[i]
		}
		j++
	}
	return out
}

// ElidedToolResult is the line that replaces an elided tool result's
// content: ElidedToolResultText filled in (without fmt: a long session
// elides thousands per call).
func ElidedToolResult(toolName, entryID string) string {
	return elidedPrefix + strconv.Quote(toolName) + elidedMiddle + entryID + elidedSuffix
}

// The parts of ElidedToolResultText around its two verbs.
var elidedPrefix, elidedMiddle, elidedSuffix = func() (string, string, string) {
	a, rest, _ := strings.Cut(ElidedToolResultText, "%q")
	b, c, _ := strings.Cut(rest, "%s")
	return a, b, c
}()

// DropKinds leaves out every message of the given kinds; structural kinds
// are never dropped.
func DropKinds(items []contextview.Item, kinds []agentdv1.MessageKind) []contextview.Item {
	drop := map[agentdv1.MessageKind]bool{}
	for _, k := range kinds {
		if !Structural(k) {
			drop[k] = true
		}
	}
	out := make([]contextview.Item, 0, len(items))
	for _, it := range items {
		if !drop[Kind(it.Message)] {
			out = append(out, it)
		}
	}
	return out
}

// CapImages keeps the newest maxImages images and replaces older ones with
// a text placeholder.
func CapImages(items []contextview.Item, maxImages int) []contextview.Item {
	var out []contextview.Item
	seen := 0
	for i := len(items) - 1; i >= 0; i-- {
		blocks := imageBlocks(items[i].Message)
		var replaced []*agentdv1.ContentBlock
		for j := len(blocks) - 1; j >= 0; j-- {
			img := blocks[j].GetImage()
			if img == nil {
				continue
			}
			seen++
			if seen <= maxImages {
				continue
			}
			if replaced == nil {
				replaced = append([]*agentdv1.ContentBlock(nil), blocks...)
			}
			replaced[j] = textBlock(fmt.Sprintf(OmittedImageText, img.GetMimeType(), items[i].EntryID))
		}
		if replaced == nil {
			continue
		}
		if out == nil {
			out = append([]contextview.Item(nil), items...)
		}
		m := withImageBlocks(items[i].Message, replaced)
		out[i] = items[i].Rewritten(m, contextview.Tokens(m))
	}
	if out == nil {
		return items
	}
	return out
}

// imageBlocks returns the blocks of a message that may hold images.
func imageBlocks(m *agentdv1.AgentMessage) []*agentdv1.ContentBlock {
	switch k := m.GetKind().(type) {
	case *agentdv1.AgentMessage_User:
		return k.User.GetContent()
	case *agentdv1.AgentMessage_ToolResult:
		return k.ToolResult.GetContent()
	case *agentdv1.AgentMessage_Custom:
		return k.Custom.GetContent()
	case *agentdv1.AgentMessage_Extension:
		return k.Extension.GetModelContent()
	}
	return nil
}

// withImageBlocks returns a shallow copy of m with its image-bearing
// blocks replaced.
func withImageBlocks(m *agentdv1.AgentMessage, blocks []*agentdv1.ContentBlock) *agentdv1.AgentMessage {
	switch k := m.GetKind().(type) {
	case *agentdv1.AgentMessage_User:
		c := &agentdv1.UserMessage{Content: blocks, Timestamp: k.User.GetTimestamp()}
		return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: c}}
	case *agentdv1.AgentMessage_ToolResult:
		t := k.ToolResult
		c := &agentdv1.ToolResultMessage{ToolCallId: t.GetToolCallId(), ToolName: t.GetToolName(), Content: blocks,
			Details: t.GetDetails(), IsError: t.GetIsError(), Timestamp: t.GetTimestamp()}
		return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: c}}
	case *agentdv1.AgentMessage_Custom:
		x := k.Custom
		c := &agentdv1.CustomMessage{CustomType: x.GetCustomType(), Content: blocks, Details: x.GetDetails(),
			VisibleInUi: x.GetVisibleInUi(), IncludeInModelContext: x.GetIncludeInModelContext(), Timestamp: x.GetTimestamp()}
		return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Custom{Custom: c}}
	case *agentdv1.AgentMessage_Extension:
		x := k.Extension
		c := &agentdv1.Extension{Payload: x.GetPayload(), ModelContent: blocks, VisibleInUi: x.GetVisibleInUi(),
			IncludeInModelContext: x.GetIncludeInModelContext(), Timestamp: x.GetTimestamp()}
		return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Extension{Extension: c}}
	}
	return m
}

func textBlock(s string) *agentdv1.ContentBlock {
	return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}
}
