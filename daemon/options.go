package daemon

import (
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/persistence/sqlite"
	"github.com/agentd/agentd/service"
)

// Option changes how New assembles agentd.
type Option func(*options)

type options struct {
	engine          Engine
	logger          *slog.Logger
	metrics         *metrics.Metrics
	tracer          trace.TracerProvider
	agent           agent.Options
	service         service.Options
	server          service.ServerOptions
	sqlite          []sqlite.Option
	pgMaxConns      int
	maxMessageBytes int
}

// WithEngine chooses the store engine instead of the one the DSN's form
// names (see EngineOf); needed for a PostgreSQL DSN in key=value form.
func WithEngine(e Engine) Option {
	return func(o *options) { o.engine = e }
}

// WithLogger sets the logger of the store, the agent, the service and the
// server, where their own options leave it nil; default none (logs are
// discarded). New's and Shutdown's warnings go there too.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithMetrics wires m into every layer: the agent's runs, the service's
// streams, the server's RPCs and a PostgreSQL store's notifications,
// where their own options leave Metrics nil. Default none.
func WithMetrics(m *metrics.Metrics) Option {
	return func(o *options) { o.metrics = m }
}

// WithTracerProvider traces runs (agent) and calls (server) with tp,
// where their own options leave TracerProvider nil. Default none.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracer = tp }
}

// WithAgentOptions sets the agent's options. New fills Logger, Metrics
// and TracerProvider from the options above when they are nil, and
// SchemaVersion from the store when it is 0.
func WithAgentOptions(opts agent.Options) Option {
	return func(o *options) { o.agent = opts }
}

// WithServiceOptions sets the service's options. New fills Logger and
// Metrics from the options above when they are nil.
func WithServiceOptions(opts service.Options) Option {
	return func(o *options) { o.service = opts }
}

// WithServerOptions sets the gRPC server's options (auth, TLS credentials
// and other grpc.ServerOptions in GRPC). New fills Logger, Metrics and
// TracerProvider from the options above when they are nil, and Probe with
// a PostgreSQL store's ping; its own grpc.ServerOptions (keepalive,
// WithMaxMessageBytes) come before those in GRPC.
func WithServerOptions(opts service.ServerOptions) Option {
	return func(o *options) { o.server = opts }
}

// WithSQLiteOptions adds options for opening a SQLite store (durability,
// payload compression), applied after the logger of WithLogger.
func WithSQLiteOptions(opts ...sqlite.Option) Option {
	return func(o *options) { o.sqlite = append(o.sqlite, opts...) }
}

// WithPostgresMaxConns bounds a PostgreSQL store's connection pool; 0
// (the default) keeps the driver's.
func WithPostgresMaxConns(n int) Option {
	return func(o *options) { o.pgMaxConns = n }
}

// WithMaxMessageBytes sets the largest gRPC message the server accepts or
// sends; 0 (the default) keeps gRPC's limits.
func WithMaxMessageBytes(n int) Option {
	return func(o *options) { o.maxMessageBytes = n }
}
