package service_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider/faux"
	"github.com/agentd/agentd/service"
	"github.com/agentd/agentd/tools/mcp"
	"github.com/agentd/agentd/tools/mcp/mcptest"
)

// ListToolSources shows each configured server's state without starting
// it, and its tools after a refresh; sessions name servers and tools
// precisely or get INVALID_ARGUMENT naming the field; a run's MCP call and
// its snapshot reach a client over gRPC.
func TestMCPOverGRPC(t *testing.T) {
	hs := mcptest.NewHTTPServer(t)
	m := mcp.NewManager(&mcp.Config{Servers: map[string]*mcp.ServerConfig{
		"everything": mcptest.Everything(t),
		"remote":     {URL: hs.URL, ReadOnly: true, DenyTools: []string{"slow"}},
	}}, mcp.Options{})
	h := newHarness(t, agent.Options{MCP: m}, service.ServerOptions{})
	t.Cleanup(func() { _ = m.Close() })

	list, err := h.client.ListToolSources(h.ctx(), &agentdv1.ListToolSourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := list.GetSources(); len(got) != 2 || got[0].GetName() != "everything" || got[0].GetState() != agentdv1.ToolSourceState_TOOL_SOURCE_STATE_STOPPED ||
		got[0].GetTransport() != "stdio" || got[1].GetTransport() != "http" || !got[1].GetReadOnly() || len(got[0].GetTools()) != 0 {
		t.Fatalf("sources before use: %v", got)
	}
	list, err = h.client.ListToolSources(h.ctx(), &agentdv1.ListToolSourcesRequest{Refresh: true})
	if err != nil {
		t.Fatal(err)
	}
	ev, remote := list.GetSources()[0], list.GetSources()[1]
	if ev.GetState() != agentdv1.ToolSourceState_TOOL_SOURCE_STATE_READY || ev.GetPid() == 0 || len(ev.GetTools()) < 5 {
		t.Errorf("everything after refresh: state %v pid %d, %d tools", ev.GetState(), ev.GetPid(), len(ev.GetTools()))
	}
	if len(remote.GetTools()) != 1 || remote.GetTools()[0].GetName() != "fail" {
		t.Errorf("remote tools %v, want only fail (slow is deny-listed)", remote.GetTools())
	}

	_, err = h.client.CreateSession(h.ctx(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{
		McpServers: []*agentdv1.McpServer{{Name: "remote"}, {Name: "github"}}}})
	wantField(t, err, "config.mcp_servers[1].name")
	_, err = h.client.CreateSession(h.ctx(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{
		McpServers: []*agentdv1.McpServer{{Name: "remote", Tools: []string{"slow"}}}}})
	wantField(t, err, "config.mcp_servers[0].tools[0]")

	id := h.createSession(&agentdv1.SessionConfig{
		Faux:       &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{faux.Message(faux.ToolCall("f", "mcp__remote__fail", nil)), faux.Message(faux.Text("noted"))}},
		McpServers: []*agentdv1.McpServer{{Name: "remote"}},
	})
	evs := h.prompt(id, "try")
	var result *agentdv1.ToolResultMessage
	for _, e := range evs {
		if r := e.GetMessageEnd().GetMessage().GetToolResult(); r != nil {
			result = r
		}
	}
	if !result.GetIsError() || result.GetContent()[0].GetText().GetText() != "the disk is full" {
		t.Errorf("tool result %v", result)
	}
	tr, err := h.client.GetTranscript(h.ctx(), &agentdv1.GetTranscriptRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	if snap := tr.GetEntries()[0].GetMcpTools(); snap.GetServer() != "remote" || len(snap.GetTools()) != 1 {
		t.Errorf("first entry %v, want the remote server's snapshot", tr.GetEntries()[0])
	}

	// The operator drops the server: the session's next run is refused
	// with a precondition, not a broken stream.
	h.opts.MCP = nil
	h.restart()
	stream, err := h.client.Prompt(context.Background(), &agentdv1.PromptRequest{SessionId: id, Content: texts("again")})
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.FailedPrecondition, `no MCP server is named "remote"`)
}
