package service_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider/faux"
	"github.com/agentd/agentd/service"
)

// outcome is what a call answered, in terms every protocol can express:
// the status code, the ErrorInfo reason and the message of a refusal, and
// for a stream the kinds of its events.
type outcome struct {
	Code    codes.Code
	Reason  string
	Message string
	Events  []string
}

// outcomeOf reads a gRPC or Connect error.
func outcomeOf(err error) outcome {
	if err == nil {
		return outcome{}
	}
	var details []any
	var o outcome
	var ce *connect.Error
	if errors.As(err, &ce) {
		o = outcome{Code: codes.Code(ce.Code()), Message: ce.Message()}
		for _, d := range ce.Details() {
			v, derr := d.Value()
			if derr == nil {
				details = append(details, v)
			}
		}
	} else {
		st := status.Convert(err)
		o = outcome{Code: st.Code(), Message: st.Message()}
		details = st.Details()
	}
	for _, d := range details {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			o.Reason = info.GetReason()
		}
	}
	return o
}

// eventKinds names the events of a run stream, for comparing streams.
func eventKinds(evs []*agentdv1.AgentEvent) []string {
	var kinds []string
	for _, ev := range evs {
		if f := ev.ProtoReflect().WhichOneof(ev.ProtoReflect().Descriptor().Oneofs().ByName("event")); f != nil {
			kinds = append(kinds, string(f.Name()))
		}
	}
	return kinds
}

// protocolClient makes the calls of the table over one protocol.
type protocolClient interface {
	createSession(ctx context.Context, token string, req *agentdv1.CreateSessionRequest) (*agentdv1.CreateSessionResponse, error)
	getSession(ctx context.Context, token string, req *agentdv1.GetSessionRequest) (*agentdv1.GetSessionResponse, error)
	prompt(ctx context.Context, token string, req *agentdv1.PromptRequest) ([]*agentdv1.AgentEvent, error)
}

// grpcClient is the native gRPC client on the gRPC listener: the
// reference every other protocol is compared with.
type grpcClient struct{ c agentdv1.AgentServiceClient }

func (g grpcClient) createSession(ctx context.Context, token string, req *agentdv1.CreateSessionRequest) (*agentdv1.CreateSessionResponse, error) {
	return g.c.CreateSession(withToken(ctx, token), req)
}

func (g grpcClient) getSession(ctx context.Context, token string, req *agentdv1.GetSessionRequest) (*agentdv1.GetSessionResponse, error) {
	return g.c.GetSession(withToken(ctx, token), req)
}

func (g grpcClient) prompt(ctx context.Context, token string, req *agentdv1.PromptRequest) ([]*agentdv1.AgentEvent, error) {
	st, err := g.c.Prompt(withToken(ctx, token), req)
	if err != nil {
		return nil, err
	}
	return drain(st)
}

func withToken(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return as(ctx, token)
}

// connectClient speaks gRPC, gRPC-Web or Connect (by its options) to the
// HTTP listener with connect-go's generic client.
type connectClient struct {
	http    connect.HTTPClient
	baseURL string
	opts    []connect.ClientOption
}

func procedure(method string) string {
	return "/" + agentdv1.AgentService_ServiceDesc.ServiceName + "/" + method
}

