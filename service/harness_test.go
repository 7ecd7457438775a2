package service_test

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	"github.com/agentd/agentd/daemon"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/service"
)

// harness runs a real agentd service on a loopback port over a SQLite file
// (or, with dsn set, a PostgreSQL database) and talks to it with the
// generated client.
type harness struct {
	t      testing.TB
	dbPath string
	dsn    string
	opts   agent.Options
	svopts service.Options
	sopts  service.ServerOptions

	store  persistence.Store
	agent  *agent.Agent
	svc    *service.Service
	d      *daemon.Daemon
	served chan error
	conn   *grpc.ClientConn
	client agentdv1.AgentServiceClient
	addr   string
}

// newHarness starts agentd with the agent's options, the server's, and
// optionally the service's (whose Metrics default to the agent's).
func newHarness(t testing.TB, opts agent.Options, sopts service.ServerOptions, svopts ...service.Options) *harness {
	t.Helper()
	return newHarnessOn(t, "", opts, sopts, svopts...)
}

// newHarnessOn is newHarness on the PostgreSQL database dsn, or on a new
// SQLite file when dsn is empty.
func newHarnessOn(t testing.TB, dsn string, opts agent.Options, sopts service.ServerOptions, svopts ...service.Options) *harness {
	t.Helper()
	h := &harness{t: t, dbPath: filepath.Join(t.TempDir(), "agentd.db"), dsn: dsn, opts: opts, sopts: sopts}
	if len(svopts) > 0 {
		h.svopts = svopts[0]
	}
	if m, ok := opts.Metrics.(*metrics.Metrics); ok && h.svopts.Metrics == nil {
		h.svopts.Metrics = m
	}
	h.start()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) start() {
	h.t.Helper()
	dsn, engine := h.dbPath, daemon.SQLite
	if h.dsn != "" {
		dsn, engine = h.dsn, daemon.Postgres
	}
	d, err := daemon.New(context.Background(), dsn, daemon.WithEngine(engine),
		daemon.WithAgentOptions(h.opts), daemon.WithServiceOptions(h.svopts), daemon.WithServerOptions(h.sopts))
	if err != nil {
		h.t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = d.Shutdown(context.Background())
		h.t.Fatal(err)
	}
	h.d = d
	h.store, h.agent, h.svc, h.addr = d.Store(), d.Agent(), d.Service(), lis.Addr().String()
	h.served = make(chan error, 1)
	go func() { h.served <- d.Serve(lis) }()
	h.conn, err = grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		h.t.Fatal(err)
	}
	h.client = agentdv1.NewAgentServiceClient(h.conn)
}

// stop shuts everything down the way cmd/agentd does.
func (h *harness) stop() {
	if h.d == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.conn.Close()
	if err := h.d.Shutdown(ctx); err != nil {
		h.t.Errorf("shutdown: %v", err)
	}
	if err := <-h.served; err != nil {
		h.t.Errorf("serve: %v", err)
	}
	h.d = nil
}

func (h *harness) restart() {
	h.t.Helper()
	h.stop()
	h.start()
}

func (h *harness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	h.t.Cleanup(cancel)
	return ctx
}

func (h *harness) createSession(cfg *agentdv1.SessionConfig) string {
	h.t.Helper()
	resp, err := h.client.CreateSession(h.ctx(), &agentdv1.CreateSessionRequest{Config: cfg})
	if err != nil {
		h.t.Fatalf("CreateSession: %v", err)
	}
	return resp.GetSession().GetId()
}

// prompt runs a prompt to agent_end and returns its events.
func (h *harness) prompt(sessionID, text string) []*agentdv1.AgentEvent {
	h.t.Helper()
	return h.promptWith(&agentdv1.PromptRequest{SessionId: sessionID, Content: texts(text)})
}

// promptWith runs a Prompt request to agent_end and returns its events.
func (h *harness) promptWith(req *agentdv1.PromptRequest) []*agentdv1.AgentEvent {
	h.t.Helper()
	stream, err := h.client.Prompt(h.ctx(), req)
	if err != nil {
		h.t.Fatal(err)
	}
	evs, err := drain(stream)
	if err != nil {
		h.t.Fatalf("Prompt stream: %v", err)
	}
	return evs
}

