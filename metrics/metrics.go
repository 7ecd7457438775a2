// Package metrics holds agentd's Prometheus metrics for all three of its
// layers: the runs of package agent (agent.Metrics), the event streams and
// RPCs of package service (service.StreamMetrics and service.RPCMetrics),
// and the shared PostgreSQL store's notifications (NotifyLag). Package
// daemon wires one Metrics into each of them; Handler serves them all.
//
// A nil *Metrics records nothing, so tests and embedders need not set one
// up.
package metrics

import (
	"context"
	"net/http"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
)

// Metrics are agentd's Prometheus metrics: per-RPC counts and latencies,
// active runs, events, and transcript store latency. A nil *Metrics
// records nothing.
type Metrics struct {
	registry       *prometheus.Registry
	grpc           *grpcprom.ServerMetrics
	activeRuns     prometheus.Gauge
	runsStarted    prometheus.Counter
	eventsProduced prometheus.Counter
	eventsSent     prometheus.Counter
	eventDelivery  prometheus.Histogram
	storeSeconds   *prometheus.HistogramVec
	leasesHeld     prometheus.Gauge
	leasesLost     prometheus.Counter
	notifyLag      prometheus.Histogram
	expired        prometheus.Counter
	contextCache   prometheus.Gauge
}

// New creates the metrics in a registry of their own (plus the Go runtime
// and process collectors).
func New() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		grpc: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
			grpcprom.WithHistogramBuckets([]float64{.001, .005, .01, .05, .1, .5, 1, 5, 30, 120, 600}))),
		activeRuns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentd_active_runs", Help: "Runs of the agent loop in progress.",
		}),
		runsStarted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_runs_started_total", Help: "Runs of the agent loop started.",
		}),
		eventsProduced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_events_produced_total", Help: "Agent events produced by runs.",
		}),
		eventsSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_events_sent_total", Help: "Agent events sent to client streams (a replay to several clients counts each).",
		}),
		eventDelivery: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "agentd_event_delivery_seconds", Help: "Time from an event's creation to its hand-over to a client stream.",
			Buckets: []float64{.0001, .0005, .001, .005, .01, .025, .05, .1, .25, .5, 1, 5},
		}),
		storeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentd_store_latency_seconds", Help: "Latency of transcript store writes.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .05, .1, .5},
		}, []string{"op"}),
		leasesHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentd_leases_held", Help: "Run leases this replica holds (shared PostgreSQL store).",
		}),
		leasesLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_lease_losses_total", Help: "Active runs this replica stopped because it lost their lease.",
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_sessions_expired_total", Help: "Sessions the retention sweep deleted after they were idle longer than their retention.",
		}),
		contextCache: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentd_context_cache_bytes", Help: "Memory of the context paths kept for the sessions that ran last, as the cache counts it: each entry's encoded size and 1 KiB (--context-cache-mib bounds it).",
		}),
		notifyLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "agentd_notify_lag_seconds", Help: "Time from a NOTIFY of another replica (or this one) to its receipt here.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5},
		}),
	}
	m.registry.MustRegister(m.grpc, m.activeRuns, m.runsStarted, m.eventsProduced, m.eventsSent, m.eventDelivery, m.storeSeconds,
		m.leasesHeld, m.leasesLost, m.notifyLag, m.expired, m.contextCache,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}

// RunStarted implements agent.Metrics.
func (m *Metrics) RunStarted() {
	if m != nil {
		m.activeRuns.Inc()
		m.runsStarted.Inc()
	}
}

// RunEnded implements agent.Metrics.
func (m *Metrics) RunEnded() {
	if m != nil {
		m.activeRuns.Dec()
	}
}

// EventProduced implements agent.Metrics.
func (m *Metrics) EventProduced() {
	if m != nil {
		m.eventsProduced.Inc()
	}
}

// StoreLatency implements agent.Metrics.
func (m *Metrics) StoreLatency(op string, d time.Duration) {
	if m != nil {
		m.storeSeconds.WithLabelValues(op).Observe(d.Seconds())
	}
}

// ContextCacheBytes implements agent.Metrics.
func (m *Metrics) ContextCacheBytes(n int) {
	if m != nil {
		m.contextCache.Set(float64(n))
	}
}

// LeasesHeld implements agent.Metrics.
func (m *Metrics) LeasesHeld(n int) {
	if m != nil {
		m.leasesHeld.Set(float64(n))
	}
}

// LeaseLost implements agent.Metrics.
func (m *Metrics) LeaseLost() {
	if m != nil {
		m.leasesLost.Inc()
	}
}

// SessionExpired implements agent.Metrics.
func (m *Metrics) SessionExpired() {
	if m != nil {
		m.expired.Inc()
	}
}

// EventSent implements service.StreamMetrics: it counts an event sent to
// a stream and, for a live one (created is set), how long it took from its
// creation.
func (m *Metrics) EventSent(created time.Time) {
	if m != nil {
		m.eventsSent.Inc()
		if !created.IsZero() {
			m.eventDelivery.Observe(time.Since(created).Seconds())
		}
	}
}

// UnaryServerInterceptor implements service.RPCMetrics: it counts and
// times unary RPCs.
func (m *Metrics) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	if m == nil {
		return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			return handler(ctx, req)
		}
	}
	return m.grpc.UnaryServerInterceptor()
}

// StreamServerInterceptor implements service.RPCMetrics: it counts and
// times streaming RPCs.
func (m *Metrics) StreamServerInterceptor() grpc.StreamServerInterceptor {
	if m == nil {
		return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			return handler(srv, ss)
		}
	}
	return m.grpc.StreamServerInterceptor()
}

// InitializeMetrics implements service.RPCMetrics: it creates the series
// of every method s serves at zero, so they are exported before the first
// call.
func (m *Metrics) InitializeMetrics(s *grpc.Server) {
	if m != nil {
		m.grpc.InitializeMetrics(s)
	}
}

// NotifyLag observes the delay of a database notification between
// replicas (postgres OnNotifyLag).
func (m *Metrics) NotifyLag(d time.Duration) {
	if m != nil {
		m.notifyLag.Observe(d.Seconds())
	}
}
