package persistence_test

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// TestDeltaRebuildsTheEvent checks that DeltaOf takes exactly the events
// whose facts rebuild them byte for byte.
func TestDeltaRebuildsTheEvent(t *testing.T) {
	at := timestamppb.New(time.Date(1969, 7, 20, 20, 17, 40, 5, time.UTC))
	event := func(u *agentdv1.MessageUpdate) *agentdv1.AgentEvent {
		return &agentdv1.AgentEvent{SessionId: "s", RunId: "r", Seq: 1 << 40, TraceId: []byte{1, 2}, Time: at,
			Event: &agentdv1.AgentEvent_MessageUpdate{MessageUpdate: u}}
	}
	text := func(s string) *agentdv1.AgentEvent {
		return event(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_TextDelta{TextDelta: &agentdv1.TextDelta{ContentIndex: 4, Delta: s}}})
	}
	withUnknown := text("x")
	withUnknown.GetMessageUpdate().GetTextDelta().ProtoReflect().SetUnknown([]byte{0x18, 0x01})
	unnormalized := text("x")
	unnormalized.Time = &timestamppb.Timestamp{Seconds: 1, Nanos: 1e9}
	for _, tc := range []struct {
		name string
		ev   *agentdv1.AgentEvent
		want persistence.DeltaKind // 0: not a delta
	}{
		{"text", text("port 3000, 端口"), persistence.DeltaText},
		{"empty text", text(""), persistence.DeltaText},
		{"thinking", event(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_ThinkingDelta{ThinkingDelta: &agentdv1.ThinkingDelta{Delta: "hmm"}}}), persistence.DeltaThinking},
		{"tool call", event(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_ToolCallDelta{ToolCallDelta: &agentdv1.ToolCallDelta{ContentIndex: 1, Delta: "{"}}}), persistence.DeltaToolCall},
		{"text start", event(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_TextStart{TextStart: &agentdv1.TextStart{}}}), 0},
		{"message end", &agentdv1.AgentEvent{Time: at, Event: &agentdv1.AgentEvent_MessageEnd{MessageEnd: &agentdv1.MessageEnd{}}}, 0},
		{"no time", func() *agentdv1.AgentEvent { ev := text("x"); ev.Time = nil; return ev }(), 0},
		{"unnormalized time", unnormalized, 0},
		{"unknown fields", withUnknown, 0},
		{"invalid UTF-8", text("port \xff"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := persistence.DeltaOf(tc.ev)
			if tc.want == 0 {
				if ok {
					t.Fatalf("DeltaOf took the event: %+v", d)
				}
				return
			}
			if !ok || d.Kind != tc.want {
				t.Fatalf("DeltaOf = %+v, %v; want kind %d", d, ok, tc.want)
			}
			got, err := d.Encode()
			want, werr := proto.Marshal(tc.ev)
			if err != nil || werr != nil || !bytes.Equal(got, want) {
				t.Fatalf("Encode = %x, %v; proto.Marshal = %x, %v", got, err, want, werr)
			}
		})
	}
}
