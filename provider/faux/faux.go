package faux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

// The faux provider's fixed names, as in pi.
const (
	ProviderName = "faux"
	API          = provider.APIFaux
	ModelID      = "faux-1"
	ModelName    = "Faux Model"
)

// EmptyQueueText is the failure of a call with no scripted response left,
// exactly as pi words it. An aborted call says [provider.AbortedMessage].
const EmptyQueueText = "No more faux responses queued"

// DefaultModel is the model agentd uses when no real provider is configured.
func DefaultModel() provider.Model {
	return provider.Model{
		Provider:        ProviderName,
		ID:              ModelID,
		API:             API,
		Name:            ModelName,
		ContextWindow:   128000,
		MaxOutputTokens: 16384,
	}
}

// Call describes one model call to a response function.
type Call struct {
	// Number is the call's position, starting at 1.
	Number int
	// Model is the model the call was made for.
	Model provider.Model
	// Options are the options the loop passed.
	Options provider.Options
}

// Response is one scripted answer: a function of the request, so a script
// can look at the context (the seed's "把它改成 8080" needs the first turn's
// tool result). A returned error becomes an ERROR assistant message with the
// error's text. The returned message is cloned before streaming, so a script
// may return the same message twice.
type Response func(ctx context.Context, c *agentdv1.Context, call Call) (*agentdv1.AssistantMessage, error)

// Reply scripts a fixed answer.
func Reply(m *agentdv1.AssistantMessage) Response {
	return func(context.Context, *agentdv1.Context, Call) (*agentdv1.AssistantMessage, error) {
		return m, nil
	}
}

// Fail scripts a provider failure before any output (for example an HTTP 529
// from a real provider).
func Fail(errorMessage string) Response {
	return func(context.Context, *agentdv1.Context, Call) (*agentdv1.AssistantMessage, error) {
		return nil, errors.New(errorMessage)
	}
}

// Text builds a text block.
func Text(s string) *agentdv1.ContentBlock {
	return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}
}

// Thinking builds a thinking block with its provider signature.
func Thinking(s, signature string) *agentdv1.ContentBlock {
	return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Thinking{Thinking: &agentdv1.ThinkingContent{Thinking: s, ThinkingSignature: signature}}}
}

// ToolCall builds a tool call block. args must be convertible by
// structpb.NewStruct; it panics otherwise, as a script error is a test bug.
func ToolCall(id, name string, args map[string]any) *agentdv1.ContentBlock {
	s, err := structpb.NewStruct(args)
	if err != nil {
		panic("faux.ToolCall: " + err.Error())
	}
	return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: id, Name: name, Arguments: s}}}
}

// Message builds an assistant answer. Its stop reason is TOOL_USE when it
// holds a tool call and STOP otherwise; use Stopped or Errored for others.
func Message(blocks ...*agentdv1.ContentBlock) *agentdv1.AssistantMessage {
	stop := agentdv1.StopReason_STOP_REASON_STOP
	for _, b := range blocks {
		if b.GetToolCall() != nil {
			stop = agentdv1.StopReason_STOP_REASON_TOOL_USE
		}
	}
	return &agentdv1.AssistantMessage{Content: blocks, StopReason: stop}
}

// Stopped builds an answer with an explicit stop reason (such as LENGTH).
func Stopped(reason agentdv1.StopReason, blocks ...*agentdv1.ContentBlock) *agentdv1.AssistantMessage {
	m := Message(blocks...)
	m.StopReason = reason
	return m
}

// Errored builds an answer that streams its blocks and then fails with
// errorMessage, like a provider whose connection broke mid-answer.
func Errored(errorMessage string, blocks ...*agentdv1.ContentBlock) *agentdv1.AssistantMessage {
	m := Message(blocks...)
	m.StopReason = agentdv1.StopReason_STOP_REASON_ERROR
	m.ErrorMessage = errorMessage
	return m
}

// Options configure a Provider.
type Options struct {
	// TokensPerSecond paces the stream; 0 streams as fast as the consumer
	// reads.
	TokensPerSecond float64
	// MinTokenSize and MaxTokenSize bound a chunk's size in tokens of four
	// characters; chunk sizes cycle through the range. Defaults 3 and 5.
	MinTokenSize, MaxTokenSize int
	// Echo answers with the text of the last user message when the queue is
	// empty, instead of failing.
	Echo bool
	// Now stamps messages; defaults to time.Now.
	Now func() time.Time
}

// Provider is a scripted model. It is safe for concurrent use; calls take
// responses from the queue in the order the calls start.
type Provider struct {
	opts Options

	mu       sync.Mutex
	queue    []Response
	calls    int
	contexts []*agentdv1.Context
}

