package agent

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// loggedEvent is ev as the log stamps it: a run's identity, seq and trace.
func loggedEvent(ev *agentdv1.AgentEvent) *agentdv1.AgentEvent {
	ev.SessionId, ev.RunId, ev.Seq, ev.TraceId = "01JBXSESSION0000000000000", "01JBXRUN000000000000000000", 70_000, bytes.Repeat([]byte{7}, 16)
	ev.Time = timestamppb.New(time.Date(2026, 12, 7, 3, 0, 0, 123456789, time.UTC))
	return ev
}

func update(u *agentdv1.MessageUpdate) *agentdv1.AgentEvent {
	return loggedEvent(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_MessageUpdate{MessageUpdate: u}})
}

// TestEncodeEventIsProtoMarshal checks that the fast path for deltas writes
// exactly what proto.Marshal writes and returns facts that rebuild it, and
// that invalid UTF-8, which the fast marshaller would let through, is
// refused as proto.Marshal refuses it.
func TestEncodeEventIsProtoMarshal(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ev      *agentdv1.AgentEvent
		wantErr bool
	}{
		{"text delta", update(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_TextDelta{TextDelta: &agentdv1.TextDelta{ContentIndex: 2, Delta: "port 3000, 端口"}}}), false},
		{"empty text delta", update(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_TextDelta{TextDelta: &agentdv1.TextDelta{}}}), false},
		{"thinking delta", update(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_ThinkingDelta{ThinkingDelta: &agentdv1.ThinkingDelta{ContentIndex: 1, Delta: "hmm"}}}), false},
		{"tool call delta", update(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_ToolCallDelta{ToolCallDelta: &agentdv1.ToolCallDelta{Delta: `{"path":`}}}), false},
		{"text start", update(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_TextStart{TextStart: &agentdv1.TextStart{ContentIndex: 3}}}), false},
		{"agent end", loggedEvent(agentEnd()), false},
		{"invalid UTF-8 in a text delta", update(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_TextDelta{TextDelta: &agentdv1.TextDelta{Delta: "port \xff3000"}}}), true},
		{"invalid UTF-8 in a tool call delta", update(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_ToolCallDelta{ToolCallDelta: &agentdv1.ToolCallDelta{Delta: "\xc3"}}}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, delta, err := new(eventEncoder).encode(tc.ev)
			want, wantErr := proto.Marshal(tc.ev)
			if tc.wantErr {
				if err == nil || wantErr == nil {
					t.Fatalf("eventEncoder error %v, proto.Marshal error %v; want both to refuse invalid UTF-8", err, wantErr)
				}
				return
			}
			if err != nil || wantErr != nil {
				t.Fatalf("eventEncoder error %v, proto.Marshal error %v", err, wantErr)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("eventEncoder wrote\n%x\nproto.Marshal\n%x", got, want)
			}
			// A delta's facts rebuild it, and only a delta has facts.
			if isDelta := tc.ev.GetMessageUpdate().GetTextDelta() != nil || tc.ev.GetMessageUpdate().GetThinkingDelta() != nil || tc.ev.GetMessageUpdate().GetToolCallDelta() != nil; isDelta != (delta.Kind != 0) {
				t.Fatalf("delta facts %+v for a delta: %v", delta, isDelta)
			}
			if delta.Kind != 0 {
				if rebuilt, err := delta.Encode(); err != nil || !bytes.Equal(rebuilt, want) {
					t.Fatalf("the delta's facts rebuild %x, %v; want %x", rebuilt, err, want)
				}
			}
		})
	}
}

// BenchmarkEncodeEvent compares encoding a logged text delta, the bulk of
// every run's events, with eventEncoder and with proto.Marshal.
func BenchmarkEncodeEvent(b *testing.B) {
	ev := update(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_TextDelta{TextDelta: &agentdv1.TextDelta{Delta: "port 3000, port "}}})
	var enc eventEncoder
	for _, bc := range []struct {
		name   string
		encode func(*agentdv1.AgentEvent) ([]byte, error)
	}{
		{"eventEncoder", func(ev *agentdv1.AgentEvent) ([]byte, error) { data, _, err := enc.encode(ev); return data, err }},
		{"proto.Marshal", func(ev *agentdv1.AgentEvent) ([]byte, error) { return proto.Marshal(ev) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.encode(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestEventEncoderSharesSlabsSafely encodes many deltas, some too long for
// a slab, and checks that each encoding is still what proto.Marshal
// writes after all the others (neighbours in a slab never overwrite each
// other, and appending to one cannot reach the next), and that the deltas
// cost far less than one allocation each.
func TestEventEncoderSharesSlabsSafely(t *testing.T) {
	var enc eventEncoder
	var events []*agentdv1.AgentEvent
	var got [][]byte
	for i := range 1000 {
		text := strings.Repeat("端口 3000 ", i%7)
		if i%97 == 0 {
			text = strings.Repeat("long ", maxSlabbedEvent)
		}
		ev := update(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_TextDelta{TextDelta: &agentdv1.TextDelta{ContentIndex: uint32(i % 3), Delta: text}}})
		ev.Seq = uint64(i + 1)
		data, _, err := enc.encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		_ = append(data, 0xff) // a caller's append must not reach a neighbour
		events, got = append(events, ev), append(got, data)
	}
	for i, ev := range events {
		want, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[i], want) {
			t.Fatalf("event %d encodes as\n%x\nafter the others, want\n%x", i+1, got[i], want)
		}
	}
	ev := update(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_TextDelta{TextDelta: &agentdv1.TextDelta{Delta: "port 3000, port "}}})
	if allocs := testing.AllocsPerRun(1000, func() { _, _, _ = enc.encode(ev) }); allocs > 0.1 {
		t.Errorf("encoding a delta allocates %.2f times on average, want one slab per many deltas", allocs)
	}
}
