package rowcodec_test

import (
	"bytes"
	"compress/zlib"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/internal/rowcodec"
)

func entry(id, parent, text string) *agentdv1.Entry {
	return &agentdv1.Entry{Id: id, ParentId: parent, Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{
		User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: text}}}}},
	}}}}
}

// TestEntryRoundTrip checks the encodings chosen and that what is stored
// decodes, with the standard library's zlib too (readers in other
// languages), to the same entry.
func TestEntryRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		off      bool
		text     string
		encoding int64
	}{
		{"short stays plain", false, "hello", rowcodec.EncodingProto},
		{"long compresses", false, strings.Repeat("all work and no play ", 500), rowcodec.EncodingZlib},
		{"compression off", true, strings.Repeat("all work and no play ", 500), rowcodec.EncodingProto},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := entry("e2", "e1", tc.text)
			pb, err := proto.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			enc := rowcodec.Encoder{Off: tc.off}
			stored, encoding, err := enc.Encode(pb)
			if err != nil || encoding != tc.encoding {
				t.Fatalf("Encode: encoding %d, %v; want %d", encoding, err, tc.encoding)
			}
			stored = bytes.Clone(stored)
			if encoding == rowcodec.EncodingZlib {
				zr, err := zlib.NewReader(bytes.NewReader(stored))
				if err != nil {
					t.Fatal(err)
				}
				plain, err := io.ReadAll(zr)
				if err != nil || !bytes.Equal(plain, pb) {
					t.Fatalf("the standard library inflates %d bytes (%v), want the %d of the protobuf", len(plain), err, len(pb))
				}
			}
			got, err := rowcodec.Row{Seq: 2, ID: "e2", Parent: "e1", Encoding: encoding, Payload: stored}.Decode("s")
			if err != nil || !proto.Equal(got, e) {
				t.Fatalf("DecodeEntry = %v, %v", got, err)
			}
			_, err = rowcodec.Row{Seq: 2, ID: "e2", Parent: "e0", Encoding: encoding, Payload: stored}.Decode("s")
			var ce *persistence.CorruptEntryError
			if !errors.As(err, &ce) || ce.EntryID != "e2" {
				t.Fatalf("another parent in the row: %v, want a *CorruptEntryError", err)
			}
		})
	}
	var ce *persistence.CorruptEntryError
	if _, err := (rowcodec.Row{Seq: 1, ID: "e1", Parent: "", Encoding: 7, Payload: []byte{1}}).Decode("s"); !errors.As(err, &ce) {
		t.Fatalf("unknown encoding: %v, want a *CorruptEntryError", err)
	}
	if _, err := (rowcodec.Row{Seq: 1, ID: "e1", Parent: "", Encoding: rowcodec.EncodingZlib, Payload: []byte("not zlib")}).Decode("s"); !errors.As(err, &ce) {
		t.Fatalf("broken zlib: %v, want a *CorruptEntryError", err)
	}
}

func TestBatchRoundTrip(t *testing.T) {
	var events []persistence.Event
	for seq := uint64(5); seq <= 9; seq++ {
		events = append(events, persistence.Event{Seq: seq, Data: []byte(strings.Repeat("event data ", int(seq)*100))})
	}
	var enc rowcodec.Encoder
	stored, encoding, err := enc.Encode(rowcodec.EncodeEvents(events))
	if err != nil || encoding != rowcodec.EncodingZlib {
		t.Fatalf("Encode: encoding %d, %v", encoding, err)
	}
	stored = bytes.Clone(stored)
	tests := []struct {
		after     uint64
		limit     int
		wantFirst uint64
		wantLen   int
	}{
		{0, 100, 5, 5},
		{6, 100, 7, 3},
		{4, 2, 5, 2},
		{9, 10, 0, 0},
	}
	for _, tc := range tests {
		got, err := rowcodec.AppendBatch(nil, "r", 5, 9, encoding, stored, tc.after, tc.limit)
		if err != nil || len(got) != tc.wantLen {
			t.Fatalf("AppendBatch(after %d, limit %d) = %d events, %v; want %d", tc.after, tc.limit, len(got), err, tc.wantLen)
		}
		for i, ev := range got {
			want := events[int(tc.wantFirst-5)+i]
			if ev.Seq != want.Seq || !bytes.Equal(ev.Data, want.Data) {
				t.Fatalf("event %d = seq %d, want %d", i, ev.Seq, want.Seq)
			}
		}
	}
	if _, err := rowcodec.AppendBatch(nil, "r", 5, 10, encoding, stored, 0, 100); !errors.Is(err, persistence.ErrCorrupt) {
		t.Fatalf("a batch shorter than its row says: %v, want ErrCorrupt", err)
	}
	if _, err := rowcodec.AppendBatch(nil, "r", 1, 1, rowcodec.EncodingProto, []byte{0x7f}, 0, 100); !errors.Is(err, persistence.ErrCorrupt) {
		t.Fatalf("a truncated batch: %v, want ErrCorrupt", err)
	}
}
