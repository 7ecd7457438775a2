package anthropic_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/internal/wiretest"
)

// BenchmarkStream10kDeltas replays a recorded 10,000-delta stream through
// the SDK request, SSE framing and the adapter; ns/delta is the figure that
// must stay ≤ 2 µs.
func BenchmarkStream10kDeltas(b *testing.B) {
	const deltas = 10000
	var sb strings.Builder
	sb.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_B\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n")
	sb.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for i := 0; i < deltas; i++ {
		sb.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"tok" + strconv.Itoa(i%10) + " \"}}\n\n")
	}
	sb.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	sb.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":10000}}\n\n")
	sb.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
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
		for ev := range p.Stream(context.Background(), model, c, provider.Options{}) {
			if ev.Type == provider.EventTextDelta {
				n++
			}
		}
		if n != deltas {
			b.Fatalf("deltas = %d", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*deltas), "ns/delta")
}
