package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// ServerOptions configure NewServer. The zero value serves without auth or
// metrics.
type ServerOptions struct {
	// Logger receives one line per finished call and every recovered panic;
	// nil discards them.
	Logger *slog.Logger
	// Metrics, when set, counts and times every RPC.
	Metrics RPCMetrics
	// AuthToken, when set, is required as "authorization: Bearer <token>"
	// metadata on every AgentService call, and makes its caller an admin
	// of no tenant; health and reflection stay open so probes and
	// grpcurl's list keep working.
	AuthToken string
	// Auth, when set, maps credentials (bearer tokens, verified client
	// certificates) to tenants and roles (see AuthConfig); every
	// AgentService call needs one of them. It may go with AuthToken.
	Auth *AuthConfig
	// GRPC are extra grpc.ServerOptions (TLS credentials, message size
	// limits, keepalive), applied after agentd's own.
	GRPC []grpc.ServerOption
	// Probe, when set, is called every ProbeInterval; health checks report
	// NOT_SERVING while it fails (the database is unreachable) and SERVING
	// again once it succeeds.
	Probe func(context.Context) error
	// ProbeInterval is how often Probe runs; default 2s.
	ProbeInterval time.Duration
	// TracerProvider, when set, traces every AgentService call as a server
	// span that continues the caller's W3C traceparent (runs started by the
	// call become its children); health and reflection are not traced.
	TracerProvider trace.TracerProvider
}

// Server is agentd's gRPC server: the AgentService plus the standard health
// and reflection services, behind logging, metrics, auth and panic-recovery
// interceptors.
type Server struct {
	grpc   *grpc.Server
	health *health.Server
	logger *slog.Logger
	// stopProbe ends the probe loop; probeDone is closed when it ended.
	stopProbe chan struct{}
	probeDone chan struct{}
	// webMu guards web, the HTTP servers ServeWeb started, and webStopped,
	// set by Shutdown so a late ServeWeb serves nothing.
	webMu      sync.Mutex
	web        []*http.Server
	webStopped bool
}

// NewServer assembles a gRPC server around svc.
func NewServer(svc agentdv1.AgentServiceServer, opts ServerOptions) *Server {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	logOpts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall)}
	recoverOpts := []recovery.Option{
		recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
			logger.ErrorContext(ctx, "panic in gRPC handler", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			return refusal(&agent.Error{Reason: agentdv1.ErrorReason_ERROR_REASON_INTERNAL, Message: "internal error: the server recovered from a panic while handling this call; see the agentd log"})
		}),
	}
	var unary []grpc.UnaryServerInterceptor
	var stream []grpc.StreamServerInterceptor
	if opts.Metrics != nil {
		unary = append(unary, opts.Metrics.UnaryServerInterceptor())
		stream = append(stream, opts.Metrics.StreamServerInterceptor())
	}
	agentService := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
		return c.Service == agentdv1.AgentService_ServiceDesc.ServiceName
	})
	if opts.AuthToken != "" || opts.Auth != nil {
		// Before the call's log line, so that it names the caller's tenant;
		// a refused call is logged by the check itself.
		check := newAuthenticator(opts.Auth, opts.AuthToken, logger).authenticate
		unary = append(unary, selector.UnaryServerInterceptor(auth.UnaryServerInterceptor(check), agentService))
		stream = append(stream, selector.StreamServerInterceptor(auth.StreamServerInterceptor(check), agentService))
	}
	// One line per AgentService call at info; health probes and reflection
	// at debug, so they do not drown the log.
	callLog := slogAdapter(logger)
	logOpts = append(logOpts, logging.WithFieldsFromContext(callFields))
	quiet := append(slices.Clone(logOpts), logging.WithLevels(func(codes.Code) logging.Level { return logging.LevelDebug }))
	unary = append(unary,
		selector.UnaryServerInterceptor(logging.UnaryServerInterceptor(callLog, logOpts...), agentService),
		selector.UnaryServerInterceptor(logging.UnaryServerInterceptor(callLog, quiet...), selector.MatchFunc(func(ctx context.Context, c interceptors.CallMeta) bool { return !agentService.Match(ctx, c) })))
	stream = append(stream,
		selector.StreamServerInterceptor(logging.StreamServerInterceptor(callLog, logOpts...), agentService),
		selector.StreamServerInterceptor(logging.StreamServerInterceptor(callLog, quiet...), selector.MatchFunc(func(ctx context.Context, c interceptors.CallMeta) bool { return !agentService.Match(ctx, c) })))
	unary = append(unary, recovery.UnaryServerInterceptor(recoverOpts...), enumCheckUnary)
	stream = append(stream, recovery.StreamServerInterceptor(recoverOpts...), enumCheckStream)

	grpcOpts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		newEventCodecOption(),
	}
	if opts.TracerProvider != nil {
		grpcOpts = append(grpcOpts, grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(opts.TracerProvider),
			otelgrpc.WithPropagators(propagation.TraceContext{}),
			otelgrpc.WithFilter(filters.ServiceName(agentdv1.AgentService_ServiceDesc.ServiceName)),
		)))
	}
	grpcOpts = append(grpcOpts, opts.GRPC...)
	s := &Server{
		grpc:      grpc.NewServer(grpcOpts...),
		health:    health.NewServer(),
		logger:    logger,
		stopProbe: make(chan struct{}),
		probeDone: make(chan struct{}),
	}
	agentdv1.RegisterAgentServiceServer(s.grpc, svc)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	ropts := reflection.ServerOptions{Services: s.grpc, DescriptorResolver: newLazyFiles(logger)}
	reflectionv1.RegisterServerReflectionServer(s.grpc, reflection.NewServerV1(ropts))
	reflectionv1alpha.RegisterServerReflectionServer(s.grpc, reflection.NewServer(ropts))
	if opts.Metrics != nil {
		opts.Metrics.InitializeMetrics(s.grpc)
	}
	s.setServing(true)
	if opts.Probe == nil {
		close(s.probeDone)
	} else {
		every := opts.ProbeInterval
		if every <= 0 {
			every = 2 * time.Second
		}
		go s.probeLoop(opts.Probe, every)
	}
	return s
}

