package service

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the proto codec eventCodec delegates to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// encodedEvent is an AgentEvent already encoded by a run's event log,
// which stores the same bytes. Sent (as a pointer) with SendMsg on a
// stream of a server built by NewServer, it goes out as it is: an event is
// encoded once, not once more per follower.
type encodedEvent []byte

// eventFrame is what eventCodec hands grpc for an encodedEvent: the
// event's bytes as a buffer and the one-element slice holding it.
type eventFrame struct {
	data  mem.SliceBuffer
	slice [1]mem.Buffer
}

// eventCodec is grpc's proto codec, except that it sends an *encodedEvent
// without encoding it again, and encodes every other message
// deterministically (map entries, such as a google.protobuf.Struct's
// fields, in key order), so two reads of the same state are the same
// bytes a client can cache and compare. It keeps the name "proto", so
// clients see the ordinary application/grpc+proto content.
type eventCodec struct{ proto encoding.CodecV2 }

// newEventCodecOption makes a server use eventCodec.
func newEventCodecOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(newEventCodec())
}

// newEventCodec returns eventCodec around grpc's registered proto codec.
func newEventCodec() eventCodec { return eventCodec{proto: encoding.GetCodecV2("proto")} }

// Marshal implements encoding.CodecV2.
func (c eventCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *encodedEvent:
		// One allocation holds the buffer and the slice of it that grpc
		// reads (boxing a SliceBuffer and making a BufferSlice would be
		// two per event).
		f := &eventFrame{data: mem.SliceBuffer(*m)}
		f.slice[0] = &f.data
		return f.slice[:], nil
	case proto.Message:
		deterministic := proto.MarshalOptions{Deterministic: true}
		size := deterministic.Size(m)
		if mem.IsBelowBufferPoolingThreshold(size) {
			b, err := deterministic.MarshalAppend(make([]byte, 0, size), m)
			if err != nil {
				return nil, err
			}
			return mem.BufferSlice{mem.SliceBuffer(b)}, nil
		}
		pool := mem.DefaultBufferPool()
		buf := pool.Get(size)
		b, err := deterministic.MarshalAppend((*buf)[:0], m)
		if err != nil {
			pool.Put(buf)
			return nil, err
		}
		*buf = b
		return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
	}
	return c.proto.Marshal(v)
}

// Unmarshal implements encoding.CodecV2.
func (c eventCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return c.proto.Unmarshal(data, v)
}

// Name implements encoding.CodecV2.
func (eventCodec) Name() string { return "proto" }
