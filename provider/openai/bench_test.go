package openai_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/internal/wiretest"
	"github.com/agentd/agentd/provider/openai"
)

// BenchmarkStream10kDeltas replays a recorded 10,000-delta stream through
// the SDK request, SSE framing and the adapter; ns/delta must stay ≤ 2 µs.
func BenchmarkStream10kDeltas(b *testing.B) {
	const deltas = 10000
	var sb strings.Builder
	for i := 0; i < deltas; i++ {
		sb.WriteString(`data: {"id":"chatcmpl-B","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1","choices":[{"index":0,"delta":{"content":"tok` + strconv.Itoa(i%10) + ` "},"finish_reason":null}]}` + "\n\n")
	}
	sb.WriteString(`data: {"id":"chatcmpl-B","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":10000,"total_tokens":10005}}` + "\n\ndata: [DONE]\n\n")
	replies := make([]wiretest.Reply, b.N)
	for i := range replies {
		replies[i] = wiretest.Reply{Body: sb.String()}
	}
	s := wiretest.New(b, replies...)
	p := newProvider(s, openai.Compat{})
	c := ctxOf(wiretest.User("hi"))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := 0
		for ev := range p.Stream(context.Background(), gpt, c, provider.Options{}) {
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