// setServing sets the status of the server and of the AgentService.
func (s *Server) setServing(ok bool) {
	st := healthpb.HealthCheckResponse_SERVING
	if !ok {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(agentdv1.AgentService_ServiceDesc.ServiceName, st)
}

// probeLoop reports NOT_SERVING while probe fails, until Shutdown.
func (s *Server) probeLoop(probe func(context.Context) error, every time.Duration) {
	defer close(s.probeDone)
	t := time.NewTicker(every)
	defer t.Stop()
	serving := true
	for {
		select {
		case <-s.stopProbe:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		err := probe(ctx)
		cancel()
		if ok := err == nil; ok != serving {
			select {
			case <-s.stopProbe: // Shutdown owns the status now
				return
			default:
			}
			serving = ok
			s.setServing(ok)
			if ok {
				s.logger.Info("the database is reachable again; serving")
			} else {
				s.logger.Error("the database is unreachable; health reports NOT_SERVING", "err", err)
			}
		}
	}
}

// Serve accepts connections on lis until Shutdown is called. It returns nil
// after a shutdown and the listener's error otherwise.
func (s *Server) Serve(lis net.Listener) error {
	if err := s.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve gRPC on %s: %w", lis.Addr(), err)
	}
	return nil
}

// Shutdown reports NOT_SERVING to health checks, stops accepting new calls
// and waits for in-flight calls to finish until ctx is done; then it closes
// the remaining ones.
func (s *Server) Shutdown(ctx context.Context) {
	select {
	case <-s.stopProbe:
	default:
		close(s.stopProbe)
	}
	<-s.probeDone
	s.health.Shutdown()
	s.shutdownWeb(ctx)
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.logger.Warn("graceful shutdown timed out; closing the remaining calls")
		s.grpc.Stop()
		<-done
	}
}

// ShutdownTimeout is how long Shutdown callers usually let in-flight streams
// finish before closing them.
const ShutdownTimeout = 10 * time.Second

// slogAdapter lets go-grpc-middleware's logging interceptor write through
// log/slog.
// callFields are the fields of a call's log line from its context: the
// trace it belongs to and the caller's tenant.
func callFields(ctx context.Context) logging.Fields {
	var f logging.Fields
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		f = append(f, "trace_id", sc.TraceID().String())
	}
	if c, ok := ctx.Value(callerKey{}).(Caller); ok {
		f = append(f, "tenant", c.Tenant)
	}
	return f
}

func slogAdapter(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}
