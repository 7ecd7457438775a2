package provider

import (
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Partial is the content of an assistant message while it streams, built
// from the stream's block events. It is the one accumulator of a streamed
// answer: the [Emitter] keeps one for the message it will finish, and the
// loop keeps one for a stream that ends without its final message, so
// both hold the same content for the same events.
//
// A tool call's JSON fragments are not accumulated: until its
// EventToolCallEnd, a call has {} arguments, so a partial-JSON scratch
// buffer never reaches a transcript.
type Partial struct {
	blocks []partialBlock
}

type partialBlock struct {
	kind      BlockKind
	text      strings.Builder
	signature string
	redacted  bool
	// id, name and thoughtSignature describe a tool call until call, the
	// complete call, arrives.
	id, name, thoughtSignature string
	call                       *agentdv1.ToolCall
}

// block returns the block at i, opening it (and any before it) as kind
// when the stream had not.
func (p *Partial) block(i int, kind BlockKind) *partialBlock {
	for len(p.blocks) <= i {
		p.blocks = append(p.blocks, partialBlock{})
	}
	b := &p.blocks[i]
	if b.kind == 0 {
		b.kind = kind
	}
	return b
}

// Add applies one block event of the stream; other events (start, done,
// error) and events with a negative index change nothing.
func (p *Partial) Add(ev Event) {
	i := ev.ContentIndex
	if i < 0 {
		return
	}
	switch ev.Type {
	case EventTextStart:
		p.block(i, BlockText)
	case EventTextDelta:
		p.block(i, BlockText).text.WriteString(ev.Delta)
	case EventTextEnd:
		p.block(i, BlockText).signature = ev.Signature
	case EventThinkingStart:
		p.block(i, BlockThinking).redacted = ev.Redacted
	case EventThinkingDelta:
		p.block(i, BlockThinking).text.WriteString(ev.Delta)
	case EventThinkingEnd:
		p.block(i, BlockThinking).signature = ev.Signature
	case EventToolCallStart:
		b := p.block(i, BlockToolCall)
		b.id, b.name = ev.ToolCallID, ev.ToolName
	case EventToolCallDelta:
		p.block(i, BlockToolCall)
	case EventToolCallEnd:
		p.block(i, BlockToolCall).call = ev.ToolCall
	}
}

// Content returns the message's content blocks as they stand.
func (p *Partial) Content() []*agentdv1.ContentBlock {
	out := make([]*agentdv1.ContentBlock, 0, len(p.blocks))
	for i := range p.blocks {
		b := &p.blocks[i]
		switch b.kind {
		case BlockText:
			out = append(out, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: b.text.String(), TextSignature: b.signature}}})
		case BlockThinking:
			out = append(out, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Thinking{Thinking: &agentdv1.ThinkingContent{Thinking: b.text.String(), ThinkingSignature: b.signature, Redacted: b.redacted}}})
		case BlockToolCall:
			call := b.call
			if call == nil {
				call = &agentdv1.ToolCall{Id: b.id, Name: b.name, Arguments: &structpb.Struct{Fields: map[string]*structpb.Value{}}, ThoughtSignature: b.thoughtSignature}
			}
			out = append(out, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: call}})
		}
	}
	return out
}