func unaryCall[Req, Res any](ctx context.Context, c connectClient, method, token string, req *Req) (*Res, error) {
	client := connect.NewClient[Req, Res](c.http, c.baseURL+procedure(method), c.opts...)
	r := connect.NewRequest(req)
	if token != "" {
		r.Header().Set("Authorization", "Bearer "+token)
	}
	res, err := client.CallUnary(ctx, r)
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func (c connectClient) createSession(ctx context.Context, token string, req *agentdv1.CreateSessionRequest) (*agentdv1.CreateSessionResponse, error) {
	return unaryCall[agentdv1.CreateSessionRequest, agentdv1.CreateSessionResponse](ctx, c, "CreateSession", token, req)
}

func (c connectClient) getSession(ctx context.Context, token string, req *agentdv1.GetSessionRequest) (*agentdv1.GetSessionResponse, error) {
	return unaryCall[agentdv1.GetSessionRequest, agentdv1.GetSessionResponse](ctx, c, "GetSession", token, req)
}

func (c connectClient) prompt(ctx context.Context, token string, req *agentdv1.PromptRequest) ([]*agentdv1.AgentEvent, error) {
	client := connect.NewClient[agentdv1.PromptRequest, agentdv1.AgentEvent](c.http, c.baseURL+procedure("Prompt"), c.opts...)
	r := connect.NewRequest(req)
	if token != "" {
		r.Header().Set("Authorization", "Bearer "+token)
	}
	st, err := client.CallServerStream(ctx, r)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var evs []*agentdv1.AgentEvent
	for st.Receive() {
		evs = append(evs, st.Msg())
	}
	return evs, st.Err()
}

// restClient calls the google.api.http paths with JSON, as a browser's
// fetch or curl would.
type restClient struct {
	http    *http.Client
	baseURL string
}

// do sends body (nil for none) and decodes the answer into res, or the
// google.rpc.Status of a refusal into an error.
func (r restClient) do(ctx context.Context, method, path, token string, body, res proto.Message) error {
	var in io.Reader
	if body != nil {
		data, err := protojson.Marshal(body)
		if err != nil {
			return err
		}
		in = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.baseURL+path, in)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var st spb.Status
		if err := protojson.Unmarshal(data, &st); err != nil {
			return fmt.Errorf("HTTP %d with a body that is no google.rpc.Status (%v): %s", resp.StatusCode, err, data)
		}
		return status.FromProto(&st).Err()
	}
	return protojson.Unmarshal(data, res)
}

func (r restClient) createSession(ctx context.Context, token string, req *agentdv1.CreateSessionRequest) (*agentdv1.CreateSessionResponse, error) {
	var res agentdv1.CreateSessionResponse
	return &res, r.do(ctx, http.MethodPost, "/v1/sessions", token, req, &res)
}

func (r restClient) getSession(ctx context.Context, token string, req *agentdv1.GetSessionRequest) (*agentdv1.GetSessionResponse, error) {
	var res agentdv1.GetSessionResponse
	return &res, r.do(ctx, http.MethodGet, "/v1/sessions/"+req.GetSessionId(), token, nil, &res)
}

func (r restClient) prompt(ctx context.Context, token string, req *agentdv1.PromptRequest) ([]*agentdv1.AgentEvent, error) {
	var res agentdv1.AgentEvent
	err := r.do(ctx, http.MethodPost, "/v1/sessions/"+req.GetSessionId()+":prompt", token, req, &res)
	return nil, err
}

