package service_test

import (
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service"
)

// ResolveInDoubt names the field of a bad request, refuses a session with
// an active run as busy, and a call that is not in doubt as NOT_FOUND;
// none of it changes the transcript.
func TestResolveInDoubtRefusals(t *testing.T) {
	g := newGate()
	defer g.open()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}}, service.ServerOptions{},
		service.Options{Limits: service.Limits{MaxTextBytes: 64}})
	ctx, c := h.ctx(), h.client
	idle := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
	h.prompt(idle, "hi")

	const (
		retry  = agentdv1.InDoubtAction_IN_DOUBT_ACTION_RETRY
		skip   = agentdv1.InDoubtAction_IN_DOUBT_ACTION_SKIP
		supply = agentdv1.InDoubtAction_IN_DOUBT_ACTION_SUPPLY
	)
	thinking := &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Thinking{Thinking: &agentdv1.ThinkingContent{Thinking: "hm"}}}
	invalid := []struct {
		name  string
		req   *agentdv1.ResolveInDoubtRequest
		field string
	}{
		{"no call", &agentdv1.ResolveInDoubtRequest{SessionId: idle, Action: skip}, "tool_call_id"},
		{"no action", &agentdv1.ResolveInDoubtRequest{SessionId: idle, ToolCallId: "c1"}, "action"},
		{"unknown action", &agentdv1.ResolveInDoubtRequest{SessionId: idle, ToolCallId: "c1", Action: 9}, "action"},
		{"supply without content", &agentdv1.ResolveInDoubtRequest{SessionId: idle, ToolCallId: "c1", Action: supply}, "content"},
		{"supply with thinking", &agentdv1.ResolveInDoubtRequest{SessionId: idle, ToolCallId: "c1", Action: supply, Content: []*agentdv1.ContentBlock{thinking}}, "content[0].thinking"},
		{"supply too long", &agentdv1.ResolveInDoubtRequest{SessionId: idle, ToolCallId: "c1", Action: supply, Content: texts(strings.Repeat("x", 65))}, "content[0].text.text"},
		{"supply with a message", &agentdv1.ResolveInDoubtRequest{SessionId: idle, ToolCallId: "c1", Action: supply, Content: texts("r"), Message: "m"}, "message"},
		{"skip with content", &agentdv1.ResolveInDoubtRequest{SessionId: idle, ToolCallId: "c1", Action: skip, Content: texts("r")}, "content"},
		{"retry with is_error", &agentdv1.ResolveInDoubtRequest{SessionId: idle, ToolCallId: "c1", Action: retry, IsError: true}, "content"},
		{"skip message too long", &agentdv1.ResolveInDoubtRequest{SessionId: idle, ToolCallId: "c1", Action: skip, Message: strings.Repeat("x", 64<<10+1)}, "message"},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.ResolveInDoubt(ctx, tc.req)
			wantField(t, err, tc.field)
		})
	}
	before := h.transcript(idle)
	_, err := c.ResolveInDoubt(ctx, &agentdv1.ResolveInDoubtRequest{SessionId: idle, ToolCallId: "c1", Action: skip})
	wantCode(t, err, codes.NotFound, `"c1"`)
	wantReasonName(t, err, "NOT_IN_DOUBT")
	_, err = c.ResolveInDoubt(ctx, &agentdv1.ResolveInDoubtRequest{SessionId: "nope", ToolCallId: "c1", Action: skip})
	wantCode(t, err, codes.NotFound, "nope")

	busy := h.createSession(&agentdv1.SessionConfig{
		Tools: []*agentdv1.Tool{{Name: "wait"}},
		Faux:  &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{toolCallAnswer(t, "w1", "wait", nil), textAnswer("done")}},
	})
	stream, err := c.Prompt(ctx, &agentdv1.PromptRequest{SessionId: busy, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered
	_, err = c.ResolveInDoubt(ctx, &agentdv1.ResolveInDoubtRequest{SessionId: busy, ToolCallId: "w1", Action: skip})
	wantCode(t, err, codes.FailedPrecondition, "ResolveInDoubt needs an idle session")
	wantReasonName(t, err, "SESSION_BUSY")
	g.open()
	if _, err := drain(stream); err != nil {
		t.Fatal(err)
	}
	if after := h.transcript(idle); len(after) != len(before) {
		t.Fatalf("refused requests changed the transcript: %d entries, want %d", len(after), len(before))
	}
}

// wantReasonName checks the ErrorInfo reason of a refusal.
func wantReasonName(t *testing.T, err error, reason string) {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			if info.GetReason() != reason {
				t.Fatalf("ErrorInfo reason %s, want %s (%v)", info.GetReason(), reason, err)
			}
			return
		}
	}
	t.Fatalf("no ErrorInfo in %v", err)
}
