package service_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/service"
)

// TestSeedScenarioWithBuiltinToolsAndApproval is the seed's conversation
// end to end: the built-in read_file answers the first prompt, the second
// prompt's context carries the first turn, and edit_file changes the port
// after an approval.
func TestSeedScenarioWithBuiltinToolsAndApproval(t *testing.T) {
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(ws, "src", "config.ts")
	if err := os.WriteFile(config, []byte("export const config = {\n  port: 3000,\n};\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, agent.Options{Ceilings: agent.Ceilings{Default: agent.Ceiling{WorkspaceRoots: agent.Limit{Values: []string{filepath.Dir(ws)}, Setting: "--workspace-roots"}}}}, service.ServerOptions{})

	_, err := h.client.CreateSession(h.ctx(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{
		Tools: []*agentdv1.Tool{{Name: "read_file"}}}})
	wantCode(t, err, codes.InvalidArgument, "config.workspace_root")
	_, err = h.client.CreateSession(h.ctx(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{
		WorkspaceRoot: "/etc", Tools: []*agentdv1.Tool{{Name: "read_file"}}}})
	wantCode(t, err, codes.PermissionDenied, "use a workspace outside")

	id := h.createSession(&agentdv1.SessionConfig{
		SystemPrompt:  "你是桌面开发助手。",
		WorkspaceRoot: ws,
		Tools:         []*agentdv1.Tool{{Name: "read_file"}, {Name: "edit_file"}},
		Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{
			toolCallAnswer(t, "call_read", "read_file", map[string]any{"path": "src/config.ts"}),
			textAnswer("默认端口是 3000。"),
			toolCallAnswer(t, "call_edit", "edit_file", map[string]any{"path": "src/config.ts", "old_text": "port: 3000", "new_text": "port: 8080"}),
			textAnswer("已把端口改成 8080。"),
		}},
	})
	evs := h.prompt(id, "读取 src/config.ts，告诉我默认端口。")
	if strings.Contains(kinds(evs), "approval_requested") {
		t.Fatal("read_file asked for approval; read-only tools run without")
	}
	first := h.transcript(id)
	if tr := first[2].GetMessage().GetToolResult(); tr.GetIsError() || !strings.Contains(tr.GetContent()[0].GetText().GetText(), "port: 3000") {
		t.Fatalf("read_file result: %v", tr)
	}

	before := h.context(id)
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("把它改成 8080。")})
	if err != nil {
		t.Fatal(err)
	}
	recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetApprovalRequested().GetToolName() == "edit_file" })
	// The second model call saw the whole first turn.
	during := h.context(id)
	for i := range 4 {
		if !proto.Equal(during.GetMessages()[i], before.GetMessages()[i]) {
			t.Fatalf("context message %d differs from the first turn", i)
		}
	}
	if data, _ := os.ReadFile(config); !strings.Contains(string(data), "port: 3000") {
		t.Fatal("the file changed before the approval")
	}
	if _, err := h.client.ResolveApproval(h.ctx(), &agentdv1.ResolveApprovalRequest{SessionId: id, ToolCallId: "call_edit",
		Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED, DecidedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := drain(stream); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(config); !strings.Contains(string(data), "port: 8080") || strings.Contains(string(data), "3000") {
		t.Fatalf("config.ts after the approved edit:\n%s", data)
	}
	want := "user assistant tool_result assistant user assistant approval_notice tool_result assistant"
	all := h.transcript(id)
	entries := testkit.MessageEntries(all)
	if got := testkit.MessageKinds(entries); got != want {
		t.Fatalf("transcript %q\nwant       %q", got, want)
	}
	if tr := entries[7].GetMessage().GetToolResult(); tr.GetIsError() || tr.GetDetails() == nil {
		t.Fatalf("edit_file result (details carry the diff): %v", tr)
	}
	// The edit's start was recorded after its approval, before it ran; the
	// read (read-only) recorded none.
	var starts []string
	for i, e := range all {
		if st := e.GetToolCallStarted(); st != nil {
			starts = append(starts, st.GetToolCallId())
			if all[i-1].GetMessage().GetApprovalNotice() == nil || all[i+1].GetMessage().GetToolResult().GetToolCallId() != "call_edit" {
				t.Errorf("the start of %s is not between its approval and its result", st.GetToolCallId())
			}
		}
	}
	if strings.Join(starts, ",") != "call_edit" {
		t.Errorf("starts recorded for %v, want call_edit only", starts)
	}

	h.restart()
	after := h.transcript(id)
	if len(after) != len(all) {
		t.Fatalf("%d entries after restart, want %d", len(after), len(all))
	}
	for i := range after {
		if !proto.Equal(after[i], all[i]) {
			t.Fatalf("entry %d changed across the restart", i)
		}
	}
	if n := testkit.MessageEntries(after)[6].GetMessage().GetApprovalNotice(); n.GetDecidedBy() != "alice" || n.GetDecision() != agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED {
		t.Fatalf("who allowed what, after restart: %v", n)
	}
}
