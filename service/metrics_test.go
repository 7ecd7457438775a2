package service_test

import (
	"io"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/service"
)

// metricValue finds an unlabelled (or first matching) sample in a
// Prometheus text exposition.
func metricValue(t *testing.T, body, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+-]+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no sample %s in:\n%s", name, body)
	}
	v, err := strconv.ParseFloat(m[2], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMetricsCountRunsEventsRPCsAndStoreLatency(t *testing.T) {
	metrics := metrics.New()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{testkit.ReadFileTool(seedFiles)}, Metrics: metrics}, service.ServerOptions{Metrics: metrics})
	id := h.createSession(seedConfig(t))
	evs := h.prompt(id, "读取 src/config.ts")

	rec := httptest.NewRecorder()
	metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	if got := metricValue(t, text, "agentd_runs_started_total"); got != 1 {
		t.Errorf("runs started = %v, want 1", got)
	}
	if got := metricValue(t, text, "agentd_active_runs"); got != 0 {
		t.Errorf("active runs after the run = %v, want 0", got)
	}
	if got := metricValue(t, text, "agentd_events_sent_total"); got != float64(len(evs)) {
		t.Errorf("events sent = %v, want %d", got, len(evs))
	}
	if got := metricValue(t, text, "agentd_events_produced_total"); got != float64(len(evs)) {
		t.Errorf("events produced = %v, want %d", got, len(evs))
	}
	// Four messages were stored.
	if got := metricValue(t, text, `agentd_store_latency_seconds_count`); got != 4 {
		t.Errorf("store writes timed = %v, want 4", got)
	}
	if !regexp.MustCompile(`grpc_server_handled_total\{grpc_code="OK",grpc_method="Prompt",grpc_service="agentd.v1.AgentService",grpc_type="server_stream"\} 1`).MatchString(text) {
		t.Errorf("no handled Prompt RPC in:\n%s", text)
	}
}
