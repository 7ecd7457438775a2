package persistence

import (
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// DeltaKind says which kind of content block a [Delta] appends to.
type DeltaKind uint8

// The kinds of [Delta], in the order of MessageUpdate's delta fields.
const (
	DeltaText DeltaKind = iota + 1
	DeltaThinking
	DeltaToolCall
)

// maxDeltaSeconds bounds a Delta's time so that it fits int64 nanoseconds
// (years 1678 to 2262), which is how event batches store it.
const maxDeltaSeconds = 9_000_000_000

// Delta is an event that is nothing but one streamed piece of an answer:
// an AgentEvent with its run's identity, seq and time, and a
// MessageUpdate holding one text, thinking or tool call delta, nothing
// else. Nearly every event of a run is one. Its facts rebuild the event
// exactly ([Delta.Encode]), so an engine may store a batch's deltas as
// these facts, their shared identity once, rather than as encoded events
// (see [Event.Delta]).
type Delta struct {
	SessionID, RunID string
	TraceID          []byte
	Seq              uint64
	// Seconds and Nanos are the event's time, as its Timestamp holds it.
	Seconds int64
	Nanos   int32
	Kind    DeltaKind
	// ContentIndex is the block's position in the message content.
	ContentIndex uint32
	// Text is what the delta appends: text, reasoning or tool call JSON.
	Text string
}

// DeltaOf returns the facts of ev when it is a [Delta] that [Delta.Encode]
// rebuilds byte for byte: no field but those a Delta holds is set, no
// unknown fields, a normalized time, and a delta string that is valid
// UTF-8 (which proto.Marshal would refuse otherwise).
func DeltaOf(ev *agentdv1.AgentEvent) (Delta, bool) {
	u, ts := ev.GetMessageUpdate(), ev.GetTime()
	if u == nil || ts == nil || ts.Nanos < 0 || ts.Nanos >= 1e9 || ts.Seconds <= -maxDeltaSeconds || ts.Seconds >= maxDeltaSeconds ||
		len(ev.ProtoReflect().GetUnknown()) > 0 || len(u.ProtoReflect().GetUnknown()) > 0 || len(ts.ProtoReflect().GetUnknown()) > 0 {
		return Delta{}, false
	}
	d := Delta{SessionID: ev.SessionId, RunID: ev.RunId, TraceID: ev.TraceId, Seq: ev.Seq, Seconds: ts.Seconds, Nanos: ts.Nanos}
	var unknown []byte
	switch x := u.GetDelta().(type) {
	case *agentdv1.MessageUpdate_TextDelta:
		d.Kind, d.ContentIndex, d.Text, unknown = DeltaText, x.TextDelta.GetContentIndex(), x.TextDelta.GetDelta(), x.TextDelta.ProtoReflect().GetUnknown()
	case *agentdv1.MessageUpdate_ThinkingDelta:
		d.Kind, d.ContentIndex, d.Text, unknown = DeltaThinking, x.ThinkingDelta.GetContentIndex(), x.ThinkingDelta.GetDelta(), x.ThinkingDelta.ProtoReflect().GetUnknown()
	case *agentdv1.MessageUpdate_ToolCallDelta:
		d.Kind, d.ContentIndex, d.Text, unknown = DeltaToolCall, x.ToolCallDelta.GetContentIndex(), x.ToolCallDelta.GetDelta(), x.ToolCallDelta.ProtoReflect().GetUnknown()
	default:
		return Delta{}, false
	}
	if len(unknown) > 0 || !utf8.ValidString(d.Text) {
		return Delta{}, false
	}
	return d, true
}

// Event returns the event d describes.
func (d *Delta) Event() *agentdv1.AgentEvent {
	u := &agentdv1.MessageUpdate{}
	switch d.Kind {
	case DeltaText:
		u.Delta = &agentdv1.MessageUpdate_TextDelta{TextDelta: &agentdv1.TextDelta{ContentIndex: d.ContentIndex, Delta: d.Text}}
	case DeltaThinking:
		u.Delta = &agentdv1.MessageUpdate_ThinkingDelta{ThinkingDelta: &agentdv1.ThinkingDelta{ContentIndex: d.ContentIndex, Delta: d.Text}}
	case DeltaToolCall:
		u.Delta = &agentdv1.MessageUpdate_ToolCallDelta{ToolCallDelta: &agentdv1.ToolCallDelta{ContentIndex: d.ContentIndex, Delta: d.Text}}
	}
	return &agentdv1.AgentEvent{SessionId: d.SessionID, RunId: d.RunID, Seq: d.Seq, TraceId: d.TraceID,
		Time: &timestamppb.Timestamp{Seconds: d.Seconds, Nanos: d.Nanos}, Event: &agentdv1.AgentEvent_MessageUpdate{MessageUpdate: u}}
}

// Encode returns d's event encoded, with vtprotobuf's generated
// marshaller: the bytes proto.Marshal writes, at about a third of the
// cost. For an event DeltaOf accepted, they are the bytes of that event.
func (d *Delta) Encode() ([]byte, error) {
	return d.Event().MarshalVT()
}
