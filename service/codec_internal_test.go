package service

import (
	"bytes"
	"testing"
)

// An event its log encoded goes to grpc as those very bytes, for one
// allocation per send (the frame grpc may keep until the bytes are
// written).
func TestEncodedEventMarshalsInOneAllocation(t *testing.T) {
	codec := newEventCodec()
	data := []byte("\x08\x01\x12\x03abc")
	msg := encodedEvent(data)
	allocs := testing.AllocsPerRun(100, func() {
		out, err := codec.Marshal(&msg)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != 1 || !bytes.Equal(out[0].ReadOnlyData(), data) {
			t.Fatalf("marshaled as %q, want the encoded bytes %q", out.Materialize(), data)
		}
	})
	if allocs > 1 {
		t.Fatalf("marshaling an encoded event allocated %v times, want 1", allocs)
	}
}