// New returns a provider that answers with responses in order.
func New(opts Options, responses ...Response) *Provider {
	if opts.MinTokenSize <= 0 {
		opts.MinTokenSize = 3
	}
	if opts.MaxTokenSize <= 0 {
		opts.MaxTokenSize = 5
	}
	if opts.MaxTokenSize < opts.MinTokenSize {
		opts.MaxTokenSize = opts.MinTokenSize
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Provider{opts: opts, queue: append([]Response(nil), responses...)}
}

// Push appends responses to the queue.
func (p *Provider) Push(responses ...Response) {
	p.mu.Lock()
	p.queue = append(p.queue, responses...)
	p.mu.Unlock()
}

// SetResponses replaces the queue.
func (p *Provider) SetResponses(responses ...Response) {
	p.mu.Lock()
	p.queue = append([]Response(nil), responses...)
	p.mu.Unlock()
}

// Pending is the number of responses not yet used.
func (p *Provider) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

// Calls is the number of model calls so far.
func (p *Provider) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// Contexts returns the context of every call so far, in call order, so a
// test can check exactly what the model saw. The contexts share messages
// with the caller's transcript: treat them as read-only.
func (p *Provider) Contexts() []*agentdv1.Context {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*agentdv1.Context(nil), p.contexts...)
}

// Stream implements [provider.StreamFunc]. The response is taken from the
// queue when the call starts, even if the stream is never ranged over.
func (p *Provider) Stream(ctx context.Context, model provider.Model, c *agentdv1.Context, opts provider.Options) provider.Stream {
	if model.API == "" {
		model.API = API
	}
	if model.Provider == "" {
		model.Provider = ProviderName
	}
	if model.ID == "" {
		model.ID = ModelID
	}
	p.mu.Lock()
	p.calls++
	call := Call{Number: p.calls, Model: model, Options: opts}
	p.contexts = append(p.contexts, c)
	var resp Response
	if len(p.queue) > 0 {
		resp = p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
	}
	p.mu.Unlock()

	return func(yield func(provider.Event) bool) {
		s := &streamer{p: p, ctx: ctx, model: model, c: c, yield: yield}
		s.run(resp, call)
	}
}

type streamer struct {
	p     *Provider
	ctx   context.Context
	model provider.Model
	c     *agentdv1.Context
	yield func(provider.Event) bool
	// chunk cycles through the token-size range.
	chunk int
}

func (s *streamer) header() *agentdv1.AssistantMessage {
	return &agentdv1.AssistantMessage{
		Api:       s.model.API,
		Provider:  s.model.Provider,
		Model:     s.model.ID,
		Usage:     &agentdv1.Usage{Cost: &agentdv1.Cost{}},
		Timestamp: timestamppb.New(s.p.opts.Now()),
	}
}

func (s *streamer) fail(text string) {
	m := s.header()
	m.StopReason = agentdv1.StopReason_STOP_REASON_ERROR
	m.ErrorMessage = text
	s.estimateUsage(m)
	s.yield(provider.Event{Type: provider.EventError, Message: m})
}

func (s *streamer) run(resp Response, call Call) {
	if s.aborted() {
		// Abort wins over everything, an empty queue included.
		s.abort(&agentdv1.AssistantMessage{}, 0, "", false)
		return
	}
	var scripted *agentdv1.AssistantMessage
	switch {
	case resp != nil:
		m, err := safeCall(s.ctx, resp, s.c, call)
		if err != nil {
			s.fail(err.Error())
			return
		}
		if m == nil {
			s.fail("faux response returned no message")
			return
		}
		scripted = m
	case s.p.opts.Echo:
		scripted = Message(Text(lastUserText(s.c)))
	default:
		s.fail(EmptyQueueText)
		return
	}

	final := proto.Clone(scripted).(*agentdv1.AssistantMessage)
	h := s.header()
	final.Api, final.Provider, final.Model = h.Api, h.Provider, h.Model
	if final.Timestamp == nil {
		final.Timestamp = h.Timestamp
	}
	if final.StopReason == agentdv1.StopReason_STOP_REASON_UNSPECIFIED {
		final.StopReason = agentdv1.StopReason_STOP_REASON_STOP
	}
	if final.Usage == nil {
		// A response that states its usage (and cost) keeps it, so
		// scripts can exercise budgets.
		s.estimateUsage(final)
	}
	s.streamDeltas(final, h)
}

func safeCall(ctx context.Context, r Response, c *agentdv1.Context, call Call) (m *agentdv1.AssistantMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("faux response panicked: %v", p)
		}
	}()
	return r(ctx, c, call)
}

// aborted reports a cancelled context without the cost of ctx.Err's lock.
func (s *streamer) aborted() bool {
	select {
	case <-s.ctx.Done():
		return true
	default:
		return false
	}
}

