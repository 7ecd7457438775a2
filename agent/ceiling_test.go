package agent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/memory"
	"github.com/agentd/agentd/tools/mcp"
	"github.com/agentd/agentd/tools/sandbox"
	"github.com/agentd/agentd/tools/sandbox/sandboxtest"
)

// sessionOf creates a session of tenant, as the service does for a caller
// of that tenant.
func (h *harness) sessionOf(tenant string, cfg *agentdv1.SessionConfig) string {
	h.t.Helper()
	if err := h.a.CheckConfig(tenant, cfg); err != nil {
		h.t.Fatalf("CheckConfig: %v", err)
	}
	s, err := h.store.CreateSession(context.Background(), persistence.CreateSessionParams{Config: cfg, Tenant: tenant})
	if err != nil {
		h.t.Fatal(err)
	}
	return s.ID
}

func mkdir(t *testing.T, parts ...string) string {
	t.Helper()
	dir := filepath.Join(parts...)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func yes() *bool { b := true; return &b }

// ceilingWorld is an agent whose operator bounds three tenants, with
// agentd's database and configuration in directories of their own.
type ceilingWorld struct {
	h                         *harness
	base, rootA, rootB, dbDir string
	confDir, adminRoot        string
	ceilings                  agent.Ceilings
	acmeWS, globexWS, adminWS string
	opts                      agent.Options
}

func newCeilingWorld(t *testing.T, sb *sandbox.Sandbox) *ceilingWorld {
	t.Helper()
	base := t.TempDir()
	w := &ceilingWorld{base: base}
	w.rootA, w.rootB = mkdir(t, base, "tenants", "acme"), mkdir(t, base, "tenants", "globex")
	w.acmeWS, w.globexWS = mkdir(t, w.rootA, "ws"), mkdir(t, w.rootB, "ws")
	w.adminRoot = mkdir(t, base, "admin")
	w.adminWS = mkdir(t, w.adminRoot, "ws")
	w.dbDir, w.confDir = mkdir(t, base, "var", "agentd"), mkdir(t, base, "etc", "agentd")
	mkdir(t, w.dbDir, "inside")
	tenant := func(name string) string { return "tenants." + name + "." }
	w.ceilings = agent.Ceilings{
		Default: agent.Ceiling{
			WorkspaceRoots: agent.Limit{Values: []string{w.adminRoot}, Setting: "--workspace-roots"},
			Network:        agent.Permit{Setting: "--sandbox-network"},
		},
		Tenants: map[string]agent.Ceiling{
			"acme": {
				WorkspaceRoots:  agent.Limit{Values: []string{w.rootA}, Setting: tenant("acme") + "workspaceRoots"},
				Tools:           agent.Limit{Values: []string{"read_file", "bash", "write_file"}, Setting: tenant("acme") + "tools"},
				MCPServers:      agent.Limit{Values: []string{"fs"}, Setting: tenant("acme") + "mcpServers"},
				Models:          agent.Limit{Values: []string{"faux/*"}, Setting: tenant("acme") + "models"},
				RequireApproval: agent.Limit{Values: []string{"bash", "read_file", "mcp__fs__*"}, Setting: tenant("acme") + "requireApproval"},
				Network:         agent.Permit{Allowed: yes(), Setting: tenant("acme") + "network"},
			},
			"globex":  {WorkspaceRoots: agent.Limit{Values: []string{w.rootB}, Setting: tenant("globex") + "workspaceRoots"}},
			"initech": {},
		},
		TenantWorkspaces: true,
	}
	servers := map[string]*mcp.ServerConfig{"fs": {Command: "true"}, "web": {Command: "true"}}
	m := mcp.NewManager(&mcp.Config{Servers: servers}, mcp.Options{})
	t.Cleanup(func() { _ = m.Close() })
	w.opts = agent.Options{
		MCP:      m,
		Ceilings: w.ceilings,
		Sandbox:  sb,
		Protected: []agent.Protected{
			{Path: filepath.Join(w.dbDir, "agentd.db"), What: "database"},
			{Path: filepath.Join(w.confDir, "auth.json"), What: "--auth-config file"},
		},
	}
	w.h = newHarness(t, w.opts)
	return w
}

// Every way a session asks beyond its tenant's ceiling is refused with
// PERMISSION_DENIED's kind, typed, naming the tenant, the setting and the
// value; workspaces agentd never allows are refused as the field's error.
func TestCeilingRefusals(t *testing.T) {
	w := newCeilingWorld(t, nil)
	tools := func(names ...string) []*agentdv1.Tool {
		var out []*agentdv1.Tool
		for _, n := range names {
			out = append(out, &agentdv1.Tool{Name: n})
		}
		return out
	}
	allow := agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW
	network := &agentdv1.SandboxSettings{Network: agentdv1.SandboxNetwork_SANDBOX_NETWORK_ALLOWED}
	tests := []struct {
		name, tenant string
		cfg          *agentdv1.SessionConfig
		// setting and value of a ceiling refusal, or field of a field one
		setting, value, field string
	}{
		{"within", "acme", &agentdv1.SessionConfig{WorkspaceRoot: w.acmeWS, Tools: tools("read_file", "bash"),
			McpServers: []*agentdv1.McpServer{{Name: "fs"}}, Sandbox: network}, "", "", ""},
		{"tool", "acme", &agentdv1.SessionConfig{WorkspaceRoot: w.acmeWS, Tools: tools("ls")}, "tenants.acme.tools", "ls", ""},
		{"approval", "acme", &agentdv1.SessionConfig{WorkspaceRoot: w.acmeWS, Tools: []*agentdv1.Tool{{Name: "bash", Approval: allow}}},
			"tenants.acme.requireApproval", "bash", ""},
		{"MCP server", "acme", &agentdv1.SessionConfig{McpServers: []*agentdv1.McpServer{{Name: "web"}}}, "tenants.acme.mcpServers", "web", ""},
		{"MCP approval", "acme", &agentdv1.SessionConfig{McpServers: []*agentdv1.McpServer{{Name: "fs", Approval: allow}}},
			"tenants.acme.requireApproval", "fs", ""},
		{"MCP tool approval", "acme", &agentdv1.SessionConfig{McpServers: []*agentdv1.McpServer{{Name: "fs",
			ToolApproval: map[string]agentdv1.ApprovalPolicy{"read_file": allow}}}}, "tenants.acme.requireApproval", "mcp__fs__read_file", ""},
		{"model", "acme", &agentdv1.SessionConfig{Model: &agentdv1.ModelRef{Provider: "anthropic", Id: "claude-sonnet-4-5"}},
			"tenants.acme.models", "anthropic/claude-sonnet-4-5", ""},
		{"compaction model", "acme", &agentdv1.SessionConfig{Compaction: &agentdv1.CompactionSettings{Model: &agentdv1.ModelRef{Provider: "openai", Id: "gpt-5"}}},
			"tenants.acme.models", "openai/gpt-5", ""},
		{"another tenant's workspace", "globex", &agentdv1.SessionConfig{WorkspaceRoot: w.acmeWS, Tools: tools("read_file")},
			"tenants.globex.workspaceRoots", w.acmeWS, ""},
		{"a tenant without workspace roots", "initech", &agentdv1.SessionConfig{WorkspaceRoot: w.globexWS, Tools: tools("read_file")},
			"tenants.initech.workspaceRoots", w.globexWS, ""},
		{"network by default", "globex", &agentdv1.SessionConfig{Sandbox: network}, "--sandbox-network", "SANDBOX_NETWORK_ALLOWED", ""},
		{"admin outside --workspace-roots", "", &agentdv1.SessionConfig{WorkspaceRoot: w.acmeWS, Tools: tools("read_file")}, "--workspace-roots", w.acmeWS, ""},
		{"/", "", &agentdv1.SessionConfig{WorkspaceRoot: "/", Tools: tools("read_file")}, "", "", "config.workspace_root"},
		{"the database's directory", "", &agentdv1.SessionConfig{WorkspaceRoot: w.dbDir}, "", "", "config.workspace_root"},
		{"inside the database's directory", "", &agentdv1.SessionConfig{WorkspaceRoot: filepath.Join(w.dbDir, "inside")}, "", "", "config.workspace_root"},
		{"holding the configuration", "", &agentdv1.SessionConfig{WorkspaceRoot: filepath.Dir(w.confDir)}, "", "", "config.workspace_root"},
		{"writable path out", "acme", &agentdv1.SessionConfig{Sandbox: &agentdv1.SandboxSettings{WritablePaths: []string{"../globex"}}},
			"", "", "config.sandbox.writable_paths[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := w.h.a.CheckConfig(tc.tenant, tc.cfg)
			var ae *agent.Error
			var fe *agent.FieldError
			switch {
			case tc.setting == "" && tc.field == "":
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			case tc.setting != "":
				if !errors.As(err, &ae) || !errors.Is(err, agent.ErrPermission) || ae.Reason != agentdv1.ErrorReason_ERROR_REASON_TENANT_CEILING {
					t.Fatalf("got %v, want a ceiling refusal", err)
				}
				if ae.Metadata["tenant"] != tc.tenant || ae.Metadata["setting"] != tc.setting || ae.Metadata["value"] != tc.value {
					t.Fatalf("metadata %v, want tenant %q setting %q value %q", ae.Metadata, tc.tenant, tc.setting, tc.value)
				}
				if !strings.Contains(ae.Message, tc.setting) || (tc.tenant != "" && !strings.Contains(ae.Message, fmt.Sprintf("%q", tc.tenant))) {
					t.Fatalf("message %q does not name the tenant and %s", ae.Message, tc.setting)
				}
			default:
				if !errors.As(err, &fe) || fe.Field != tc.field {
					t.Fatalf("got %v, want a refusal of %s", err, tc.field)
				}
				if strings.HasPrefix(tc.field, "config.workspace_root") && fe.Reason != agentdv1.ErrorReason_ERROR_REASON_WORKSPACE_FORBIDDEN {
					t.Fatalf("reason %v", fe.Reason)
				}
			}
		})
	}
}

