package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Server is agentd's gRPC server: the AgentService plus the standard health
// and reflection services, behind logging and panic-recovery interceptors.
type Server struct {
	grpc   *grpc.Server
	health *health.Server
	logger *slog.Logger
}

// NewServer assembles a gRPC server around svc. Extra grpc.ServerOptions (TLS
// credentials, message size limits, keepalive) are appended after agentd's
// own interceptors.
func NewServer(logger *slog.Logger, svc agentdv1.AgentServiceServer, extra ...grpc.ServerOption) *Server {
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
	}
	recoverOpts := []recovery.Option{
		recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
			logger.ErrorContext(ctx, "panic in gRPC handler", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			return status.Error(codes.Internal, "internal error: the server recovered from a panic while handling this call; see the agentd log")
		}),
	}
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(
			logging.UnaryServerInterceptor(slogAdapter(logger), logOpts...),
			recovery.UnaryServerInterceptor(recoverOpts...),
		),
		grpc.ChainStreamInterceptor(
			logging.StreamServerInterceptor(slogAdapter(logger), logOpts...),
			recovery.StreamServerInterceptor(recoverOpts...),
		),
	}
	opts = append(opts, extra...)

	s := &Server{
		grpc:   grpc.NewServer(opts...),
		health: health.NewServer(),
		logger: logger,
	}
	agentdv1.RegisterAgentServiceServer(s.grpc, svc)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(agentdv1.AgentService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s
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
	s.health.Shutdown()
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
func slogAdapter(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}