// webHarness is a harness with two tenants whose server also serves the
// HTTP protocols on a second listener.
func webHarness(t *testing.T, opts service.WebOptions) (*harness, string) {
	t.Helper()
	h := newHarness(t, agent.Options{}, service.ServerOptions{Auth: &service.AuthConfig{Tokens: []service.TokenGrant{
		{SHA256: tokenHash("acme-token"), Tenant: "acme", Role: service.RoleUser},
		{SHA256: tokenHash("globex-token"), Tenant: "globex", Role: service.RoleUser},
	}}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- h.d.ServeWeb(lis, opts) }()
	t.Cleanup(func() {
		h.stop() // shuts the HTTP server down too
		if err := <-served; err != nil {
			t.Errorf("serve HTTP: %v", err)
		}
	})
	return h, "http://" + lis.Addr().String()
}

// h2c is an HTTP client speaking HTTP/2 without TLS, which gRPC needs.
func h2c() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// Every protocol answers the same calls with the same statuses, ErrorInfo
// reasons, messages and events as native gRPC: one set of interceptors
// (auth, tenants, validation, typed refusals) serves them all. REST takes
// unary calls only, and says so for a stream.
func TestEveryProtocolAnswersAlike(t *testing.T) {
	h, base := webHarness(t, service.WebOptions{})
	http1 := &http.Client{}
	clients := []struct {
		name string
		c    protocolClient
	}{
		{"grpc-native", grpcClient{h.client}},
		{"grpc", connectClient{h2c(), base, []connect.ClientOption{connect.WithGRPC()}}},
		{"grpcweb", connectClient{http1, base, []connect.ClientOption{connect.WithGRPCWeb()}}},
		{"connect", connectClient{http1, base, nil}},
		{"connect-json", connectClient{http1, base, []connect.ClientOption{connect.WithProtoJSON()}}},
		{"rest", restClient{http1, base}},
	}
	ctx := context.Background()
	echo := &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{faux.Message(faux.Text("hi"))}}}
	calls := []struct {
		name string
		call func(t *testing.T, c protocolClient) outcome
	}{
		{"CreateSession and GetSession", func(t *testing.T, c protocolClient) outcome {
			created, err := c.createSession(ctx, "acme-token", &agentdv1.CreateSessionRequest{Title: "mine", Config: echo})
			if err != nil {
				return outcomeOf(err)
			}
			got, err := c.getSession(ctx, "acme-token", &agentdv1.GetSessionRequest{SessionId: created.GetSession().GetId()})
			if err == nil && got.GetSession().GetTitle() != "mine" {
				t.Errorf("GetSession title %q, want mine", got.GetSession().GetTitle())
			}
			return outcomeOf(err)
		}},
		{"GetSession of an unknown id", func(t *testing.T, c protocolClient) outcome {
			_, err := c.getSession(ctx, "acme-token", &agentdv1.GetSessionRequest{SessionId: "s_unknown"})
			return outcomeOf(err)
		}},
		{"GetSession of another tenant's session", func(t *testing.T, c protocolClient) outcome {
			created, err := c.createSession(ctx, "globex-token", &agentdv1.CreateSessionRequest{Config: echo})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.getSession(ctx, "acme-token", &agentdv1.GetSessionRequest{SessionId: created.GetSession().GetId()})
			o := outcomeOf(err)
			// The message names the id, which differs per protocol.
			o.Message = strings.ReplaceAll(o.Message, created.GetSession().GetId(), "<id>")
			return o
		}},
		{"CreateSession with a bad field", func(t *testing.T, c protocolClient) outcome {
			_, err := c.createSession(ctx, "acme-token", &agentdv1.CreateSessionRequest{SessionId: "not an id!", Config: echo})
			return outcomeOf(err)
		}},
		{"CreateSession without a token", func(t *testing.T, c protocolClient) outcome {
			_, err := c.createSession(ctx, "", &agentdv1.CreateSessionRequest{Config: echo})
			return outcomeOf(err)
		}},
		{"CreateSession with a wrong token", func(t *testing.T, c protocolClient) outcome {
			_, err := c.createSession(ctx, "stolen", &agentdv1.CreateSessionRequest{Config: echo})
			return outcomeOf(err)
		}},
		{"Prompt stream", func(t *testing.T, c protocolClient) outcome {
			created, err := c.createSession(ctx, "acme-token", &agentdv1.CreateSessionRequest{Config: echo})
			if err != nil {
				t.Fatal(err)
			}
			evs, err := c.prompt(ctx, "acme-token", &agentdv1.PromptRequest{SessionId: created.GetSession().GetId(), Content: texts("hello")})
			o := outcomeOf(err)
			o.Events = eventKinds(evs)
			return o
		}},
		{"Prompt without a token", func(t *testing.T, c protocolClient) outcome {
			evs, err := c.prompt(ctx, "", &agentdv1.PromptRequest{SessionId: "s_unknown", Content: texts("hello")})
			o := outcomeOf(err)
			o.Events = eventKinds(evs)
			return o
		}},
	}
	// REST has no server streams (vanguard transcodes them only for
	// google.api.HttpBody answers): a stream is refused as such.
	restRefusesStreams := map[string]bool{"Prompt stream": true, "Prompt without a token": true}
	for _, call := range calls {
		t.Run(call.name, func(t *testing.T) {
			want := call.call(t, clients[0].c)
			if call.name == "CreateSession and GetSession" && want.Code != codes.OK {
				t.Fatalf("native gRPC: %+v", want)
			}
			if call.name != "CreateSession and GetSession" && call.name != "Prompt stream" && (want.Code == codes.OK || want.Reason == "") {
				t.Fatalf("native gRPC answered %+v, want a typed refusal", want)
			}
			if call.name == "Prompt stream" && (len(want.Events) < 3 || want.Events[len(want.Events)-1] != "agent_end") {
				t.Fatalf("native gRPC streamed %v, want a run ending with agent_end", want.Events)
			}
			for _, pc := range clients[1:] {
				got := call.call(t, pc.c)
				if pc.name == "rest" && restRefusesStreams[call.name] {
					if !strings.Contains(got.Message, "HTTP 415") || !strings.Contains(got.Message, "not supported with REST") {
						t.Errorf("rest: a server stream answered %+v, want HTTP 415 saying REST has no streams", got)
					}
					continue
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s answered otherwise than native gRPC (-grpc +%s):\n%s", pc.name, pc.name, diff)
				}
			}
		})
	}
}
