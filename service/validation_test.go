package service_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/service"
)

// streamErr opens a server stream and returns the error of its first
// receive, which is where a refused streaming call reports its status.
func streamErr[T any](s grpc.ServerStreamingClient[T], err error) error {
	if err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}

func TestBadRequestsGetPreciseStatusesAndChangeNothing(t *testing.T) {
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{testkit.ReadFileTool(seedFiles)}}, service.ServerOptions{},
		service.Options{Limits: service.Limits{MaxTextBytes: 64}})
	id := h.createSession(seedConfig(t))
	h.prompt(id, "读取 src/config.ts")
	empty := h.createSession(&agentdv1.SessionConfig{})

	ctx := h.ctx()
	c := h.client
	user := func(blocks ...*agentdv1.ContentBlock) *agentdv1.AgentMessage {
		return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: blocks}}}
	}
	image := func(mime string, data []byte) *agentdv1.ContentBlock {
		return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Image{Image: &agentdv1.ImageContent{MimeType: mime, Data: data}}}
	}
	params, _ := structpb.NewStruct(map[string]any{"type": "object"})
	cfgWith := func(mod func(*agentdv1.SessionConfig)) *agentdv1.CreateSessionRequest {
		cfg := seedConfig(t)
		mod(cfg)
		return &agentdv1.CreateSessionRequest{Config: cfg}
	}
	create := func(req *agentdv1.CreateSessionRequest) error { _, err := c.CreateSession(ctx, req); return err }

	tests := []struct {
		name    string
		call    func() error
		code    codes.Code
		mention string
	}{
		{"unknown provider", func() error {
			return create(cfgWith(func(c *agentdv1.SessionConfig) { c.Model = &agentdv1.ModelRef{Provider: "nope", Id: "x"} }))
		}, codes.InvalidArgument, "config.model.provider"},
		{"unknown faux model", func() error {
			return create(cfgWith(func(c *agentdv1.SessionConfig) { c.Model = &agentdv1.ModelRef{Provider: "faux", Id: "gpt-9"} }))
		}, codes.InvalidArgument, "config.model.id"},
		{"faux provider without model id", func() error {
			return create(cfgWith(func(c *agentdv1.SessionConfig) { c.Model = &agentdv1.ModelRef{Provider: "faux"} }))
		}, codes.InvalidArgument, "config.model.id"},
		{"compaction model without id", func() error {
			return create(cfgWith(func(c *agentdv1.SessionConfig) {
				c.Compaction = &agentdv1.CompactionSettings{Model: &agentdv1.ModelRef{Provider: "faux"}}
			}))
		}, codes.InvalidArgument, "config.compaction.model.id"},
		{"update to a model without id", func() error {
			_, err := c.UpdateSession(ctx, &agentdv1.UpdateSessionRequest{SessionId: id,
				Config:     &agentdv1.SessionConfig{Model: &agentdv1.ModelRef{Provider: "faux"}},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"config.model"}}})
			return err
		}, codes.InvalidArgument, "config.model.id"},
		{"model id without provider", func() error {
			return create(cfgWith(func(c *agentdv1.SessionConfig) { c.Model = &agentdv1.ModelRef{Id: "faux-1"} }))
		}, codes.InvalidArgument, "config.model.provider"},
		{"bad tool name", func() error {
			return create(cfgWith(func(c *agentdv1.SessionConfig) { c.Tools = []*agentdv1.Tool{{Name: "read file!"}} }))
		}, codes.InvalidArgument, "config.tools[0].name"},
		{"duplicate tool", func() error {
			return create(cfgWith(func(c *agentdv1.SessionConfig) { c.Tools = append(c.Tools, &agentdv1.Tool{Name: "read_file"}) }))
		}, codes.InvalidArgument, "config.tools[1].name"},
		{"unknown server tool", func() error {
			return create(cfgWith(func(c *agentdv1.SessionConfig) { c.Tools = []*agentdv1.Tool{{Name: "launch_rocket"}} }))
		}, codes.InvalidArgument, "launch_rocket"},
		{"schema on a server tool", func() error {
			return create(cfgWith(func(c *agentdv1.SessionConfig) { c.Tools[0].Parameters = params }))
		}, codes.InvalidArgument, "config.tools[0].parameters"},
		{"max_turns too high", func() error {
			return create(cfgWith(func(c *agentdv1.SessionConfig) { c.MaxTurns = 1 << 30 }))
		}, codes.InvalidArgument, "config.max_turns"},
		{"negative approval timeout", func() error {
			return create(cfgWith(func(c *agentdv1.SessionConfig) { c.ApprovalTimeout = durationpb.New(-1) }))
		}, codes.InvalidArgument, "config.approval_timeout"},
		{"faux tool call without id", func() error {
			return create(cfgWith(func(c *agentdv1.SessionConfig) {
				c.Faux.Responses[0].Content[0].GetToolCall().Id = ""
			}))
		}, codes.InvalidArgument, "config.faux.responses[0].assistant.content[0].tool_call.id"},
		{"empty label key", func() error {
			return create(&agentdv1.CreateSessionRequest{Labels: map[string]string{"": "x"}})
		}, codes.InvalidArgument, "labels"},
		{"empty session id", func() error { _, err := c.GetSession(ctx, &agentdv1.GetSessionRequest{}); return err },
			codes.InvalidArgument, "session_id: required"},
		{"malformed session id", func() error {
			_, err := c.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: "../etc/passwd"})
			return err
		}, codes.InvalidArgument, "session_id"},
		{"unknown session", func() error {
			_, err := c.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: "deadbeefdeadbeef"})
			return err
		}, codes.NotFound, "deadbeefdeadbeef"},
		{"negative page size", func() error {
			_, err := c.ListSessions(ctx, &agentdv1.ListSessionsRequest{PageSize: -1})
			return err
		}, codes.InvalidArgument, "page_size"},
		{"forged session page token", func() error {
			_, err := c.ListSessions(ctx, &agentdv1.ListSessionsRequest{PageToken: "not-a-token"})
			return err
		}, codes.InvalidArgument, "page_token"},
		{"delete unknown session", func() error {
			_, err := c.DeleteSession(ctx, &agentdv1.DeleteSessionRequest{SessionId: "0000000000000000"})
			return err
		}, codes.NotFound, "0000000000000000"},
		{"prompt without content", func() error {
			return streamErr(c.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id}))
		}, codes.InvalidArgument, "content: at least one"},
		{"prompt with empty text", func() error {
			return streamErr(c.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Content: texts("")}))
		}, codes.InvalidArgument, "content[0].text.text"},
		{"image without mime type", func() error {
			return streamErr(c.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Content: []*agentdv1.ContentBlock{image("", []byte{1})}}))
		}, codes.InvalidArgument, "content[0].image.mime_type"},
		{"unsupported image type", func() error {
			return streamErr(c.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Content: []*agentdv1.ContentBlock{image("image/tiff", []byte{1})}}))
		}, codes.InvalidArgument, "image/tiff"},
		{"empty image", func() error {
			return streamErr(c.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Content: []*agentdv1.ContentBlock{image("image/png", nil)}}))
		}, codes.InvalidArgument, "content[0].image.data"},
		{"oversized text", func() error {
			return streamErr(c.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Content: texts(strings.Repeat("x", 65))}))
		}, codes.InvalidArgument, "exceed the limit of 64"},
		{"thinking in a prompt", func() error {
			return streamErr(c.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Content: []*agentdv1.ContentBlock{
				{Block: &agentdv1.ContentBlock_Thinking{Thinking: &agentdv1.ThinkingContent{Thinking: "x"}}}}}))
		}, codes.InvalidArgument, "content[0].thinking"},
		{"empty block", func() error {
			return streamErr(c.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Content: []*agentdv1.ContentBlock{{}}}))
		}, codes.InvalidArgument, "content[0]"},
		{"prompt to unknown session", func() error {
			return streamErr(c.Prompt(ctx, &agentdv1.PromptRequest{SessionId: "feedfeedfeedfeed", Content: texts("hi")}))
		}, codes.NotFound, "feedfeedfeedfeed"},
		{"request id too long", func() error {
			return streamErr(c.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Content: texts("hi"), RequestId: strings.Repeat("r", 129)}))
		}, codes.InvalidArgument, "request_id"},
		{"continue after an answer", func() error {
			return streamErr(c.Continue(ctx, &agentdv1.ContinueRequest{SessionId: id}))
		}, codes.FailedPrecondition, "Cannot continue from message role: assistant"},
		{"continue an empty session", func() error {
			return streamErr(c.Continue(ctx, &agentdv1.ContinueRequest{SessionId: empty}))
		}, codes.FailedPrecondition, "Cannot continue: no messages in context"},
		{"steer an idle session", func() error {
			_, err := c.Steer(ctx, &agentdv1.SteerRequest{SessionId: id, Content: texts("x")})
			return err
		}, codes.FailedPrecondition, "no active run"},
		{"resolve with a decision a client cannot make", func() error {
			_, err := c.ResolveApproval(ctx, &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "call_w",
				Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_TIMED_OUT})
			return err
		}, codes.InvalidArgument, "decision"},
		{"follow-up without content", func() error {
			_, err := c.FollowUp(ctx, &agentdv1.FollowUpRequest{SessionId: id})
			return err
		}, codes.InvalidArgument, "content"},
		{"abort an idle session", func() error {
			_, err := c.Abort(ctx, &agentdv1.AbortRequest{SessionId: id})
			return err
		}, codes.FailedPrecondition, "no active run"},
		{"attach without an active run", func() error {
			return streamErr(c.Attach(ctx, &agentdv1.AttachRequest{SessionId: id}))
		}, codes.FailedPrecondition, "GetTranscript"},
		{"attach to an unknown run", func() error {
			return streamErr(c.Attach(ctx, &agentdv1.AttachRequest{SessionId: id, RunId: "run-nope"}))
		}, codes.NotFound, "run-nope"},
		{"append nothing", func() error {
			_, err := c.AppendMessages(ctx, &agentdv1.AppendMessagesRequest{SessionId: id})
			return err
		}, codes.InvalidArgument, "messages: at least one"},
		{"append a message without kind", func() error {
			_, err := c.AppendMessages(ctx, &agentdv1.AppendMessagesRequest{SessionId: id, Messages: []*agentdv1.AgentMessage{{}}})
			return err
		}, codes.InvalidArgument, "messages[0]"},
		{"append a good and a bad message", func() error {
			_, err := c.AppendMessages(ctx, &agentdv1.AppendMessagesRequest{SessionId: id, Messages: []*agentdv1.AgentMessage{user(texts("ok")...), user()}})
			return err
		}, codes.InvalidArgument, "messages[1].user.content"},
		{"append an unfinished answer", func() error {
			_, err := c.AppendMessages(ctx, &agentdv1.AppendMessagesRequest{SessionId: id, Messages: []*agentdv1.AgentMessage{
				{Kind: &agentdv1.AgentMessage_Assistant{Assistant: textAnswer("hi")}}}})
			return err
		}, codes.InvalidArgument, "messages[0].assistant.stop_reason"},
		{"append an extension without payload", func() error {
			_, err := c.AppendMessages(ctx, &agentdv1.AppendMessagesRequest{SessionId: id, Messages: []*agentdv1.AgentMessage{
				{Kind: &agentdv1.AgentMessage_Extension{Extension: &agentdv1.Extension{}}}}})
			return err
		}, codes.InvalidArgument, "messages[0].extension.payload"},
		{"forged transcript page token", func() error {
			_, err := c.GetTranscript(ctx, &agentdv1.GetTranscriptRequest{SessionId: id, PageToken: "eA"})
			return err
		}, codes.InvalidArgument, "page_token"},
		{"transcript page too large", func() error {
			_, err := c.GetTranscript(ctx, &agentdv1.GetTranscriptRequest{SessionId: id, PageSize: 5000})
			return err
		}, codes.InvalidArgument, "page_size"},
		{"context of an unknown session", func() error {
			_, err := c.GetContext(ctx, &agentdv1.GetContextRequest{SessionId: "abcabcabcabcabca"})
			return err
		}, codes.NotFound, "abcabcabcabcabca"},
	}
	if len(tests) < 30 {
		t.Fatalf("only %d bad requests", len(tests))
	}

	snapshot := func() ([]*agentdv1.Entry, int) {
		list, err := c.ListSessions(ctx, &agentdv1.ListSessionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return h.transcript(id), len(list.GetSessions())
	}
	before, sessions := snapshot()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.mention) {
				t.Fatalf("got %v; want %v mentioning %q", err, tt.code, tt.mention)
			}
			after, n := snapshot()
			if n != sessions || len(after) != len(before) {
				t.Fatalf("the refused request changed the store: %d→%d sessions, %d→%d entries", sessions, n, len(before), len(after))
			}
			for i := range after {
				if !proto.Equal(after[i], before[i]) {
					t.Fatalf("entry %d changed", i)
				}
			}
		})
	}
}