// abort ends the stream with what was streamed so far: complete blocks
// before index and, when the block at index had started, its streamed part.
func (s *streamer) abort(final *agentdv1.AssistantMessage, index int, streamed string, started bool) {
	m := proto.Clone(final).(*agentdv1.AssistantMessage)
	h := s.header()
	m.Api, m.Provider, m.Model = h.Api, h.Provider, h.Model
	if m.Usage == nil {
		m.Usage = h.Usage
	}
	m.Content = m.Content[:index]
	if started && index < len(final.Content) {
		switch b := final.Content[index].Block.(type) {
		case *agentdv1.ContentBlock_Text:
			m.Content = append(m.Content, Text(streamed))
		case *agentdv1.ContentBlock_Thinking:
			m.Content = append(m.Content, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Thinking{Thinking: &agentdv1.ThinkingContent{Thinking: streamed}}})
		case *agentdv1.ContentBlock_ToolCall:
			m.Content = append(m.Content, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{
				Id: b.ToolCall.GetId(), Name: b.ToolCall.GetName(), Arguments: &structpb.Struct{Fields: map[string]*structpb.Value{}},
			}}})
		}
	}
	m.StopReason = agentdv1.StopReason_STOP_REASON_ABORTED
	m.ErrorMessage = provider.AbortedMessage
	m.Timestamp = timestamppb.New(s.p.opts.Now())
	s.yield(provider.Event{Type: provider.EventError, Message: m})
}

// pace waits for a chunk's share of TokensPerSecond; false when aborted.
func (s *streamer) pace(chunk string) bool {
	tps := s.p.opts.TokensPerSecond
	if tps > 0 {
		d := time.Duration(float64(provider.EstimateTokens(chunk)) / tps * float64(time.Second))
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-s.ctx.Done():
			return false
		case <-t.C:
		}
	}
	return !s.aborted()
}

// nextChunk cuts the next chunk of text (at least one rune, never inside a
// UTF-8 sequence).
func (s *streamer) nextChunk(text string) (chunk, rest string) {
	span := s.p.opts.MaxTokenSize - s.p.opts.MinTokenSize + 1
	tokens := s.p.opts.MinTokenSize + s.chunk%span
	s.chunk++
	runes := tokens * 4
	i := 0
	for n := 0; n < runes && i < len(text); n++ {
		_, size := utf8.DecodeRuneInString(text[i:])
		i += size
	}
	return text[:i], text[i:]
}

func (s *streamer) streamDeltas(final, header *agentdv1.AssistantMessage) {
	if s.aborted() {
		s.abort(final, 0, "", false)
		return
	}
	if !s.yield(provider.Event{Type: provider.EventStart, Message: header}) {
		return
	}
	for i, block := range final.Content {
		if s.aborted() {
			s.abort(final, i, "", false)
			return
		}
		var text string
		var startEv, deltaType, endEv provider.Event
		switch b := block.Block.(type) {
		case *agentdv1.ContentBlock_Text:
			text = b.Text.GetText()
			startEv = provider.Event{Type: provider.EventTextStart, ContentIndex: i}
			deltaType.Type = provider.EventTextDelta
			endEv = provider.Event{Type: provider.EventTextEnd, ContentIndex: i, Signature: b.Text.GetTextSignature()}
		case *agentdv1.ContentBlock_Thinking:
			text = b.Thinking.GetThinking()
			startEv = provider.Event{Type: provider.EventThinkingStart, ContentIndex: i, Redacted: b.Thinking.GetRedacted()}
			deltaType.Type = provider.EventThinkingDelta
			endEv = provider.Event{Type: provider.EventThinkingEnd, ContentIndex: i, Signature: b.Thinking.GetThinkingSignature()}
		case *agentdv1.ContentBlock_ToolCall:
			tc := b.ToolCall
			if tc.Arguments == nil {
				tc.Arguments = &structpb.Struct{Fields: map[string]*structpb.Value{}}
			}
			text = argumentsJSON(tc.Arguments)
			startEv = provider.Event{Type: provider.EventToolCallStart, ContentIndex: i, ToolCallID: tc.GetId(), ToolName: tc.GetName()}
			deltaType.Type = provider.EventToolCallDelta
			endEv = provider.Event{Type: provider.EventToolCallEnd, ContentIndex: i, ToolCall: proto.Clone(tc).(*agentdv1.ToolCall)}
		default:
			s.fail("faux response holds a block the model cannot produce")
			return
		}
		if !s.yield(startEv) {
			return
		}
		streamed := 0
		for rest := text; rest != ""; {
			var chunk string
			chunk, rest = s.nextChunk(rest)
			if !s.pace(chunk) {
				// Tool call arguments stay {} until complete, as in pi.
				s.abort(final, i, text[:streamed], true)
				return
			}
			streamed += len(chunk)
			if !s.yield(provider.Event{Type: deltaType.Type, ContentIndex: i, Delta: chunk}) {
				return
			}
		}
		if !s.yield(endEv) {
			return
		}
	}
	if provider.IsFailedAnswer(final) {
		s.yield(provider.Event{Type: provider.EventError, Message: final})
		return
	}
	s.yield(provider.Event{Type: provider.EventDone, Message: final})
}

