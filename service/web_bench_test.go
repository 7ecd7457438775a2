package service_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/service"
)

// BenchmarkPromptStreamMultiplexed measures what serving native gRPC
// through the HTTP server of ServeWeb (grpc.Server.ServeHTTP behind the
// transcoder) would cost against grpc.Server.Serve: the same agentd, one
// prompt of about 10,000 text deltas streamed over each listener in turn,
// and the ratio of their times (multiplexed/plain). Within 1.05 the HTTP
// protocols could share the gRPC port; agentd serves them on their own
// listener (--http-listen) because they are not.
func BenchmarkPromptStreamMultiplexed(b *testing.B) {
	text := strings.Repeat("port 3000, ", 10_000*16/11+1)[:10_000*16]
	h := newHarness(b, agent.Options{}, service.ServerOptions{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- h.d.ServeWeb(lis, service.WebOptions{}) }()
	b.Cleanup(func() {
		h.stop()
		<-served
	})
	plain := benchClient(b, h.addr)
	mux := benchClient(b, lis.Addr().String())
	compareAlternating(b, "plain", func() time.Duration { return timeEchoPrompt(b, plain, text) }, "multiplexed", func() time.Duration { return timeEchoPrompt(b, mux, text) })
}
