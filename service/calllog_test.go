package service_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service"
)

// A call's log line names the trace it belongs to and the caller's
// tenant; health checks log at debug, not at info; a call refused for its
// credentials is logged with the reason.
func TestCallLogLines(t *testing.T) {
	logs := &syncBuffer{}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	h := newHarness(t, agent.Options{}, service.ServerOptions{
		Logger:         slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		TracerProvider: tp,
		Auth:           &service.AuthConfig{Tokens: []service.TokenGrant{{SHA256: tokenHash("acme-token"), Tenant: "acme", Role: service.RoleUser}}},
	})
	ctx := as(context.Background(), "acme-token")
	if _, err := h.client.ListSessions(ctx, &agentdv1.ListSessionsRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := healthpb.NewHealthClient(h.conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	_, _ = h.client.ListSessions(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer wrong"), &agentdv1.ListSessionsRequest{})
	var listLine, healthLine, refusedLine string
	for _, line := range strings.Split(logs.String(), "\n") {
		switch {
		case strings.Contains(line, "grpc.method=ListSessions") && strings.Contains(line, "grpc.code=OK"):
			listLine = line
		case strings.Contains(line, "grpc.method=Check"):
			healthLine = line
		case strings.Contains(line, "call refused: unauthenticated"):
			refusedLine = line
		}
	}
	// The spans of every call end up in exp, in no fixed order: the line
	// must carry the trace id of one of the ListSessions calls. A server
	// span ends after its response is written, so it may still be open
	// when the client has its answer: wait for it, boundedly.
	traced := false
	for deadline := time.Now().Add(5 * time.Second); !traced && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, sp := range exp.GetSpans() {
			if strings.HasSuffix(sp.Name, "/ListSessions") && strings.Contains(listLine, "trace_id="+sp.SpanContext.TraceID().String()) {
				traced = true
			}
		}
	}
	if len(exp.GetSpans()) == 0 {
		t.Fatal("the calls made no span")
	}
	if !strings.Contains(listLine, "tenant=acme") || !traced {
		t.Errorf("the call's line %q lacks its tenant or trace id", listLine)
	}
	if healthLine != "" {
		t.Errorf("a health check logged at info: %q", healthLine)
	}
	if !strings.Contains(refusedLine, "reason=\"unknown bearer token\"") || !strings.Contains(refusedLine, "ListSessions") {
		t.Errorf("the refused call's line: %q", refusedLine)
	}
}
