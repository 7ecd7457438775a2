// Package transcriptgen makes deterministic, realistic transcripts for the
// store's tests and benchmarks: 40% user text (~300 B), 40% assistant
// messages (~1 KB, every other one with a tool call) and 20% tool results
// (~4 KB), repeating user, assistant+tool call, tool result, assistant,
// user.
//
// By default the text is drawn uniformly from a 64-word vocabulary: cheap,
// but far more compressible than real text (DEFLATE shrinks it to ~45%,
// and its statistics are the same in every entry). WithCorpus draws it from
// real text instead, for figures that depend on what the text looks like,
// such as bytes on disk with compression.
package transcriptgen

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

var words = strings.Fields(`the a function returns error value file path read write test build module
package import context session entry store transcript message assistant user tool result call run
loop model token stream event index page sqlite proto buffer commit rollback query row column table
because when then while with without before after should would could must never always check fix`)

// Generator produces the entries of one transcript. Not safe for
// concurrent use.
type Generator struct {
	rng      *rand.Rand
	n        int
	lastCall string
	clock    time.Time
	corpus   *Corpus
}

// Corpus is real text to draw transcripts from: Prose for what users and
// the assistant write, Code for what tools return (read_file output).
// Each piece of text is a window of the corpus starting at a random line.
type Corpus struct {
	Prose string
	Code  string
}

// New returns a generator; the same seed yields the same transcript.
func New(seed uint64) *Generator {
	return &Generator{rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), clock: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// WithCorpus makes the generator draw its text from c (both fields
// non-empty) rather than from the built-in vocabulary. Returns g.
func (g *Generator) WithCorpus(c *Corpus) *Generator {
	g.corpus = c
	return g
}

// Transcript returns n entries from a generator seeded with seed.
func Transcript(seed uint64, n int) []*agentdv1.Entry {
	g := New(seed)
	out := make([]*agentdv1.Entry, n)
	for i := range out {
		out[i] = g.Next()
	}
	return out
}

// window returns about size bytes of src, starting at the beginning of a
// random line and wrapping around at its end.
func (g *Generator) window(src string, size int) string {
	start := g.rng.IntN(len(src))
	if nl := strings.IndexByte(src[start:], '\n'); nl >= 0 {
		start += nl + 1
	} else {
		start = 0
	}
	var b strings.Builder
	b.Grow(size)
	for b.Len() < size {
		n := min(size-b.Len(), len(src)-start)
		b.WriteString(src[start : start+n])
		start = (start + n) % len(src)
	}
	// Cutting by bytes may split a character; protobuf strings must be
	// valid UTF-8.
	return strings.ToValidUTF8(b.String(), "")
}

// prose is what a person or the model writes; code is what a tool reads.
func (g *Generator) prose(size int) string {
	if g.corpus != nil {
		return g.window(g.corpus.Prose, size)
	}
	return g.text(size)
}

func (g *Generator) code(size int) string {
	if g.corpus != nil {
		return g.window(g.corpus.Code, size)
	}
	return g.text(size)
}

func (g *Generator) text(size int) string {
	var b strings.Builder
	b.Grow(size + 16)
	for b.Len() < size {
		if b.Len() > 0 {
			if g.rng.IntN(12) == 0 {
				b.WriteString(".\n")
			} else {
				b.WriteByte(' ')
			}
		}
		b.WriteString(words[g.rng.IntN(len(words))])
	}
	return b.String()
}

// jitter returns size ±20%.
func (g *Generator) jitter(size int) int { return size*4/5 + g.rng.IntN(size*2/5+1) }

// Next returns the next entry without id, parent or time: the store
// assigns those. Message timestamps are set, as the loop would.
func (g *Generator) Next() *agentdv1.Entry {
	g.clock = g.clock.Add(time.Second)
	ts := timestamppb.New(g.clock)
	i := g.n
	g.n++
	var m *agentdv1.AgentMessage
	switch i % 5 {
	case 0, 4:
		m = &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{
			Content:   []*agentdv1.ContentBlock{textBlock(g.prose(g.jitter(300)))},
			Timestamp: ts,
		}}}
	case 1, 3:
		a := &agentdv1.AssistantMessage{
			Api: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-5",
			Usage:      &agentdv1.Usage{Input: int64(1000 + i), Output: int64(200 + i%300), Cost: &agentdv1.Cost{Input: 0.003, Output: 0.0045, Total: 0.0075}},
			StopReason: agentdv1.StopReason_STOP_REASON_STOP,
			ResponseId: fmt.Sprintf("msg_%016x", g.rng.Uint64()),
			Timestamp:  ts,
		}
		if i%5 == 1 {
			g.lastCall = fmt.Sprintf("toolu_%016x", g.rng.Uint64())
			args, _ := structpb.NewStruct(map[string]any{
				"path":    "/workspace/src/" + g.text(24),
				"command": g.prose(g.jitter(160)),
				"limit":   200,
			})
			a.StopReason = agentdv1.StopReason_STOP_REASON_TOOL_USE
			a.Content = []*agentdv1.ContentBlock{
				textBlock(g.prose(g.jitter(560))),
				{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: g.lastCall, Name: "read_file", Arguments: args}}},
			}
		} else {
			a.Content = []*agentdv1.ContentBlock{textBlock(g.prose(g.jitter(850)))}
		}
		m = &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: a}}
	case 2:
		details, _ := structpb.NewValue(map[string]any{"lines": 120, "truncated": false})
		m = &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: &agentdv1.ToolResultMessage{
			ToolCallId: g.lastCall, ToolName: "read_file",
			Content:   []*agentdv1.ContentBlock{textBlock(g.code(g.jitter(4000)))},
			Details:   details,
			Timestamp: ts,
		}}}
	}
	return &agentdv1.Entry{RunId: fmt.Sprintf("run-%d", i/5), Payload: &agentdv1.Entry_Message{Message: m}}
}

func textBlock(s string) *agentdv1.ContentBlock {
	return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}
}
