package service_test

import (
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/service"
)

// wantField checks an INVALID_ARGUMENT names the field in its text and in
// a google.rpc.BadRequest field violation.
func wantField(t *testing.T, err error, field string) {
	t.Helper()
	wantCode(t, err, codes.InvalidArgument, field)
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				if v.GetField() == field && v.GetDescription() != "" {
					return
				}
			}
		}
	}
	t.Fatalf("%v carries no BadRequest field violation for %q (details %v)", err, field, status.Convert(err).Details())
}

// An enum value outside its declared set is refused in every request with
// INVALID_ARGUMENT naming the field, and nothing is stored.
func TestEnumValuesOutsideTheirSetsAreRefused(t *testing.T) {
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{testkit.ReadFileTool(seedFiles)}}, service.ServerOptions{})
	ctx, c := h.ctx(), h.client
	id := h.createSession(seedConfig(t))
	before := len(h.listSessions())
	create := func(mod func(*agentdv1.SessionConfig)) error {
		cfg := seedConfig(t)
		mod(cfg)
		_, err := c.CreateSession(ctx, &agentdv1.CreateSessionRequest{Config: cfg})
		return err
	}
	appendOne := func(m *agentdv1.AgentMessage) error {
		_, err := c.AppendMessages(ctx, &agentdv1.AppendMessagesRequest{SessionId: id, Messages: []*agentdv1.AgentMessage{m}})
		return err
	}
	tests := []struct {
		name  string
		call  func() error
		field string
	}{
		{"tool execution mode", func() error {
			return create(func(c *agentdv1.SessionConfig) { c.ToolExecution = 7 })
		}, "config.tool_execution"},
		{"steering mode", func() error { return create(func(c *agentdv1.SessionConfig) { c.SteeringMode = 9 }) }, "config.steering_mode"},
		{"follow-up mode", func() error { return create(func(c *agentdv1.SessionConfig) { c.FollowUpMode = -1 }) }, "config.follow_up_mode"},
		{"thinking level", func() error { return create(func(c *agentdv1.SessionConfig) { c.ThinkingLevel = 42 }) }, "config.thinking_level"},
		{"tool approval", func() error { return create(func(c *agentdv1.SessionConfig) { c.Tools[0].Approval = 5 }) }, "config.tools[0].approval"},
		{"tool executor", func() error { return create(func(c *agentdv1.SessionConfig) { c.Tools[0].Executor = 3 }) }, "config.tools[0].executor"},
		{"faux stop reason", func() error {
			return create(func(c *agentdv1.SessionConfig) { c.Faux.Responses[1].StopReason = 99 })
		}, "config.faux.responses[1].stop_reason"},
		{"appended stop reason", func() error {
			return appendOne(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: &agentdv1.AssistantMessage{StopReason: 77}}})
		}, "messages[0].assistant.stop_reason"},
		{"appended approval decision", func() error {
			return appendOne(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ApprovalNotice{ApprovalNotice: &agentdv1.ApprovalNotice{ToolCallId: "c", Decision: 12}}})
		}, "messages[0].approval_notice.decision"},
		{"resolved decision", func() error {
			_, err := c.ResolveApproval(ctx, &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "c", Decision: 8})
			return err
		}, "decision"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantField(t, tc.call(), tc.field)
		})
	}
	if after := len(h.listSessions()); after != before {
		t.Fatalf("refused requests created %d sessions", after-before)
	}
	if got := testkit.MessageKinds(h.transcript(id)); got != "" {
		t.Fatalf("refused appends stored %q", got)
	}
}

