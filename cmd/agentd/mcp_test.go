package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider/faux"
	"github.com/agentd/agentd/tools/mcp"
	"github.com/agentd/agentd/tools/mcp/mcptest"
)

// agentd with --mcp-config: sessions call tools of real MCP servers over
// stdio, two sessions share one server process, and shutting agentd down
// leaves no process of the servers behind.
func TestMCPServersOfAgentd(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "notes.txt"), []byte("remember the milk"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := mcptest.BehindShell(mcptest.Filesystem(t, work))
	fs.ReadOnly = true
	fs.AllowTools = []string{"read_text_file", "list_directory"}
	everything := mcptest.BehindShell(mcptest.Everything(t))
	cfgPath := filepath.Join(dir, "mcp.json")
	raw, err := json.Marshal(mcp.Config{Servers: map[string]*mcp.ServerConfig{"fs": fs, "everything": everything}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, filepath.Join(dir, "agentd.db"), "--mcp-config", cfgPath)
	c := p.client()

	read := faux.ToolCall("r", "mcp__fs__read_text_file", map[string]any{"path": filepath.Join(work, "notes.txt")})
	var pids []int32
	for i := range 2 {
		id := createSession(t, c, &agentdv1.SessionConfig{
			Faux:       &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{faux.Message(read), faux.Message(faux.Text("read it"))}},
			McpServers: []*agentdv1.McpServer{{Name: "fs"}},
		})
		evs, err := drain(c.Prompt(testCtx(t), &agentdv1.PromptRequest{SessionId: id, Content: texts("read my notes")}))
		if err != nil {
			t.Fatal(err)
		}
		var result *agentdv1.ToolResultMessage
		for _, ev := range evs {
			if r := ev.GetMessageEnd().GetMessage().GetToolResult(); r != nil {
				result = r
			}
		}
		if result.GetIsError() || !strings.Contains(result.GetContent()[0].GetText().GetText(), "remember the milk") {
			t.Fatalf("session %d: result %v", i, result)
		}
		src, err := c.ListToolSources(testCtx(t), &agentdv1.ListToolSourcesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range src.GetSources() {
			if s.GetName() == "fs" {
				pids = append(pids, s.GetPid())
				if len(s.GetTools()) != 2 {
					t.Errorf("fs tools %v, want the 2 the operator allows", s.GetTools())
				}
			}
		}
	}
	if len(pids) != 2 || pids[0] == 0 || pids[0] != pids[1] {
		t.Fatalf("fs pids %v, want one process for both sessions", pids)
	}
	src, err := c.ListToolSources(testCtx(t), &agentdv1.ListToolSourcesRequest{Refresh: true})
	if err != nil {
		t.Fatal(err)
	}
	var groups []int
	for _, s := range src.GetSources() {
		if s.GetState() != agentdv1.ToolSourceState_TOOL_SOURCE_STATE_READY || s.GetPid() == 0 {
			t.Fatalf("after refresh: %v", s)
		}
		groups = append(groups, int(s.GetPid()))
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.waitExit(30 * time.Second); err != nil {
		t.Fatalf("agentd exited with %v:\n%s", err, p.log.String())
	}
	for _, g := range groups {
		if !mcptest.GroupEnds(g, 2*time.Second) {
			t.Errorf("process group %d of an MCP server outlived agentd by 2 s", g)
		}
	}
}

func TestMCPConfigErrorsStopAgentd(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(cfgPath, []byte(`{"mcpServers": {"gh": {"url": "https://example.invalid/mcp", "headers": {"Authorization": "Bearer ${AGENTD_TEST_NO_SUCH_TOKEN}"}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(agentdBinary(t), "--listen", "127.0.0.1:0", "--db", filepath.Join(dir, "agentd.db"), "--mcp-config", cfgPath)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--mcp-config") || !strings.Contains(string(out), "AGENTD_TEST_NO_SUCH_TOKEN is not set") {
		t.Fatalf("agentd with a config naming a missing variable: %v\n%s", err, out)
	}
}
