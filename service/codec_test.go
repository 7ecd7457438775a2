package service_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service"
)

// rawCodec decodes as grpc's proto codec does and keeps the bytes of the
// last message it decoded.
type rawCodec struct {
	proto encoding.CodecV2
	mu    sync.Mutex
	last  []byte
}

func (c *rawCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }
func (c *rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.mu.Lock()
	c.last = data.Materialize()
	c.mu.Unlock()
	return c.proto.Unmarshal(data, v)
}
func (c *rawCodec) Name() string { return "proto" }

// Two reads of the same state are the same bytes: GetTranscript,
// GetContext and ExportSession encode map fields (Struct arguments and
// details) in key order.
func TestAnswersAreByteStable(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	args := map[string]any{}
	for i := range 40 {
		args[fmt.Sprintf("key%02d", i)] = map[string]any{"n": i, "s": "v", "nested": map[string]any{"a": 1, "b": 2, "c": 3}}
	}
	id := h.createSession(&agentdv1.SessionConfig{
		Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{toolCallAnswer(t, "c1", "missing_tool", args), textAnswer("done")}},
	})
	h.prompt(id, "go")
	codec := &rawCodec{proto: encoding.GetCodecV2("proto")}
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := agentdv1.NewAgentServiceClient(conn)
	calls := map[string]func() error{
		"GetTranscript": func() error {
			_, err := c.GetTranscript(h.ctx(), &agentdv1.GetTranscriptRequest{SessionId: id})
			return err
		},
		"GetContext": func() error {
			_, err := c.GetContext(h.ctx(), &agentdv1.GetContextRequest{SessionId: id})
			return err
		},
		"ExportSession": func() error {
			st, err := c.ExportSession(h.ctx(), &agentdv1.ExportSessionRequest{SessionId: id})
			if err != nil {
				return err
			}
			var all []byte
			for {
				if _, err := st.Recv(); err != nil {
					codec.mu.Lock()
					codec.last = all
					codec.mu.Unlock()
					return nil
				}
				codec.mu.Lock()
				all = append(all, codec.last...)
				codec.mu.Unlock()
			}
		},
	}
	for name, call := range calls {
		var first []byte
		for i := range 8 {
			if err := call(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			codec.mu.Lock()
			got := codec.last
			codec.mu.Unlock()
			if i == 0 {
				first = got
				if len(first) == 0 {
					t.Fatalf("%s: no bytes", name)
				}
			} else if !bytes.Equal(got, first) {
				t.Fatalf("%s: read %d differs from the first (%d vs %d bytes)", name, i+1, len(got), len(first))
			}
		}
	}
}