func TestAuth(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{AuthToken: "s3cret"})
	_, err := h.client.ListSessions(h.ctx(), &agentdv1.ListSessionsRequest{})
	wantCode(t, err, codes.Unauthenticated, "authorization: Bearer")
	bad := metadata.AppendToOutgoingContext(h.ctx(), "authorization", "Bearer wrong")
	_, err = h.client.ListSessions(bad, &agentdv1.ListSessionsRequest{})
	wantCode(t, err, codes.Unauthenticated, "invalid bearer token")
	err = streamErr(h.client.Prompt(bad, &agentdv1.PromptRequest{SessionId: "x", Content: texts("hi")}))
	wantCode(t, err, codes.Unauthenticated, "")

	good := metadata.AppendToOutgoingContext(h.ctx(), "authorization", "Bearer s3cret")
	if _, err := h.client.ListSessions(good, &agentdv1.ListSessionsRequest{}); err != nil {
		t.Fatalf("with the token: %v", err)
	}
	// Probes stay open.
	if _, err := healthpb.NewHealthClient(h.conn).Check(h.ctx(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health with auth on: %v", err)
	}

	// Off: no token needed.
	open := newHarness(t, agent.Options{}, service.ServerOptions{})
	if _, err := open.client.ListSessions(open.ctx(), &agentdv1.ListSessionsRequest{}); err != nil {
		t.Fatalf("auth off: %v", err)
	}
}
