package service_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startServer serves svc on a free loopback port and returns a connected
// client; both are closed when the test ends.
func startServer(t *testing.T, svc agentdv1.AgentServiceServer) (*grpc.ClientConn, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := service.NewServer(svc, service.ServerOptions{Logger: logger})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-served; err != nil {
			t.Errorf("Serve returned %v after Shutdown", err)
		}
	})
	return conn, logs
}

func TestServerReflectionListsAgentService(t *testing.T) {
	conn, _ := startServer(t, newService(t, service.Options{}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"agentd.v1.AgentService", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, want it to include %s", names, want)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("reflection stream did not end cleanly: %v", err)
	}
}

func TestServerHealthServing(t *testing.T) {
	conn, _ := startServer(t, newService(t, service.Options{}))
	client := healthpb.NewHealthClient(conn)
	for _, svc := range []string{"", "agentd.v1.AgentService"} {
		resp, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("Check(%q): %v", svc, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q) = %v, want SERVING", svc, resp.GetStatus())
		}
	}
	_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "no.such.Service"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("Check(unknown service) = %v, want NotFound", err)
	}
}

func TestServerUnimplementedRPC(t *testing.T) {
	conn, _ := startServer(t, newService(t, service.Options{}))
	client := agentdv1.NewAgentServiceClient(conn)
	_, err := client.ResolveApproval(context.Background(), &agentdv1.ResolveApprovalRequest{SessionId: "s"})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("ResolveApproval = %v, want Unimplemented", err)
	}
}

// panickingService panics in one unary and one streaming handler.
type panickingService struct {
	agentdv1.UnimplementedAgentServiceServer
}

func (panickingService) GetSession(context.Context, *agentdv1.GetSessionRequest) (*agentdv1.GetSessionResponse, error) {
	panic("handler bug")
}

func (panickingService) Attach(*agentdv1.AttachRequest, grpc.ServerStreamingServer[agentdv1.AgentEvent]) error {
	panic("stream handler bug")
}

func TestServerRecoversFromHandlerPanics(t *testing.T) {
	conn, logs := startServer(t, panickingService{})
	client := agentdv1.NewAgentServiceClient(conn)

	_, err := client.GetSession(context.Background(), &agentdv1.GetSessionRequest{SessionId: "s"})
	if status.Code(err) != codes.Internal {
		t.Fatalf("GetSession after panic = %v, want Internal", err)
	}
	stream, err := client.Attach(context.Background(), &agentdv1.AttachRequest{SessionId: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Internal {
		t.Fatalf("Attach after panic = %v, want Internal", err)
	}
	// The server is still alive.
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health after panics: %v", err)
	}
	for _, want := range []string{"handler bug", "stream handler bug"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log does not mention the panic %q:\n%s", want, logs.String())
		}
	}
}

// blockingService holds Attach open until the client cancels or the server
// stops it.
type blockingService struct {
	agentdv1.UnimplementedAgentServiceServer
	started chan struct{}
}

func (b blockingService) Attach(_ *agentdv1.AttachRequest, stream grpc.ServerStreamingServer[agentdv1.AgentEvent]) error {
	close(b.started)
	<-stream.Context().Done()
	return stream.Context().Err()
}

func TestShutdownClosesStreamsThatOutliveTheGracePeriod(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := blockingService{started: make(chan struct{})}
	srv := service.NewServer(svc, service.ServerOptions{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := agentdv1.NewAgentServiceClient(conn).Attach(context.Background(), &agentdv1.AttachRequest{SessionId: "s"})
	if err != nil {
		t.Fatal(err)
	}
	<-svc.started

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	srv.Shutdown(ctx)
	if err := <-served; err != nil {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable && status.Code(err) != codes.Canceled {
		t.Fatalf("stream after forced shutdown = %v, want Unavailable or Canceled", err)
	}
}
