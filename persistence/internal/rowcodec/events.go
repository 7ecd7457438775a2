package rowcodec

import (
	"fmt"
	"math"
	"slices"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// A batch's plain payload (run_events.payload, before compression) has
// one of two formats.
//
// Plain: the events' protobufs, each preceded by its length as a varint.
// The event at position i has seq first_seq + i.
//
// Compact, for batches with streamed deltas (persistence.Delta): the
// bytes 0x00 (a zero length, which no event has: every event has a seq)
// and compactVersion, then the length-delimited AgentEvent holding only
// the identity the batch's deltas share (session_id, run_id, trace_id),
// then records in seq order, each starting with a varint kind:
//
//   - recordEvent: one event, length-delimited, as it was encoded.
//   - recordDeltas: consecutive deltas of one block: the delta kind
//     (persistence.DeltaKind), the content index and the count, as
//     varints, then per delta its time as zigzag varint nanoseconds after
//     the previous delta's of the batch (the first one's after the Unix
//     epoch) and its text, length-delimited.
//
// A text delta of a few tokens takes about 20 bytes instead of about
// 110, which is what the batch compresses and the store writes; reading
// rebuilds each delta's event with persistence.Delta.Encode, the same
// bytes the run streamed.
const (
	compactVersion = 1
	recordEvent    = 1
	recordDeltas   = 2
)

// EncodeEvents is a batch's plain payload: compact when one of the events
// is a delta, plain otherwise.
func EncodeEvents(events []persistence.Event) []byte {
	return appendEvents(nil, events)
}

// EncodeEvents returns what to store for a batch of events and its
// encoding, as [Encoder.Encode] does for the batch's plain payload
// ([EncodeEvents]), which it builds in a buffer of its own. The returned
// slice is valid until the next call.
func (p *Encoder) EncodeEvents(events []persistence.Event) ([]byte, int64, error) {
	p.plain = appendEvents(p.plain[:0], events)
	return p.Encode(p.plain)
}

// appendEvents appends the plain payload of a batch to dst.
func appendEvents(dst []byte, events []persistence.Event) []byte {
	var identity *persistence.Delta
	// size is the plain format's size; compact estimates the compact
	// one's (a delta takes its time, a few bytes, and its text; a record
	// of deltas starts with three small varints), so a batch's big events
	// are copied once.
	size, compact := 0, 2+8*protowire.SizeVarint(1<<63)
	for _, ev := range events {
		if identity == nil && ev.Delta != nil {
			identity = ev.Delta
			compact += protowire.SizeBytes(len(ev.Delta.SessionID) + len(ev.Delta.RunID) + len(ev.Delta.TraceID) + 3*protowire.SizeVarint(1<<63))
		}
		size += protowire.SizeBytes(len(ev.Data))
		if ev.Delta != nil {
			compact += 4 + protowire.SizeBytes(len(ev.Delta.Text))
		} else {
			compact += 1 + protowire.SizeBytes(len(ev.Data))
		}
	}
	if identity == nil {
		payload := slices.Grow(dst, size)
		for _, ev := range events {
			payload = protowire.AppendBytes(payload, ev.Data)
		}
		return payload
	}
	shared, _ := proto.Marshal(&agentdv1.AgentEvent{SessionId: identity.SessionID, RunId: identity.RunID, TraceId: identity.TraceID})
	payload := slices.Grow(dst, compact)
	payload = append(payload, 0, compactVersion)
	payload = protowire.AppendBytes(payload, shared)
	compactable := func(ev persistence.Event) bool {
		d := ev.Delta
		return d != nil && d.SessionID == identity.SessionID && d.RunID == identity.RunID && string(d.TraceID) == string(identity.TraceID)
	}
	var prev int64
	for i := 0; i < len(events); {
		ev := events[i]
		if !compactable(ev) {
			payload = protowire.AppendVarint(payload, recordEvent)
			payload = protowire.AppendBytes(payload, ev.Data)
			i++
			continue
		}
		j := i + 1
		for j < len(events) && compactable(events[j]) && events[j].Delta.Kind == ev.Delta.Kind && events[j].Delta.ContentIndex == ev.Delta.ContentIndex {
			j++
		}
		payload = protowire.AppendVarint(payload, recordDeltas)
		payload = protowire.AppendVarint(payload, uint64(ev.Delta.Kind))
		payload = protowire.AppendVarint(payload, uint64(ev.Delta.ContentIndex))
		payload = protowire.AppendVarint(payload, uint64(j-i))
		for _, e := range events[i:j] {
			t := e.Delta.Seconds*1e9 + int64(e.Delta.Nanos)
			payload = protowire.AppendVarint(payload, protowire.EncodeZigZag(t-prev))
			payload = protowire.AppendString(payload, e.Delta.Text)
			prev = t
		}
		i = j
	}
	return payload
}

// isCompactBatch reports whether a plain payload has the compact format.
func isCompactBatch(payload []byte) bool {
	return len(payload) > 0 && payload[0] == 0
}

// compactReader reads a compact batch's fields, keeping the first error.
type compactReader struct {
	b   []byte
	err error
}

func (r *compactReader) varint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := protowire.ConsumeVarint(r.b)
	if n < 0 {
		r.err = protowire.ParseError(n)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *compactReader) bytes() []byte {
	if r.err != nil {
		return nil
	}
	v, n := protowire.ConsumeBytes(r.b)
	if n < 0 {
		r.err = protowire.ParseError(n)
		return nil
	}
	r.b = r.b[n:]
	return v
}

// appendCompactBatch is AppendBatch for a compact payload.
func appendCompactBatch(out []persistence.Event, runID string, first, last uint64, payload []byte, after uint64, limit int) ([]persistence.Event, error) {
	corrupt := func(format string, args ...any) ([]persistence.Event, error) {
		return out, &persistence.Error{Kind: persistence.ErrCorrupt, RunID: runID, Detail: fmt.Sprintf("the compact batch of events %d to %d: ", first, last) + fmt.Sprintf(format, args...)}
	}
	r := &compactReader{b: payload[1:]}
	if v := r.varint(); r.err == nil && v != compactVersion {
		return corrupt("format version %d is not known to this agentd", v)
	}
	var shared agentdv1.AgentEvent
	if raw := r.bytes(); r.err == nil {
		if err := proto.Unmarshal(raw, &shared); err != nil {
			return corrupt("identity: %v", err)
		}
	}
	seq, prev := first, int64(0)
	for r.err == nil && len(r.b) > 0 && len(out) < limit {
		switch kind := r.varint(); kind {
		case recordEvent:
			data := r.bytes()
			if r.err == nil && seq > after {
				out = append(out, persistence.Event{Seq: seq, Data: data})
			}
			seq++
		case recordDeltas:
			deltaKind, index := r.varint(), r.varint()
			if r.err == nil && (deltaKind < uint64(persistence.DeltaText) || deltaKind > uint64(persistence.DeltaToolCall) || index > math.MaxUint32) {
				return corrupt("delta kind %d at content index %d is not known to this agentd", deltaKind, index)
			}
			d := persistence.Delta{SessionID: shared.SessionId, RunID: shared.RunId, TraceID: shared.TraceId,
				Kind: persistence.DeltaKind(deltaKind), ContentIndex: uint32(index)}
			for n := r.varint(); r.err == nil && n > 0 && len(out) < limit; n-- {
				t := prev + protowire.DecodeZigZag(r.varint())
				text := r.bytes()
				prev = t
				if r.err == nil && !utf8.Valid(text) {
					return corrupt("delta %d is not valid UTF-8", seq)
				}
				if r.err != nil || seq <= after {
					seq++
					continue
				}
				d.Seq, d.Seconds, d.Nanos, d.Text = seq, t/1e9, int32(t%1e9), string(text)
				if d.Nanos < 0 {
					d.Seconds, d.Nanos = d.Seconds-1, d.Nanos+1e9
				}
				data, err := d.Encode()
				if err != nil {
					return corrupt("delta %d: %v", seq, err)
				}
				out = append(out, persistence.Event{Seq: seq, Data: data})
				seq++
			}
		default:
			if r.err == nil {
				return corrupt("unknown record kind %d", kind)
			}
		}
	}
	if r.err != nil {
		return corrupt("event %d: %v", seq, r.err)
	}
	if len(out) < limit && seq != last+1 {
		return corrupt("it holds %d events", seq-first)
	}
	return out, nil
}
