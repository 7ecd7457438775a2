package main

import (
	"context"
	"encoding/hex"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider/faux"
)

// otlpReceiver is a minimal OTLP/gRPC trace receiver on loopback: what
// agentd exports lands in spans.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

// Export implements collectortrace.TraceServiceServer.
func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) byName() map[string][]*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]*tracepb.Span{}
	for _, s := range r.spans {
		out[s.GetName()] = append(out[s.GetName()], s)
	}
	return out
}

// agentd with --otel-traces exports over OTLP, continuing the caller's
// traceparent: the Prompt's server span is the client span's child, the
// run's invoke_agent span the server span's, the chat and execute_tool
// spans the run's; every event carries the trace id; the last spans are
// flushed at shutdown.
func TestTracesReachAnOTLPReceiver(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recv := &otlpReceiver{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, recv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	dir := t.TempDir()
	p := startProcEnv(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + lis.Addr().String(), "OTEL_EXPORTER_OTLP_INSECURE=true", "OTEL_SERVICE_NAME=agentd-test"},
		filepath.Join(dir, "agentd.db"), "--otel-traces")
	c := p.client()
	id := createSession(t, c, &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{faux.Message(faux.Text("traced"))}}})

	const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "traceparent", "00-"+traceID+"-"+clientSpan+"-01")
	evs, err := drain(c.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Content: texts("hello")}))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if hex.EncodeToString(ev.GetTraceId()) != traceID {
			t.Fatalf("event %d carries trace %q, want the caller's %s", ev.GetSeq(), ev.GetTraceId(), traceID)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.waitExit(30 * time.Second); err != nil {
		t.Fatalf("agentd exited with %v:\n%s", err, p.log.String())
	}

	spans := recv.byName()
	hex := hex.EncodeToString
	server := spans["agentd.v1.AgentService/Prompt"]
	run := spans["invoke_agent agentd"]
	chat := spans["chat faux-1"]
	if len(server) != 1 || len(run) != 1 || len(chat) != 1 {
		names := make([]string, 0, len(spans))
		for n := range spans {
			names = append(names, n)
		}
		slices.Sort(names)
		t.Fatalf("spans received: %v; want one Prompt server span, one invoke_agent and one chat", names)
	}
	if hex(server[0].GetTraceId()) != traceID || hex(server[0].GetParentSpanId()) != clientSpan {
		t.Errorf("server span in trace %s below %s, want %s below the client's %s", hex(server[0].GetTraceId()), hex(server[0].GetParentSpanId()), traceID, clientSpan)
	}
	if hex(run[0].GetParentSpanId()) != hex(server[0].GetSpanId()) || hex(chat[0].GetParentSpanId()) != hex(run[0].GetSpanId()) {
		t.Errorf("parentage: run below %s (server %s), chat below %s (run %s)",
			hex(run[0].GetParentSpanId()), hex(server[0].GetSpanId()), hex(chat[0].GetParentSpanId()), hex(run[0].GetSpanId()))
	}
	attrs := map[string]string{}
	for _, kv := range chat[0].GetAttributes() {
		attrs[kv.GetKey()] = kv.GetValue().String()
	}
	for _, k := range []string{"gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.response.finish_reasons"} {
		if attrs[k] == "" {
			t.Errorf("chat span lacks %s: %v", k, attrs)
		}
	}
	if len(spans["grpc.health.v1.Health/Check"]) != 0 {
		t.Error("health checks are traced")
	}
}
