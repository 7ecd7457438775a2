package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/service"
)

// Daemon is one assembled agentd: a store, the agent running sessions on
// it, and the gRPC service and server over both. Serve it on a listener;
// Shutdown stops it and closes the store.
type Daemon struct {
	engine Engine
	store  *openedStore
	agent  *agent.Agent
	svc    *service.Service
	server *service.Server
	logger *slog.Logger

	shutdownOnce sync.Once
	shutdownErr  error
}

// New opens the store dsn names (a SQLite file path, or a PostgreSQL DSN;
// see EngineOf and WithEngine), builds the agent over it (which repairs
// the runs a previous process left open) and the service and gRPC server
// over both. Nothing is served until Serve. On error, whatever New opened
// is closed again.
func New(ctx context.Context, dsn string, opts ...Option) (*Daemon, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.engine == "" {
		o.engine = EngineOf(dsn)
	}
	st, err := openStore(ctx, dsn, &o)
	if err != nil {
		return nil, err
	}
	logger := o.logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	ao := o.agent
	if ao.Logger == nil {
		ao.Logger = o.logger
	}
	if ao.Metrics == nil && o.metrics != nil {
		ao.Metrics = o.metrics
	}
	if ao.TracerProvider == nil {
		ao.TracerProvider = o.tracer
	}
	if ao.SchemaVersion == 0 {
		ao.SchemaVersion = st.schemaVersion
	}
	a, err := agent.New(ctx, st.store, ao)
	if err != nil {
		if cerr := st.store.Close(); cerr != nil {
			logger.Warn("could not close the store", "err", cerr)
		}
		return nil, err
	}

	so := o.service
	if so.Logger == nil {
		so.Logger = o.logger
	}
	if so.Metrics == nil && o.metrics != nil {
		so.Metrics = o.metrics
	}
	svc := service.New(st.store, a, so)

	vo := o.server
	if vo.Logger == nil {
		vo.Logger = o.logger
	}
	if vo.Metrics == nil && o.metrics != nil {
		vo.Metrics = o.metrics
	}
	if vo.TracerProvider == nil {
		vo.TracerProvider = o.tracer
	}
	if vo.Probe == nil {
		vo.Probe = st.probe
	}
	vo.GRPC = append(grpcOptions(&o), vo.GRPC...)

	return &Daemon{
		engine: o.engine,
		store:  st,
		agent:  a,
		svc:    svc,
		server: service.NewServer(svc, vo),
		logger: logger,
	}, nil
}

// grpcOptions are the grpc.ServerOptions of every agentd: message size
// limits when set, and keepalive.
func grpcOptions(o *options) []grpc.ServerOption {
	var opts []grpc.ServerOption
	if o.maxMessageBytes > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(o.maxMessageBytes), grpc.MaxSendMsgSize(o.maxMessageBytes))
	}
	return append(opts,
		// Long streams idle while tools run: ping to find dead peers, and
		// let clients ping us without being cut off.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 20 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
}

// Serve accepts connections on lis until Shutdown. It returns nil after a
// shutdown and the listener's error otherwise.
func (d *Daemon) Serve(lis net.Listener) error {
	return d.server.Serve(lis)
}

// Shutdown stops agentd in order: it aborts the active runs and waits
// for them to end, so that every stream ends with agent_end and every run
// is recorded as ended; then it reports NOT_SERVING, stops accepting
// calls and lets the open ones drain; then it closes the store. When ctx
// ends first, Shutdown goes on without waiting: the remaining calls are
// closed, and a run that did not end is closed as interrupted at the next
// start. Each problem is logged as a warning and returned, joined. Later
// calls return the first call's result.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.shutdownOnce.Do(func() { d.shutdownErr = d.shutdown(ctx) })
	return d.shutdownErr
}

func (d *Daemon) shutdown(ctx context.Context) error {
	var errs []error
	if err := d.agent.Close(ctx); err != nil {
		d.logger.Warn("runs did not end within the grace period", "err", err)
		errs = append(errs, fmt.Errorf("end the runs: %w", err))
	}
	d.server.Shutdown(ctx)
	if err := d.store.store.Close(); err != nil {
		d.logger.Warn("could not close the store", "err", err)
		errs = append(errs, fmt.Errorf("close the store: %w", err))
	}
	return errors.Join(errs...)
}

// Store is the store agentd serves.
func (d *Daemon) Store() persistence.Store { return d.store.store }

// Agent is the agent that runs the sessions.
func (d *Daemon) Agent() *agent.Agent { return d.agent }

// Service is the AgentService implementation the server serves.
func (d *Daemon) Service() *service.Service { return d.svc }

// Engine is the store's engine.
func (d *Daemon) Engine() Engine { return d.engine }

// StoreName names the store for logs: the SQLite file, or the PostgreSQL
// DSN without its password.
func (d *Daemon) StoreName() string { return d.store.name }

// ServeWeb serves the same services over gRPC-Web, Connect, REST+JSON and
// gRPC on an HTTP listener (see service.Server.ServeWeb) until Shutdown.
func (d *Daemon) ServeWeb(lis net.Listener, opts service.WebOptions) error {
	return d.server.ServeWeb(lis, opts)
}
