package provider

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"math/bits"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Model identifies the model a call goes to and what the loop and the
// service need to know about it. Api, Provider and ID are copied onto every
// assistant message so that replay can tell whether opaque fields may be
// sent back to the same model.
type Model struct {
	// Provider is the vendor, such as "faux", "anthropic" or "openai".
	Provider string
	// ID is the model id as the provider knows it.
	ID string
	// API is the wire protocol, such as "faux" or "anthropic-messages".
	API string
	// Name is a display name.
	Name string
	// ContextWindow is the context size in tokens.
	ContextWindow int64
	// MaxOutputTokens is the most output tokens per call.
	MaxOutputTokens int64
	// Reasoning tells whether the model accepts thinking levels.
	Reasoning bool
	// Price is the price in US dollars per million tokens.
	Price Price
	// TextOnly marks a model that accepts no images; replay replaces images
	// sent to it by a text placeholder. The zero value accepts images, so
	// models declared before this field existed keep their behaviour.
	TextOnly bool
	// StructuredOutputTool makes runs with an output schema use the
	// reserved finalizer tool even where the API has a native mode (the
	// faux model with FauxScript.structured_output_tool); see
	// [NativeStructuredOutput].
	StructuredOutputTool bool
}

// The errors a model resolver (such as provider/catalog's Registry) wraps,
// so that callers can tell a reference that can never work from one that
// needs configuration.
var (
	// ErrUnknownModel: no provider or model of that name.
	ErrUnknownModel = errors.New("unknown model")
	// ErrNotConfigured: the model is known but its provider has no API key
	// or base URL.
	ErrNotConfigured = errors.New("provider not configured")
)

// Price is a model's price per million tokens, used to fill Usage.cost.
type Price struct {
	Input, Output, CacheRead, CacheWrite float64
}

// Options are the per-call knobs the loop passes through to the provider.
type Options struct {
	// ThinkingLevel asks reasoning models to think more or less.
	ThinkingLevel agentdv1.ThinkingLevel
	// MaxTokens caps the output tokens; 0 means the model's default.
	MaxTokens int64
	// SessionID lets cache-aware providers key their prompt cache.
	SessionID string
	// Settings are the caller's sampling and tool-choice settings
	// (temperature, top_p, tool_choice, stop sequences, provider_options);
	// nil keeps the provider's defaults. Their max_output_tokens reaches
	// adapters as MaxTokens. [CheckOptions] decides beforehand whether the
	// model's API can send them.
	Settings *agentdv1.ModelSettings
	// OutputSchema, when set, asks for the answer as a JSON object valid
	// against it through the API's native structured-output mode; only
	// set when [NativeStructuredOutput] says the model has one usable
	// with the call's tools. The loop validates the answer either way.
	OutputSchema *structpb.Struct
}

// EventType tells which field of an Event is meaningful.
type EventType uint8

// The event types of the model stream protocol, in the order a well-formed
// stream produces them.
const (
	// EventStart opens the assistant message; Message holds the empty
	// message with api, provider, model and timestamp.
	EventStart EventType = iota + 1
	// EventTextStart opens a text block at ContentIndex.
	EventTextStart
	// EventTextDelta appends Delta to the text block at ContentIndex.
	EventTextDelta
	// EventTextEnd closes the text block; Signature holds its text_signature.
	EventTextEnd
	// EventThinkingStart opens a thinking block; Redacted says no text follows.
	EventThinkingStart
	// EventThinkingDelta appends Delta to the thinking block.
	EventThinkingDelta
	// EventThinkingEnd closes the thinking block; Signature holds its
	// thinking_signature.
	EventThinkingEnd
	// EventToolCallStart opens a tool call block with ToolCallID and ToolName.
	EventToolCallStart
	// EventToolCallDelta carries a raw JSON fragment of the arguments in Delta.
	EventToolCallDelta
	// EventToolCallEnd closes the block; ToolCall holds the parsed call.
	EventToolCallEnd
	// EventDone ends the stream successfully; Message is final.
	EventDone
	// EventError ends the stream with a failure; Message is final with stop
	// reason ERROR or ABORTED and error_message set.
	EventError
)

var eventTypeNames = [...]string{
	EventStart: "start", EventTextStart: "text_start", EventTextDelta: "text_delta",
	EventTextEnd: "text_end", EventThinkingStart: "thinking_start",
	EventThinkingDelta: "thinking_delta", EventThinkingEnd: "thinking_end",
	EventToolCallStart: "toolcall_start", EventToolCallDelta: "toolcall_delta",
	EventToolCallEnd: "toolcall_end", EventDone: "done", EventError: "error",
}