func (h *harness) transcript(sessionID string) []*agentdv1.Entry {
	h.t.Helper()
	var all []*agentdv1.Entry
	token := ""
	for {
		resp, err := h.client.GetTranscript(h.ctx(), &agentdv1.GetTranscriptRequest{SessionId: sessionID, PageToken: token, PageSize: 3})
		if err != nil {
			h.t.Fatalf("GetTranscript: %v", err)
		}
		all = append(all, resp.GetEntries()...)
		if token = resp.GetNextPageToken(); token == "" {
			return all
		}
	}
}

func (h *harness) context(sessionID string) *agentdv1.Context {
	h.t.Helper()
	resp, err := h.client.GetContext(h.ctx(), &agentdv1.GetContextRequest{SessionId: sessionID})
	if err != nil {
		h.t.Fatalf("GetContext: %v", err)
	}
	return resp.GetContext()
}

// drain reads a stream to its end.
func drain(stream grpc.ServerStreamingClient[agentdv1.AgentEvent]) ([]*agentdv1.AgentEvent, error) {
	var evs []*agentdv1.AgentEvent
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

// recvUntil reads events until pred matches one, returning all read.
func recvUntil(t *testing.T, stream grpc.ServerStreamingClient[agentdv1.AgentEvent], pred func(*agentdv1.AgentEvent) bool) []*agentdv1.AgentEvent {
	t.Helper()
	var evs []*agentdv1.AgentEvent
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("stream ended before the awaited event: %v (after %s)", err, kinds(evs))
		}
		evs = append(evs, ev)
		if pred(ev) {
			return evs
		}
	}
}

func texts(ss ...string) []*agentdv1.ContentBlock {
	out := make([]*agentdv1.ContentBlock, len(ss))
	for i, s := range ss {
		out[i] = &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}
	}
	return out
}

func textAnswer(s string) *agentdv1.AssistantMessage {
	return &agentdv1.AssistantMessage{Content: texts(s)}
}

func toolCallAnswer(t testing.TB, id, name string, args map[string]any) *agentdv1.AssistantMessage {
	st, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	return &agentdv1.AssistantMessage{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_ToolCall{
		ToolCall: &agentdv1.ToolCall{Id: id, Name: name, Arguments: st}}}}}
}

// kinds names each event's kind, for readable failures.
func kinds(evs []*agentdv1.AgentEvent) string {
	names := make([]string, len(evs))
	for i, ev := range evs {
		names[i] = eventKind(ev)
	}
	return strings.Join(names, " ")
}

func eventKind(ev *agentdv1.AgentEvent) string {
	fd := ev.ProtoReflect().WhichOneof(ev.ProtoReflect().Descriptor().Oneofs().ByName("event"))
	if fd == nil {
		return "none"
	}
	return string(fd.Name())
}

func wantCode(t *testing.T, err error, code codes.Code, mention string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want code %v", err, code)
	}
	if mention != "" && !strings.Contains(status.Convert(err).Message(), mention) {
		t.Fatalf("message %q does not mention %q", status.Convert(err).Message(), mention)
	}
}

// gate is a tool that blocks until released (or its context ends), so a
// test controls when a run moves on.
type gate struct {
	entered chan string
	release chan struct{}
	once    sync.Once
}

func newGate() *gate {
	return &gate{entered: make(chan string, 16), release: make(chan struct{})}
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

func (g *gate) tool() agentloop.Tool {
	params, _ := structpb.NewStruct(map[string]any{"type": "object"})
	return testkit.ReadOnlyTool{FuncTool: agentloop.FuncTool{
		Def: &agentdv1.Tool{Name: "wait", Description: "Wait for the test.", Parameters: params},
		Fn: func(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
			g.entered <- call.ID
			select {
			case <-g.release:
				return agentloop.Result{Content: texts("waited")}, nil
			case <-ctx.Done():
				return agentloop.Result{}, ctx.Err()
			}
		},
	}}
}

// listSessions lists every session.
func (h *harness) listSessions() []*agentdv1.Session {
	h.t.Helper()
	var all []*agentdv1.Session
	token := ""
	for {
		resp, err := h.client.ListSessions(h.ctx(), &agentdv1.ListSessionsRequest{PageToken: token})
		if err != nil {
			h.t.Fatalf("ListSessions: %v", err)
		}
		all = append(all, resp.GetSessions()...)
		if token = resp.GetNextPageToken(); token == "" {
			return all
		}
	}
}