func argumentsJSON(s *structpb.Struct) string {
	b, err := json.Marshal(s.AsMap())
	if err != nil {
		return "{}"
	}
	return string(b)
}

// estimateUsage fills usage the way pi's faux provider does: ceil(chars/4)
// of the serialized context as input and of the answer's content as output.
// The context is measured, not built: it holds the whole conversation.
func (s *streamer) estimateUsage(m *agentdv1.AssistantMessage) {
	var ctxLen, outLen utf16Counter
	writeContext(&ctxLen, s.c)
	writeAssistant(&outLen, m.GetContent())
	in, out := (int64(ctxLen)+3)/4, (int64(outLen)+3)/4
	m.Usage = &agentdv1.Usage{Input: in, Output: out, TotalTokens: in + out, Cost: &agentdv1.Cost{}}
}

func lastUserText(c *agentdv1.Context) string {
	msgs := c.GetMessages()
	for i := len(msgs) - 1; i >= 0; i-- {
		if u := msgs[i].GetUser(); u != nil {
			return contentText(u.GetContent())
		}
	}
	return ""
}

// textWriter is where the faux model's serialization of messages goes: a
// strings.Builder, or a utf16Counter that only measures it.
type textWriter interface {
	WriteString(s string) (int, error)
	WriteByte(c byte) error
}

// utf16Counter counts the UTF-16 code units written to it (provider.UTF16Len
// adds up over concatenation: it classifies each byte alone).
type utf16Counter int64

func (c *utf16Counter) WriteString(s string) (int, error) {
	*c += utf16Counter(provider.UTF16Len(s))
	return len(s), nil
}

func (c *utf16Counter) WriteByte(b byte) error {
	*c += utf16Counter(provider.UTF16Len(string(b)))
	return nil
}

func contentText(blocks []*agentdv1.ContentBlock) string {
	var b strings.Builder
	writeContent(&b, blocks)
	return b.String()
}

func writeContent(w textWriter, blocks []*agentdv1.ContentBlock) {
	for i, c := range blocks {
		if i > 0 {
			w.WriteByte('\n')
		}
		switch x := c.Block.(type) {
		case *agentdv1.ContentBlock_Text:
			w.WriteString(x.Text.GetText())
		case *agentdv1.ContentBlock_Image:
			w.WriteString("[image:" + x.Image.GetMimeType() + ":")
			w.WriteString(strconv.Itoa(len(x.Image.GetData())))
			w.WriteString("]")
		}
	}
}

func writeAssistant(w textWriter, blocks []*agentdv1.ContentBlock) {
	for i, c := range blocks {
		if i > 0 {
			w.WriteByte('\n')
		}
		switch x := c.Block.(type) {
		case *agentdv1.ContentBlock_Text:
			w.WriteString(x.Text.GetText())
		case *agentdv1.ContentBlock_Thinking:
			w.WriteString(x.Thinking.GetThinking())
		case *agentdv1.ContentBlock_ToolCall:
			w.WriteString(x.ToolCall.GetName() + ":" + argumentsJSON(orEmpty(x.ToolCall.GetArguments())))
		}
	}
}

func orEmpty(s *structpb.Struct) *structpb.Struct {
	if s == nil {
		return &structpb.Struct{}
	}
	return s
}

// writeContext writes the context as pi's faux provider serializes it for
// its estimate: the system prompt, each message with its role, then the
// tools, separated by blank lines.
func writeContext(w textWriter, c *agentdv1.Context) {
	first := true
	part := func(prefix string) {
		if !first {
			w.WriteString("\n\n")
		}
		first = false
		w.WriteString(prefix)
	}
	if c.GetSystemPrompt() != "" {
		part("system:")
		w.WriteString(c.GetSystemPrompt())
	}
	for _, m := range c.GetMessages() {
		switch r := m.Role.(type) {
		case *agentdv1.Message_User:
			part("user:")
			writeContent(w, r.User.GetContent())
		case *agentdv1.Message_Assistant:
			part("assistant:")
			writeAssistant(w, r.Assistant.GetContent())
		case *agentdv1.Message_ToolResult:
			part("toolResult:")
			w.WriteString(r.ToolResult.GetToolName())
			w.WriteByte('\n')
			writeContent(w, r.ToolResult.GetContent())
		}
	}
	if len(c.GetTools()) > 0 {
		part("tools:")
		for i, t := range c.GetTools() {
			if i > 0 {
				w.WriteByte(',')
			}
			w.WriteString(t.GetName() + ":" + t.GetDescription())
		}
	}
}
