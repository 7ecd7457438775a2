package openairesponses_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/internal/wiretest"
)

// BenchmarkStream10kDeltas replays a recorded 10,000-delta stream through
// the SDK request, SSE framing and the adapter; ns/delta must stay ≤ 2 µs.
func BenchmarkStream10kDeltas(b *testing.B) {
	const deltas = 10000
	var sb strings.Builder
	sb.WriteString("event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_B\",\"status\":\"in_progress\",\"model\":\"gpt-4.1\"}}\n\n")
	sb.WriteString("event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"id\":\"msg_B\",\"type\":\"message\",\"status\":\"in_progress\",\"content\":[],\"role\":\"assistant\"}}\n\n")
	for i := 0; i < deltas; i++ {
		sb.WriteString(`event: response.output_text.delta` + "\n" + `data: {"type":"response.output_text.delta","sequence_number":` + strconv.Itoa(i+2) +
			`,"item_id":"msg_B","output_index":0,"content_index":0,"delta":"tok` + strconv.Itoa(i%10) + ` ","logprobs":[]}` + "\n\n")
	}
	sb.WriteString("event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"id\":\"msg_B\",\"type\":\"message\",\"status\":\"completed\",\"content\":[],\"role\":\"assistant\"}}\n\n")
	sb.WriteString("event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_B\",\"status\":\"completed\",\"usage\":{\"input_tokens\":5,\"output_tokens\":10000,\"total_tokens\":10005}}}\n\n")
	replies := make([]wiretest.Reply, b.N)
	for i := range replies {
		replies[i] = wiretest.Reply{Body: sb.String()}
	}
	s := wiretest.New(b, replies...)
	p := newProvider(s)
	c := ctxOf(wiretest.User("hi"))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := 0
		var final provider.Event
		for ev := range p.Stream(context.Background(), gpt, c, provider.Options{}) {
			if ev.Type == provider.EventTextDelta {
				n++
			}
			final = ev
		}
		if n != deltas || final.Type != provider.EventDone {
			b.Fatalf("deltas = %d, final %v", n, final.Type)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*deltas), "ns/delta")
}
