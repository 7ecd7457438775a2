// Package contextview builds one model call's view of a transcript: the
// path from the root to the leaf as the latest compaction left it, as
// items that remember the entry each message came from, and estimates
// their size in tokens the way pi does (about four characters per token).
//
// Nothing here changes a transcript: a view is a new slice that shares the
// stored messages, which callers treat as read-only.
package contextview

import (
	"strconv"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/provider"
)

// Item is one message of a view with the id of the entry that holds it.
// A message a policy rewrote keeps its entry's id.
type Item struct {
	EntryID string
	Message *agentdv1.AgentMessage
	// tokens caches Tokens(Message) when it is known: 0 means not known,
	// -1 known to be 0.
	tokens int64
	// BeforeSummary is true for the messages kept verbatim from before the
	// latest compaction summary: their reported usage describes a context
	// that no longer exists, so estimates do not trust it.
	BeforeSummary bool
}

// NewItem returns the item of a message.
func NewItem(entryID string, m *agentdv1.AgentMessage) Item {
	return Item{EntryID: entryID, Message: m}
}

// Rewritten returns it with its message replaced by m, whose estimate is
// tokens.
func (it Item) Rewritten(m *agentdv1.AgentMessage, tokens int64) Item {
	it.Message, it.tokens = m, tokens
	if tokens == 0 {
		it.tokens = -1
	}
	return it
}

// Size is Tokens(it.Message). Sizes are computed when asked for: an
// estimate needs only the messages after the last answer's usage.
func (it Item) Size() int64 {
	switch {
	case it.tokens > 0:
		return it.tokens
	case it.tokens < 0:
		return 0
	}
	return Tokens(it.Message)
}

// Sizes returns every item's Size.
func Sizes(items []Item) []int64 {
	out := make([]int64, len(items))
	for i, it := range items {
		out[i] = it.Size()
	}
	return out
}

// FromPath returns the view of a transcript path, root first: without a
// compaction summary on the path, every message; with one, the latest
// summary, then the messages from its first_kept_entry_id up to the
// summary (earlier summaries among them are superseded and left out), then
// the messages after it. A first_kept_entry_id that is not an earlier
// message of the path keeps only the messages after the summary. path may
// start anywhere before the summary's first kept entry.
func FromPath(path []*agentdv1.Entry) []Item {
	latest := -1
	for i := len(path) - 1; i >= 0; i-- {
		if path[i].GetMessage().GetCompactionSummary() != nil {
			latest = i
			break
		}
	}
	if latest < 0 {
		items := make([]Item, 0, len(path))
		for _, e := range path {
			if m := e.GetMessage(); m != nil {
				items = append(items, NewItem(e.GetId(), m))
			}
		}
		return items
	}
	summary := path[latest]
	first := persistence.ContextStart(path)
	if first == latest {
		first = latest + 1
	}
	items := make([]Item, 0, len(path)-first+1)
	items = append(items, NewItem(summary.GetId(), summary.GetMessage()))
	for i := first; i < len(path); i++ {
		m := path[i].GetMessage()
		if m == nil || i == latest || (i < latest && m.GetCompactionSummary() != nil) {
			continue
		}
		it := NewItem(path[i].GetId(), m)
		it.BeforeSummary = i < latest
		items = append(items, it)
	}
	return items
}

// Messages returns the items' messages in order.
func Messages(items []Item) []*agentdv1.AgentMessage {
	out := make([]*agentdv1.AgentMessage, len(items))
	for i, it := range items {
		out[i] = it.Message
	}
	return out
}

// ImageTokens is what one image counts for in an estimate (pi counts 4800
// characters).
const ImageTokens = 1200

// Tokens estimates what a message costs in a model context: ceil(chars/4)
// of what the model sees of it (text, reasoning, tool call names and
// arguments), plus ImageTokens per image. A message the model does not see
// costs 0.
func Tokens(m *agentdv1.AgentMessage) int64 {
	switch k := m.GetKind().(type) {
	case *agentdv1.AgentMessage_User:
		return blockTokens(k.User.GetContent())
	case *agentdv1.AgentMessage_Assistant:
		return blockTokens(k.Assistant.GetContent())
	case *agentdv1.AgentMessage_ToolResult:
		return blockTokens(k.ToolResult.GetContent())
	}
	var n int64
	for _, lm := range agentloop.DefaultConvertToLLM([]*agentdv1.AgentMessage{m}) {
		n += MessageTokens(lm)
	}
	return n
}

// MessageTokens is Tokens for an LLM message.
func MessageTokens(m *agentdv1.Message) int64 {
	switch r := m.GetRole().(type) {
	case *agentdv1.Message_User:
		return blockTokens(r.User.GetContent())
	case *agentdv1.Message_Assistant:
		return blockTokens(r.Assistant.GetContent())
	case *agentdv1.Message_ToolResult:
		return blockTokens(r.ToolResult.GetContent())
	}
	return 0
}

func blockTokens(blocks []*agentdv1.ContentBlock) int64 {
	var chars, images int64
	for _, b := range blocks {
		switch x := b.GetBlock().(type) {
		case *agentdv1.ContentBlock_Text:
			chars += provider.UTF16Len(x.Text.GetText())
		case *agentdv1.ContentBlock_Thinking:
			chars += provider.UTF16Len(x.Thinking.GetThinking())
		case *agentdv1.ContentBlock_ToolCall:
			chars += provider.UTF16Len(x.ToolCall.GetName()) + argumentsLen(x.ToolCall)
		case *agentdv1.ContentBlock_Image:
			images++
		}
	}
	return (chars+3)/4 + images*ImageTokens
}