// String returns pi's name of the event type, for logs and test failures.
func (t EventType) String() string {
	if int(t) < len(eventTypeNames) && eventTypeNames[t] != "" {
		return eventTypeNames[t]
	}
	return "unknown"
}

// Event is one step of a model stream. It is a value type on purpose: a
// delta travels from adapter to loop without a heap allocation.
type Event struct {
	// Type says which of the fields below are set.
	Type EventType
	// ContentIndex is the block's position in AssistantMessage.content.
	ContentIndex int
	// Delta is the appended text, reasoning or JSON fragment.
	Delta string
	// Signature is the opaque provider signature delivered at a block's end.
	Signature string
	// Redacted marks a thinking block whose reasoning was withheld.
	Redacted bool
	// ToolCallID and ToolName identify a tool call at its start.
	ToolCallID, ToolName string
	// ToolCall is the complete call at EventToolCallEnd.
	ToolCall *agentdv1.ToolCall
	// Message is the message header at EventStart and the final message at
	// EventDone and EventError.
	Message *agentdv1.AssistantMessage
	// RetryAfter is, on EventError, how long the provider asked the caller
	// to wait before trying again (HTTP Retry-After); 0 when it did not say.
	RetryAfter time.Duration
}

// Stream is what a model call returns: the loop ranges over it once. A
// well-formed stream ends with exactly one EventDone or EventError; a stream
// must stop producing when yield returns false.
type Stream = iter.Seq[Event]

// StreamFunc starts one model call. It must not block before returning the
// Stream; the call itself runs while the Stream is ranged over, and honours
// ctx: a cancelled ctx ends the stream with an ABORTED message. c is what
// the model receives, already through [Replay] for model (the context
// pipeline replays once per call); adapters only translate it.
type StreamFunc func(ctx context.Context, model Model, c *agentdv1.Context, opts Options) Stream

// Collect drains a stream and returns its final message, or nil when the
// stream ended without a terminal event. Handy in tests and for callers that
// do not need the deltas.
func Collect(s Stream) *agentdv1.AssistantMessage {
	var final *agentdv1.AssistantMessage
	for ev := range s {
		if ev.Type == EventDone || ev.Type == EventError {
			final = ev.Message
			break
		}
	}
	return final
}

// ParseToolArguments turns a tool call's accumulated JSON argument text into
// the Struct stored on the ToolCall. Text that is not a JSON object yields an
// empty Struct ({}), as pi does, so a broken argument stream never leaks its
// scratch buffer into the transcript.
func ParseToolArguments(raw string) *structpb.Struct {
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil || m == nil {
		return &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		return &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	return s
}

// EstimateTokens is the faux provider's usage estimate: ceil(chars / 4),
// where chars counts UTF-16 code units like JavaScript's String.length, so
// figures match pi's faux provider.
func EstimateTokens(s string) int64 {
	return (UTF16Len(s) + 3) / 4
}

// UTF16Len counts UTF-16 code units, like JavaScript's String.length,
// from the UTF-8 bytes: one per leading byte, two for a four-byte
// sequence (estimates run over whole transcripts, so no rune decoding).
// Eight bytes are classified at once: a byte is skipped when it is a
// continuation byte (10xxxxxx) and counts twice when it leads four bytes
// (11110xxx or above).
func UTF16Len(s string) int64 {
	const high = 0x8080808080808080
	var n int64
	i := 0
	for ; i+8 <= len(s); i += 8 {
		b := s[i : i+8]
		w := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
		if w&high == 0 {
			n += 8 // ASCII, the common case
			continue
		}
		// Shifting left by k brings each byte's bit 7-k to its bit 7,
		// within the same byte.
		continuation := w &^ (w << 1) & high
		fourByteLead := w & (w << 1) & (w << 2) & (w << 3) & high
		n += int64(8 - bits.OnesCount64(continuation) + bits.OnesCount64(fourByteLead))
	}
	for ; i < len(s); i++ {
		switch b := s[i]; {
		case b < 0x80:
			n++
		case b >= 0xF0:
			n += 2
		case b >= 0xC0:
			n++
		}
	}
	return n
}

// ComputeCost fills usage.cost from the model's price per million tokens.
func ComputeCost(p Price, u *agentdv1.Usage) {
	if u == nil {
		return
	}
	c := &agentdv1.Cost{
		Input:      p.Input * float64(u.GetInput()) / 1e6,
		Output:     p.Output * float64(u.GetOutput()) / 1e6,
		CacheRead:  p.CacheRead * float64(u.GetCacheRead()) / 1e6,
		CacheWrite: p.CacheWrite * float64(u.GetCacheWrite()) / 1e6,
	}
	c.Total = c.Input + c.Output + c.CacheRead + c.CacheWrite
	u.Cost = c
}