// AppendMessages refuses what no real conversation can hold, naming the
// message: a tool result that answers no call waiting for one, a result
// under another tool's name, blocks the role cannot carry.
func TestAppendMessagesRefusesImpossibleConversations(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := h.createSession(&agentdv1.SessionConfig{})
	ctx, c := h.ctx(), h.client
	call := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: toolCallAnswer(t, "c1", "lookup", nil)}}
	call.GetAssistant().StopReason = agentdv1.StopReason_STOP_REASON_TOOL_USE
	result := func(callID, name string) *agentdv1.AgentMessage {
		return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: &agentdv1.ToolResultMessage{ToolCallId: callID, ToolName: name, Content: texts("42")}}}
	}
	img := &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Image{Image: &agentdv1.ImageContent{MimeType: "image/png", Data: []byte{1}}}}
	send := func(msgs ...*agentdv1.AgentMessage) error {
		_, err := c.AppendMessages(ctx, &agentdv1.AppendMessagesRequest{SessionId: id, Messages: msgs})
		return err
	}
	tests := []struct {
		name  string
		msgs  []*agentdv1.AgentMessage
		field string
	}{
		{"result without a call", []*agentdv1.AgentMessage{result("c1", "lookup")}, "messages[0].tool_result.tool_call_id"},
		{"result for another call", []*agentdv1.AgentMessage{call, result("c2", "lookup")}, "messages[1].tool_result.tool_call_id"},
		{"result under another tool", []*agentdv1.AgentMessage{call, result("c1", "other")}, "messages[1].tool_result.tool_name"},
		{"two results for one call", []*agentdv1.AgentMessage{call, result("c1", "lookup"), result("c1", "lookup")}, "messages[2].tool_result.tool_call_id"},
		{"image in an answer", []*agentdv1.AgentMessage{{Kind: &agentdv1.AgentMessage_Assistant{Assistant: &agentdv1.AssistantMessage{
			StopReason: agentdv1.StopReason_STOP_REASON_STOP, Content: []*agentdv1.ContentBlock{img}}}}}, "messages[0].assistant.content[0].image"},
		{"tool call in a result", []*agentdv1.AgentMessage{call, {Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: &agentdv1.ToolResultMessage{
			ToolCallId: "c1", ToolName: "lookup", Content: call.GetAssistant().GetContent()}}}}, "messages[1].tool_result.content[0].tool_call"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantField(t, send(tc.msgs...), tc.field)
			if got := testkit.MessageKinds(h.transcript(id)); got != "" {
				t.Fatalf("a refused append stored %q", got)
			}
		})
	}
	// A call and its result, in one call or two, are fine; the answered
	// call cannot be answered again.
	if err := send(call); err != nil {
		t.Fatal(err)
	}
	if err := send(result("c1", "lookup")); err != nil {
		t.Fatal(err)
	}
	wantField(t, send(result("c1", "lookup")), "messages[0].tool_result.tool_call_id")
	if got := testkit.MessageKinds(h.transcript(id)); got != "assistant tool_result" {
		t.Fatalf("transcript %q", got)
	}
}

// A page token works only for the listing that issued it.
func TestPageTokensAreBoundToTheirListing(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	ctx, c := h.ctx(), h.client
	a := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
	b := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
	for range 2 {
		h.prompt(a, "ping")
		h.prompt(b, "ping")
	}
	page, err := c.GetTranscript(ctx, &agentdv1.GetTranscriptRequest{SessionId: a, PageSize: 1})
	if err != nil || page.GetNextPageToken() == "" {
		t.Fatalf("first page: %v, %v", page, err)
	}
	_, err = c.GetTranscript(ctx, &agentdv1.GetTranscriptRequest{SessionId: b, PageSize: 1, PageToken: page.GetNextPageToken()})
	wantField(t, err, "page_token")
	if _, err := c.GetTranscript(ctx, &agentdv1.GetTranscriptRequest{SessionId: a, PageSize: 1, PageToken: page.GetNextPageToken()}); err != nil {
		t.Fatalf("the token on its own session: %v", err)
	}
	for _, labels := range []map[string]string{{"team": "x"}, {"team": "x"}, {"team": "y"}} {
		if _, err := c.CreateSession(ctx, &agentdv1.CreateSessionRequest{Labels: labels}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := c.ListSessions(ctx, &agentdv1.ListSessionsRequest{PageSize: 1, LabelFilter: map[string]string{"team": "x"}})
	if err != nil || list.GetNextPageToken() == "" {
		t.Fatalf("first page of sessions: %v, %v", list, err)
	}
	_, err = c.ListSessions(ctx, &agentdv1.ListSessionsRequest{PageSize: 1, PageToken: list.GetNextPageToken(), LabelFilter: map[string]string{"team": "y"}})
	wantField(t, err, "page_token")
	_, err = c.GetTranscript(ctx, &agentdv1.GetTranscriptRequest{SessionId: a, PageToken: list.GetNextPageToken()})
	wantField(t, err, "page_token")
}