// argumentsLen is about the length of the arguments as compact JSON
// (JSON.stringify in pi), without encoding them.
func argumentsLen(tc *agentdv1.ToolCall) int64 {
	return structLen(tc.GetArguments())
}

func structLen(s *structpb.Struct) int64 {
	n := int64(2) // {}
	for k, v := range s.GetFields() {
		n += provider.UTF16Len(k) + 4 + valueLen(v) // "k": and a comma
	}
	if len(s.GetFields()) > 0 {
		n-- // no comma after the last field
	}
	return n
}

func valueLen(v *structpb.Value) int64 {
	switch x := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return provider.UTF16Len(x.StringValue) + 2
	case *structpb.Value_NumberValue:
		return int64(len(strconv.FormatFloat(x.NumberValue, 'g', -1, 64)))
	case *structpb.Value_BoolValue:
		if x.BoolValue {
			return 4
		}
		return 5
	case *structpb.Value_StructValue:
		return structLen(x.StructValue)
	case *structpb.Value_ListValue:
		n := int64(2)
		for i, e := range x.ListValue.GetValues() {
			if i > 0 {
				n++
			}
			n += valueLen(e)
		}
		return n
	}
	return 4 // null
}

// TextTokens estimates a text block: ceil(chars/4).
func TextTokens(s string) int64 { return provider.EstimateTokens(s) }

// Estimate is the size of a context in tokens, as pi's
// estimateContextTokens computes it: the usage the last trustworthy answer
// reported (input, output and cache tokens) plus an estimate of every
// message after it; with no such answer, the estimate of every message.
type Estimate struct {
	// Total is the estimated size.
	Total int64
	// FromUsage is true when Total starts from an answer's reported usage.
	FromUsage bool
}

// EstimateItems estimates a view. An answer that failed or was aborted
// reports no usable usage, and neither do answers kept from before a
// compaction summary (their usage measured the longer context).
func EstimateItems(items []Item) Estimate {
	var est Estimate
	usageAt := -1
	for i, it := range items {
		if a := it.Message.GetAssistant(); a != nil && !it.BeforeSummary && usable(a) {
			usageAt = i
		}
	}
	start := 0
	if usageAt >= 0 {
		u := items[usageAt].Message.GetAssistant().GetUsage()
		est.Total = u.GetInput() + u.GetOutput() + u.GetCacheRead() + u.GetCacheWrite()
		est.FromUsage = true
		start = usageAt + 1
	}
	for _, it := range items[start:] {
		est.Total += it.Size()
	}
	return est
}

func usable(a *agentdv1.AssistantMessage) bool {
	switch a.GetStopReason() {
	case agentdv1.StopReason_STOP_REASON_ERROR, agentdv1.StopReason_STOP_REASON_ABORTED:
		return false
	}
	u := a.GetUsage()
	return u.GetInput()+u.GetOutput()+u.GetCacheRead()+u.GetCacheWrite() > 0
}

// Builder keeps the view of a growing path for a run, whose model calls
// each need the view of a slightly longer path: appending a message costs
// O(1) and estimates its size once; appending a compaction summary
// rebuilds the view, reusing the sizes already known.
type Builder struct {
	path  []*agentdv1.Entry
	items []Item
	sizes map[*agentdv1.AgentMessage]int64
}

// NewBuilder returns a builder over path.
func NewBuilder(path []*agentdv1.Entry) *Builder {
	return NewBuilderSized(path, nil)
}

// NewBuilderSized is NewBuilder when the sizes of some of path's messages
// are known (SizesOf of an earlier builder over the same entries): they
// are not estimated again. The builder owns sizes from then on.
func NewBuilderSized(path []*agentdv1.Entry, sizes map[*agentdv1.AgentMessage]int64) *Builder {
	if sizes == nil {
		sizes = map[*agentdv1.AgentMessage]int64{}
	}
	b := &Builder{sizes: sizes}
	b.path = append(b.path, path...)
	b.rebuild()
	return b
}

// SizesOf returns, in a map of its own, the sizes the builder knows of the
// messages of path (its own path or a part of it).
func (b *Builder) SizesOf(path []*agentdv1.Entry) map[*agentdv1.AgentMessage]int64 {
	out := make(map[*agentdv1.AgentMessage]int64, len(path))
	for _, e := range path {
		if m := e.GetMessage(); m != nil {
			if n, ok := b.sizes[m]; ok {
				out[m] = n
			}
		}
	}
	return out
}

// Append adds an entry at the end of the path.
func (b *Builder) Append(e *agentdv1.Entry) {
	b.path = append(b.path, e)
	m := e.GetMessage()
	switch {
	case m == nil:
	case m.GetCompactionSummary() != nil:
		b.rebuild()
	default:
		b.items = append(b.items, b.sized(NewItem(e.GetId(), m)))
	}
}

// Path returns the entries appended so far; read-only.
func (b *Builder) Path() []*agentdv1.Entry { return b.path[:len(b.path):len(b.path)] }

// View returns the view of the path; read-only (appending to it copies).
func (b *Builder) View() []Item { return b.items[:len(b.items):len(b.items)] }

func (b *Builder) rebuild() {
	b.items = FromPath(b.path)
	for i := range b.items {
		b.items[i] = b.sized(b.items[i])
	}
}

func (b *Builder) sized(it Item) Item {
	n, ok := b.sizes[it.Message]
	if !ok {
		n = Tokens(it.Message)
		b.sizes[it.Message] = n
	}
	it.tokens = n
	if n == 0 {
		it.tokens = -1 // known to be 0
	}
	return it
}
