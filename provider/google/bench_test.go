package google_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/internal/wiretest"
)

// BenchmarkStream10kDeltas replays a recorded 10,000-chunk stream (one text
// part each) through the adapter, the genai SDK sending the request and the
// adapter parsing the chunks; target ≤ 2 µs/delta.
func BenchmarkStream10kDeltas(b *testing.B) {
	const deltas = 10000
	var sb strings.Builder
	for i := 0; i < deltas; i++ {
		sb.WriteString(`data: {"candidates":[{"content":{"parts":[{"text":"tok` + strconv.Itoa(i%10) + ` "}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":` + strconv.Itoa(i+1) + `,"totalTokenCount":` + strconv.Itoa(i+6) + `},"modelVersion":"gemini-2.5-flash","responseId":"resp-B"}` + "\r\n\r\n")
	}
	sb.WriteString(`data: {"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":10000,"totalTokenCount":10005},"responseId":"resp-B"}` + "\r\n\r\n")
	replies := make([]wiretest.Reply, b.N)
	for i := range replies {
		replies[i] = wiretest.Reply{Body: sb.String()}
	}
	s := wiretest.New(b, replies...)
	p := newProvider(b, s)
	c := ctxOf(wiretest.User("hi"))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := 0
		var final provider.Event
		for ev := range p.Stream(context.Background(), flash, c, provider.Options{}) {
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
