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
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service"
)

func TestMain(m *testing.M) {
	if runBenchRole() {
		return
	}
	// The Gemini SDK's dependencies start an opencensus worker when the
	// package loads; it is not ours to stop.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
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
	conn, _ := startServer(t, newService(t))
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
	// The descriptors carry the proto's comments, so grpcurl describe
	// shows the API documentation.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "agentd.v1.AgentService"},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	documented := false
	for _, raw := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		var fd descriptorpb.FileDescriptorProto
		if err := proto.Unmarshal(raw, &fd); err != nil {
			t.Fatal(err)
		}
		for _, loc := range fd.GetSourceCodeInfo().GetLocation() {
			if strings.Contains(loc.GetLeadingComments(), "GetTree returns every entry of the session") {
				documented = true
			}
		}
	}
	if !documented {
		t.Error("reflection serves the AgentService without the proto's comments")
	}
	// Services outside the contract still resolve.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "grpc.health.v1.Health"},
	}); err != nil {
		t.Fatal(err)
	}
	if resp, err = stream.Recv(); err != nil || len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("reflection cannot resolve grpc.health.v1.Health: %v %v", resp.GetErrorResponse(), err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("reflection stream did not end cleanly: %v", err)
	}
}

func TestServerHealthServing(t *testing.T) {
	conn, _ := startServer(t, newService(t))
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

// TestEveryRPCIsImplemented calls every AgentService method with an empty
// request: each must answer with its own validation, not UNIMPLEMENTED.
func TestEveryRPCIsImplemented(t *testing.T) {
	conn, _ := startServer(t, newService(t))
	c := agentdv1.NewAgentServiceClient(conn)
	ctx := context.Background()
	recv := func(s interface {
		Recv() (*agentdv1.AgentEvent, error)
	}, err error) error {
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	calls := map[string]func() error{
		"CreateSession": func() error { _, err := c.CreateSession(ctx, &agentdv1.CreateSessionRequest{}); return err },
		"GetSession":    func() error { _, err := c.GetSession(ctx, &agentdv1.GetSessionRequest{}); return err },
		"ListSessions":  func() error { _, err := c.ListSessions(ctx, &agentdv1.ListSessionsRequest{}); return err },
		"DeleteSession": func() error { _, err := c.DeleteSession(ctx, &agentdv1.DeleteSessionRequest{}); return err },
		"Prompt":        func() error { return recv(c.Prompt(ctx, &agentdv1.PromptRequest{})) },
		"Continue":      func() error { return recv(c.Continue(ctx, &agentdv1.ContinueRequest{})) },
		"Steer":         func() error { _, err := c.Steer(ctx, &agentdv1.SteerRequest{}); return err },
		"FollowUp":      func() error { _, err := c.FollowUp(ctx, &agentdv1.FollowUpRequest{}); return err },
		"ClearQueue":    func() error { _, err := c.ClearQueue(ctx, &agentdv1.ClearQueueRequest{}); return err },
		"Abort":         func() error { _, err := c.Abort(ctx, &agentdv1.AbortRequest{}); return err },
		"Attach":        func() error { return recv(c.Attach(ctx, &agentdv1.AttachRequest{})) },
		"SubmitToolResult": func() error {
			_, err := c.SubmitToolResult(ctx, &agentdv1.SubmitToolResultRequest{})
			return err
		},
		"ResolveApproval": func() error { _, err := c.ResolveApproval(ctx, &agentdv1.ResolveApprovalRequest{}); return err },
		"ListApprovalRules": func() error {
			_, err := c.ListApprovalRules(ctx, &agentdv1.ListApprovalRulesRequest{})
			return err
		},
		"DeleteApprovalRule": func() error {
			_, err := c.DeleteApprovalRule(ctx, &agentdv1.DeleteApprovalRuleRequest{})
			return err
		},
		"ResolveInDoubt": func() error { _, err := c.ResolveInDoubt(ctx, &agentdv1.ResolveInDoubtRequest{}); return err },
		"AppendMessages": func() error { _, err := c.AppendMessages(ctx, &agentdv1.AppendMessagesRequest{}); return err },
		"GetTranscript":  func() error { _, err := c.GetTranscript(ctx, &agentdv1.GetTranscriptRequest{}); return err },
		"GetContext":     func() error { _, err := c.GetContext(ctx, &agentdv1.GetContextRequest{}); return err },
		"ListModels":     func() error { _, err := c.ListModels(ctx, &agentdv1.ListModelsRequest{}); return err },
		"GetRun":         func() error { _, err := c.GetRun(ctx, &agentdv1.GetRunRequest{}); return err },
		"ListRuns":       func() error { _, err := c.ListRuns(ctx, &agentdv1.ListRunsRequest{}); return err },
		"GetTenantUsage": func() error {
			_, err := c.GetTenantUsage(ctx, &agentdv1.GetTenantUsageRequest{})
			return err
		},
		"ListToolSources": func() error {
			_, err := c.ListToolSources(ctx, &agentdv1.ListToolSourcesRequest{})
			return err
		},
		"UpdateSession": func() error { _, err := c.UpdateSession(ctx, &agentdv1.UpdateSessionRequest{}); return err },
		"Compact":       func() error { return recv(c.Compact(ctx, &agentdv1.CompactRequest{})) },
		"SubmitContext": func() error { _, err := c.SubmitContext(ctx, &agentdv1.SubmitContextRequest{}); return err },
		"SubmitHookResult": func() error {
			_, err := c.SubmitHookResult(ctx, &agentdv1.SubmitHookResultRequest{})
			return err
		},
		"GetTree":       func() error { _, err := c.GetTree(ctx, &agentdv1.GetTreeRequest{}); return err },
		"SetLabel":      func() error { _, err := c.SetLabel(ctx, &agentdv1.SetLabelRequest{}); return err },
		"Navigate":      func() error { _, err := c.Navigate(ctx, &agentdv1.NavigateRequest{}); return err },
		"RedactEntries": func() error { _, err := c.RedactEntries(ctx, &agentdv1.RedactEntriesRequest{}); return err },
		"ForkSession":   func() error { _, err := c.ForkSession(ctx, &agentdv1.ForkSessionRequest{}); return err },
		"ExportSession": func() error {
			st, err := c.ExportSession(ctx, &agentdv1.ExportSessionRequest{})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
		"ImportSession": func() error {
			st, err := c.ImportSession(ctx)
			if err != nil {
				return err
			}
			_, err = st.CloseAndRecv()
			return err
		}, "WatchSession": func() error {
			st, err := c.WatchSession(ctx, &agentdv1.WatchSessionRequest{})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
		// The two watches below accept an empty request: their first
		// message is "started".
		"WatchSessions": func() error {
			st, err := c.WatchSessions(ctx, &agentdv1.WatchSessionsRequest{})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
		"ListPendingInteractions": func() error {
			_, err := c.ListPendingInteractions(ctx, &agentdv1.ListPendingInteractionsRequest{})
			return err
		},
		"WatchPendingInteractions": func() error {
			st, err := c.WatchPendingInteractions(ctx, &agentdv1.WatchPendingInteractionsRequest{})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
	}
	methods := agentdv1.File_agentd_v1_service_proto.Services().ByName("AgentService").Methods()
	if methods.Len() != len(calls) {
		t.Fatalf("%d RPCs in the contract, %d calls in this test", methods.Len(), len(calls))
	}
	for i := range methods.Len() {
		name := string(methods.Get(i).Name())
		call, ok := calls[name]
		if !ok {
			t.Errorf("no call for RPC %s", name)
			continue
		}
		if err := call(); status.Code(err) == codes.Unimplemented {
			t.Errorf("%s answered UNIMPLEMENTED: %v", name, err)
		}
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