// A workspace root listed for one tenant that another's overlaps, or one
// that exposes agentd's files, stops the agent at start.
func TestCeilingsAreCheckedAtStart(t *testing.T) {
	w := newCeilingWorld(t, nil)
	bad := w.opts
	bad.Ceilings.Tenants = map[string]agent.Ceiling{"acme": {WorkspaceRoots: agent.Limit{Values: []string{w.dbDir}, Setting: "tenants.acme.workspaceRoots"}}}
	if _, err := agent.New(context.Background(), w.h.store, bad); err == nil || !strings.Contains(err.Error(), "tenants.acme.workspaceRoots") {
		t.Fatalf("a tenant root in the database's directory: %v", err)
	}
	bad.Ceilings.Tenants = map[string]agent.Ceiling{"acme": {Tools: agent.Limit{Values: []string{"rm_rf"}, Setting: "tenants.acme.tools"}}}
	if _, err := agent.New(context.Background(), w.h.store, bad); err == nil || !strings.Contains(err.Error(), `"rm_rf"`) {
		t.Fatalf("an unknown tool: %v", err)
	}
}

// At run time the ceiling still holds: a read-only tool the tenant must
// approve asks, and a ceiling lowered since the session was configured
// refuses its next run.
func TestCeilingsHoldAtRunTime(t *testing.T) {
	w := newCeilingWorld(t, nil)
	h := w.h
	if err := os.WriteFile(filepath.Join(w.acmeWS, "notes.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := script(toolCall(t, "c1", "read_file", map[string]any{"path": "notes.txt"}), text("done"))
	cfg.WorkspaceRoot, cfg.Tools = w.acmeWS, []*agentdv1.Tool{{Name: "read_file"}}
	id := h.sessionOf("acme", cfg)
	evs := runAnswering(t, h, id, "read it", func(string) bool { return true }, nil)
	if !strings.Contains(kinds(evs), "approval_requested") {
		t.Fatalf("read_file ran without the approval tenants.acme.requireApproval asks: %s", kinds(evs))
	}

	// The operator takes read_file away from acme; the stored session
	// keeps asking for it.
	lowered := w.opts
	lowered.Ceilings.Tenants = map[string]agent.Ceiling{}
	for k, v := range w.ceilings.Tenants {
		lowered.Ceilings.Tenants[k] = v
	}
	acme := lowered.Ceilings.Tenants["acme"]
	acme.Tools = agent.Limit{Values: []string{"bash"}, Setting: "tenants.acme.tools"}
	lowered.Ceilings.Tenants["acme"] = acme
	h.stop()
	h.opts = lowered
	h.store = memory.Reopen(h.store)
	h.start()
	_, err := h.a.Start(context.Background(), agent.StartRequest{SessionID: id, Prompt: user("again")})
	var ae *agent.Error
	if !errors.As(err, &ae) || !errors.Is(err, agent.ErrPermission) || ae.Metadata["setting"] != "tenants.acme.tools" {
		t.Fatalf("a run beyond the lowered ceiling: %v", err)
	}
	path, _ := h.store.Path(context.Background(), id)
	for _, e := range path {
		if strings.Contains(e.GetMessage().GetUser().String(), "again") {
			t.Fatal("the refused prompt was stored")
		}
	}
}

// bash refuses to be enabled where the sandbox cannot confine it, and
// says how the operator could run it unconfined.
func TestBashNeedsTheSandbox(t *testing.T) {
	w := newCeilingWorld(t, sandbox.Unavailable("user namespaces are disabled"))
	err := w.h.a.CheckConfig("", &agentdv1.SessionConfig{WorkspaceRoot: w.adminWS, Tools: []*agentdv1.Tool{{Name: "bash"}}})
	var ae *agent.Error
	if !errors.As(err, &ae) || !errors.Is(err, agent.ErrPrecondition) || ae.Reason != agentdv1.ErrorReason_ERROR_REASON_SANDBOX_UNAVAILABLE ||
		!strings.Contains(ae.Message, "--sandbox=off") || !strings.Contains(ae.Message, "user namespaces are disabled") {
		t.Fatalf("bash without a sandbox: %v", err)
	}
	// The file tools do not need it.
	if err := w.h.a.CheckConfig("", &agentdv1.SessionConfig{WorkspaceRoot: w.adminWS, Tools: []*agentdv1.Tool{{Name: "read_file"}}}); err != nil {
		t.Fatal(err)
	}
}

// A run's bash command is confined: it runs as the sandbox's identity,
// sees the operator's --tool-env and none of agentd's other variables,
// and the session's ToolSandbox says so.
func TestRunsConfineBash(t *testing.T) {
	sb := sandboxtest.New(t, sandbox.Options{})
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
	w := newCeilingWorld(t, sb)
	h := w.h
	h.stop()
	h.opts.ToolEnv = []string{"GIT_AUTHOR_NAME=agent"}
	h.start()
	cfg := script(toolCall(t, "c1", "bash", map[string]any{"command": `id -u; echo "$GIT_AUTHOR_NAME"; env | grep -c ANTHROPIC`}), text("done"))
	cfg.WorkspaceRoot = w.adminWS
	cfg.Tools = []*agentdv1.Tool{{Name: "bash", Approval: agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW}}
	id := h.session(cfg)
	h.prompt(id, "who are you")
	path, err := h.store.Path(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	// The call's start is recorded before bash runs.
	if st := path[2].GetToolCallStarted(); st.GetToolCallId() != "c1" || st.GetIdempotencyKey() != agent.IdempotencyKey(id, path[2].GetRunId(), "c1") {
		t.Fatalf("entry 2: %v, want the start of c1", path[2])
	}
	tr := path[3].GetMessage().GetToolResult()
	want := fmt.Sprintf("%d\nagent\n0\n\nCommand exited with code 1", sb.Status().UID)
	if got := tr.GetContent()[0].GetText().GetText(); got != want {
		t.Fatalf("bash in a run: %q, want %q", got, want)
	}
	ts := h.a.ToolSandbox(cfg)
	if !ts.GetConfined() || ts.GetNetwork() != agentdv1.SandboxNetwork_SANDBOX_NETWORK_NONE || strings.Join(ts.GetWritablePaths(), ",") != "." {
		t.Fatalf("ToolSandbox %v", ts)
	}
}
