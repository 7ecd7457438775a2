package rowcodec_test

import (
	"bytes"
	"compress/zlib"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/internal/rowcodec"
	"github.com/agentd/agentd/persistence/storetest"
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
	stored, encoding, err := enc.EncodeEvents(events)
	if err != nil || encoding != rowcodec.EncodingZlib {
		t.Fatalf("EncodeEvents: encoding %d, %v", encoding, err)
	}
	stored = bytes.Clone(stored)
	// The encoder's buffers serve the next batch: a small one is stored
	// plain, as its payload.
	small := []persistence.Event{{Seq: 10, Data: []byte("small")}}
	if plain, smallEncoding, err := enc.EncodeEvents(small); err != nil || smallEncoding != rowcodec.EncodingProto || !bytes.Equal(plain, rowcodec.EncodeEvents(small)) {
		t.Fatalf("EncodeEvents of a small batch after a big one = %x (encoding %d), %v; want its plain payload %x", plain, smallEncoding, err, rowcodec.EncodeEvents(small))
	}
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

// TestCompactBatch checks the compact batch of streamed events: it reads
// back as the bytes appended from any seq and up to any limit, its deltas
// take less than a third of the plain format's bytes, and every
// truncation of it is refused as corrupt rather than read short.
func TestCompactBatch(t *testing.T) {
	events := storetest.StreamedEvents(t, "s1", "r1", 5, 1000)
	plain := rowcodec.EncodeEvents(slices.Clone(events))
	var noFacts []persistence.Event
	for _, ev := range events {
		noFacts = append(noFacts, persistence.Event{Seq: ev.Seq, Data: ev.Data})
	}
	full := rowcodec.EncodeEvents(noFacts)
	if plain[0] != 0 || full[0] == 0 {
		t.Fatalf("first bytes %#x with deltas, %#x without; want 0 (compact) and an event length", plain[0], full[0])
	}
	var deltas, deltasNoFacts []persistence.Event
	for i, ev := range events {
		if ev.Delta != nil && ev.Delta.RunID == "r1" {
			deltas, deltasNoFacts = append(deltas, ev), append(deltasNoFacts, noFacts[i])
		}
	}
	if compact, full := len(rowcodec.EncodeEvents(deltas)), len(rowcodec.EncodeEvents(deltasNoFacts)); 3*compact >= full {
		t.Fatalf("%d deltas take %d bytes compact, %d plain; want less than a third", len(deltas), compact, full)
	}
	var enc rowcodec.Encoder
	stored, encoding, err := enc.Encode(plain)
	if err != nil {
		t.Fatal(err)
	}
	stored = bytes.Clone(stored)
	last := events[len(events)-1].Seq
	for _, after := range []uint64{0, 4, 5, 6, 11, 500, last - 1, last} {
		for _, limit := range []int{1, 7, 10_000} {
			got, err := rowcodec.AppendBatch(nil, "r1", 5, last, encoding, stored, after, limit)
			first := max(after, 4) + 1
			want := events[first-5:][:min(limit, int(last+1-first))]
			if err != nil || len(got) != len(want) {
				t.Fatalf("AppendBatch(after %d, limit %d) = %d events, %v; want %d", after, limit, len(got), err, len(want))
			}
			for i := range got {
				if got[i].Seq != want[i].Seq || !bytes.Equal(got[i].Data, want[i].Data) {
					t.Fatalf("AppendBatch(after %d, limit %d): event %d is seq %d %x, want seq %d %x", after, limit, i, got[i].Seq, got[i].Data, want[i].Seq, want[i].Data)
				}
			}
		}
	}
	if _, err := rowcodec.AppendBatch(nil, "r1", 5, last+1, encoding, stored, 0, 10_000); !errors.Is(err, persistence.ErrCorrupt) {
		t.Fatalf("a batch shorter than its row says: %v, want ErrCorrupt", err)
	}
	for n := 1; n < len(plain); n += 1 + n/64 {
		if got, err := rowcodec.AppendBatch(nil, "r1", 5, last, rowcodec.EncodingProto, plain[:n], 0, 10_000); !errors.Is(err, persistence.ErrCorrupt) {
			t.Fatalf("the batch cut to %d of %d bytes = %d events, %v; want ErrCorrupt", n, len(plain), len(got), err)
		}
	}
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		{"unknown version", []byte{0, 9}},
		{"unknown record kind", protowire.AppendVarint(protowire.AppendBytes([]byte{0, 1}, nil), 7)},
		{"unknown delta kind", protowire.AppendVarint(protowire.AppendVarint(protowire.AppendBytes([]byte{0, 1}, nil), 2), 9)},
	} {
		if _, err := rowcodec.AppendBatch(nil, "r1", 5, last, rowcodec.EncodingProto, tc.payload, 0, 10_000); !errors.Is(err, persistence.ErrCorrupt) {
			t.Fatalf("%s: %v, want ErrCorrupt", tc.name, err)
		}
	}
}
