package daemon_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/daemon"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/metrics"
)

func TestMain(m *testing.M) {
	// The Gemini SDK's dependencies start an opencensus worker at load.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// serve starts d on a loopback port and returns a client connection to it
// and the channel Serve's result arrives on.
func serve(t *testing.T, d *daemon.Daemon) (*grpc.ClientConn, <-chan error) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- d.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, served
}

// A daemon on a SQLite file serves health, reflection's AgentService and a
// faux conversation, and its Shutdown ends Serve, closes the store (the
// file can be opened again at once) and answers the same a second time.
func TestServeAndShutdown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentd.db")
	m := metrics.New()
	d, err := daemon.New(testCtx(t), path, daemon.WithMetrics(m))
	if err != nil {
		t.Fatal(err)
	}
	if d.Engine() != daemon.SQLite || d.StoreName() != path {
		t.Errorf("engine, name = %q, %q; want sqlite, %q", d.Engine(), d.StoreName(), path)
	}
	conn, served := serve(t, d)
	resp, err := healthpb.NewHealthClient(conn).Check(testCtx(t), &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v; want SERVING", resp.GetStatus(), err)
	}
	c := agentdv1.NewAgentServiceClient(conn)
	created, err := c.CreateSession(testCtx(t), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}}})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := c.Prompt(testCtx(t), &agentdv1.PromptRequest{SessionId: created.GetSession().GetId(), Content: []*agentdv1.ContentBlock{
		{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: "ping"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	var last *agentdv1.AgentEvent
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = ev
	}
	if last.GetAgentEnd() == nil {
		t.Fatalf("the stream ended with %v, want agent_end", last)
	}

	// Every layer reports to the one Metrics.
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{"agentd_runs_started_total 1", "agentd_active_runs 0", "agentd_events_sent_total ",
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Prompt",grpc_service="agentd.v1.AgentService",grpc_type="server_stream"} 1`,
		`agentd_store_latency_seconds_count{op="append"}`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	if err := d.Shutdown(testCtx(t)); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if err := d.Shutdown(testCtx(t)); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	again, err := daemon.New(testCtx(t), path)
	if err != nil {
		t.Fatalf("reopen after shutdown: %v", err)
	}
	if err := again.Shutdown(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// When the agent refuses its options, New closes the store it opened.
func TestNewClosesTheStoreOnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentd.db")
	bad := agent.Options{Ceilings: agent.Ceilings{Tenants: map[string]agent.Ceiling{
		"acme": {Tools: agent.Limit{Values: []string{"rm_rf"}, Setting: "tenants.acme.tools"}}}}}
	if _, err := daemon.New(testCtx(t), path, daemon.WithAgentOptions(bad)); err == nil || !strings.Contains(err.Error(), `"rm_rf"`) {
		t.Fatalf("New with an unknown tool = %v", err)
	}
	d, err := daemon.New(testCtx(t), path)
	if err != nil {
		t.Fatalf("the store stayed open: %v", err)
	}
	if err := d.Shutdown(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestNewRefusesAnUnknownEngine(t *testing.T) {
	_, err := daemon.New(testCtx(t), filepath.Join(t.TempDir(), "agentd.db"), daemon.WithEngine("oracle"))
	if err == nil || !strings.Contains(err.Error(), `unknown store engine "oracle"`) {
		t.Fatalf("New with engine oracle = %v", err)
	}
}

func TestEngineOf(t *testing.T) {
	for dsn, want := range map[string]daemon.Engine{
		"./agentd.db":                  daemon.SQLite,
		"/var/lib/agentd/agentd.db":    daemon.SQLite,
		"postgres://u:p@db/agentd":     daemon.Postgres,
		"postgresql://db/agentd":       daemon.Postgres,
		"host=db dbname=agentd":        daemon.SQLite, // key=value needs WithEngine
		"postgres-backup/agentd.db":    daemon.SQLite,
		"file:agentd.db?mode=memory":   daemon.SQLite,
		"postgresql://db:5432/agentd?": daemon.Postgres,
	} {
		if got := daemon.EngineOf(dsn); got != want {
			t.Errorf("EngineOf(%q) = %q, want %q", dsn, got, want)
		}
	}
}
