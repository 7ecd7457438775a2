package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/fspath"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/tools"
)

// Defaults for how long a run waits for a client.
const (
	DefaultClientToolTimeout = 10 * time.Minute
	DefaultApprovalTimeout   = 10 * time.Minute
)

// toolKit is the tools of one run (or, without a run, of a configuration
// being checked or previewed): the tool set for the loop and the approval
// policy of each tool that needs one.
type toolKit struct {
	set      *agentloop.ToolSet
	policies map[string]agentdv1.ApprovalPolicy
}

// sessionTool is a server tool as one session declares it: the session may
// override the description and the sequential flag.
type sessionTool struct {
	agentloop.Tool
	def *agentdv1.Tool
}

// Definition implements [agentloop.Tool].
func (t sessionTool) Definition() *agentdv1.Tool { return t.def }

// readOnly reports whether a server tool only reads: such tools run
// without approval unless a session asks otherwise.
func readOnly(t agentloop.Tool) bool {
	ro, ok := t.(interface{ ReadOnly() bool })
	return ok && ro.ReadOnly()
}

// toolKit builds the tools a session of tenant may call in a run, with
// client tools bound to run r (nil when only checking or previewing) and
// the MCP tools of mcp (nil when only checking), within the tenant's
// ceiling; its errors are *FieldError naming the field, or *Error for a
// ceiling or a sandbox that refuses.
func (a *Agent) toolKit(tenant string, cfg *agentdv1.SessionConfig, r *Run, mcp mcpTools) (*toolKit, error) {
	decls := cfg.GetTools()
	if len(decls) > MaxTools {
		return nil, invalid("config.tools", "%d tools exceed the limit of %d", len(decls), MaxTools)
	}
	ceiling := a.opts.Ceilings.ceiling(tenant)
	if err := ceiling.checkConfig(tenant, cfg); err != nil {
		return nil, err
	}
	kit := &toolKit{policies: map[string]agentdv1.ApprovalPolicy{}}
	seen := map[string]int{}
	list := make([]agentloop.Tool, 0, len(decls))
	for i, d := range decls {
		field := fmt.Sprintf("config.tools[%d]", i)
		if err := provider.CheckToolName(d.GetName()); err != nil {
			return nil, invalid(field+".name", "%v", err)
		}
		if j, dup := seen[d.GetName()]; dup {
			return nil, invalid(field+".name", "%q is already declared by config.tools[%d]; tool names must be unique", d.GetName(), j)
		}
		seen[d.GetName()] = i
		if reservedToolName(d.GetName()) {
			return nil, invalid(field+".name", "%q starts with %q, which names the tools of MCP servers; enable a server with config.mcp_servers, or choose another name", d.GetName(), "mcp__")
		}
		var tool agentloop.Tool
		policy := d.GetApproval()
		switch d.GetExecutor() {
		case agentdv1.ToolExecutor_TOOL_EXECUTOR_UNSPECIFIED, agentdv1.ToolExecutor_TOOL_EXECUTOR_SERVER:
			server, ok := a.tools[d.GetName()]
			if !ok && tools.IsBuiltin(d.GetName()) {
				t, err := a.builtinTool(tenant, cfg, d.GetName(), field, r)
				if err != nil {
					return nil, err
				}
				server, ok = t, true
			}
			if !ok {
				return nil, invalid(field+".name", "no server tool is named %q; server tools: %s (or set executor CLIENT to run it in the client)",
					d.GetName(), a.serverToolNames())
			}
			if d.GetParameters() != nil {
				return nil, invalid(field+".parameters", "must be empty for server tool %q: its schema is built in", d.GetName())
			}
			def := &agentdv1.Tool{
				Name:        d.GetName(),
				Description: server.Definition().GetDescription(),
				Parameters:  server.Definition().GetParameters(),
				Executor:    agentdv1.ToolExecutor_TOOL_EXECUTOR_SERVER,
				Approval:    d.GetApproval(),
				Sequential:  d.GetSequential() || server.Definition().GetSequential(),
			}
			if d.GetDescription() != "" {
				def.Description = d.GetDescription()
			}
			tool = sessionTool{Tool: server, def: def}
			if policy == agentdv1.ApprovalPolicy_APPROVAL_POLICY_UNSPECIFIED && !readOnly(server) {
				policy = agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK
			}
		case agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT:
			if d.GetParameters() == nil {
				return nil, invalid(field+".parameters", "required for a client tool: the JSON Schema of its arguments object")
			}
			if d.GetDescription() == "" {
				return nil, invalid(field+".description", "required for a client tool: the model needs to know what it does")
			}
			tool = clientTool{def: d, run: r, timeout: durationOr(cfg.GetClientToolTimeout(), DefaultClientToolTimeout), now: a.opts.Now}
		default:
			return nil, invalid(field+".executor", "unknown executor %d", d.GetExecutor())
		}
		policy = ceiling.approval(d.GetName(), policy)
		switch policy {
		case agentdv1.ApprovalPolicy_APPROVAL_POLICY_UNSPECIFIED, agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW:
		case agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK, agentdv1.ApprovalPolicy_APPROVAL_POLICY_DENY:
			kit.policies[d.GetName()] = policy
		default:
			return nil, invalid(field+".approval", "unknown approval policy %d", policy)
		}
		list = append(list, tool)
	}
	if err := a.checkMCPServers(cfg); err != nil {
		return nil, err
	}
	list = a.addMCPTools(cfg, ceiling, mcp, list, kit.policies)
	list = a.addSpawnTool(cfg, r, ceiling, kit.policies, list)
	if r != nil {
		list = durableTools(r, list)
	}
	if r != nil && a.tracer != nil {
		list = a.tracer.tools(list)
	}
	set, err := a.schemas.NewToolSet(list...)
	if err != nil {
		return nil, invalid("config.tools", "%v", err)
	}
	kit.set = set
	return kit, nil
}

func durationOr(d *durationpb.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.AsDuration()
}

func (a *Agent) serverToolNames() string {
	names := tools.Names()
	for n := range a.tools {
		if !tools.IsBuiltin(n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// checkWorkspaceRoot validates the workspace_root of a session of
// tenant: an existing absolute directory, never one agentd forbids, inside
// the roots the tenant's ceiling allows. It returns the directory with
// symbolic links resolved.
func (a *Agent) checkWorkspaceRoot(tenant, root string) (string, error) {
	const field = "config.workspace_root"
	if !filepath.IsAbs(root) {
		return "", invalid(field, "%q is not an absolute path", root)
	}
	resolved, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", invalid(field, "%q cannot be used: %v", root, err)
	}
	if fi, err := os.Stat(resolved); err != nil || !fi.IsDir() {
		return "", invalid(field, "%q is not a directory", root)
	}
	if fe := a.forbiddenWorkspace(resolved); fe != nil {
		fe.Description = fmt.Sprintf("%q %s", root, fe.Description)
		return "", fe
	}
	roots := a.opts.Ceilings.ceiling(tenant).WorkspaceRoots
	if roots.Values == nil {
		return resolved, nil
	}
	for _, allowed := range roots.Values {
		if fspath.Inside(allowed, resolved) {
			return resolved, nil
		}
	}
	if len(roots.Values) == 0 {
		return "", beyond(tenant, roots.Setting, root, "use the built-in workspace tools: no workspace roots are set for them")
	}
	return "", beyond(tenant, roots.Setting, root, "use a workspace outside %s", strings.Join(roots.Values, ", "))
}

// forbiddenWorkspace refuses a directory (symbolic links resolved) that
// no session may use as its workspace, whatever the ceilings say: "/",
// and any directory that is, holds or lies inside the directory of a
// protected file.
func (a *Agent) forbiddenWorkspace(dir string) *FieldError {
	forbid := func(what, format string, args ...any) *FieldError {
		fe := invalid("config.workspace_root", format, args...)
		fe.Reason = agentdv1.ErrorReason_ERROR_REASON_WORKSPACE_FORBIDDEN
		fe.Metadata = map[string]string{"path": dir, "protects": what}
		return fe
	}
	if dir == "/" {
		return forbid("everything", "is the root directory, which holds everything agentd keeps; choose a directory of its own")
	}
	for _, p := range a.protected {
		switch {
		case fspath.Inside(dir, p.dir):
			return forbid(p.what, "holds the directory of agentd's %s; choose a directory of its own", p.what)
		case fspath.Inside(p.dir, dir):
			return forbid(p.what, "lies inside the directory of agentd's %s; choose a directory of its own", p.what)
		}
	}
	return nil
}

// MaxWritablePaths bounds SandboxSettings.writable_paths.
const MaxWritablePaths = 32

// checkSandboxSettings validates config.sandbox.
func checkSandboxSettings(s *agentdv1.SandboxSettings) error {
	if _, ok := agentdv1.SandboxNetwork_name[int32(s.GetNetwork())]; !ok {
		return invalid("config.sandbox.network", "unknown network %d; use SANDBOX_NETWORK_NONE or SANDBOX_NETWORK_ALLOWED", s.GetNetwork())
	}
	if n := len(s.GetWritablePaths()); n > MaxWritablePaths {
		return invalid("config.sandbox.writable_paths", "%d paths exceed the limit of %d", n, MaxWritablePaths)
	}
	for i, p := range s.GetWritablePaths() {
		if p == "" || len(p) > 1024 || strings.ContainsRune(p, 0) || !filepath.IsLocal(p) {
			return invalid(fmt.Sprintf("config.sandbox.writable_paths[%d]", i), "%q is not a relative path inside the workspace (no leading /, no ..)", truncate(p, 70))
		}
	}
	return nil
}

// workspaceOptions are the built-in tools' options for a session: the
// agent's limits, sandbox and tool environment, with the session's
// network and writable paths.
func (a *Agent) workspaceOptions(cfg *agentdv1.SessionConfig) tools.Options {
	o := a.opts.WorkspaceTools
	o.Sandbox = a.opts.Sandbox
	o.Env = a.opts.ToolEnv
	o.Network = cfg.GetSandbox().GetNetwork() == agentdv1.SandboxNetwork_SANDBOX_NETWORK_ALLOWED
	o.WritablePaths = cfg.GetSandbox().GetWritablePaths()
	return o
}

// ToolSandbox describes the confinement of a session's bash commands, or
// nil when the session does not enable bash.
func (a *Agent) ToolSandbox(cfg *agentdv1.SessionConfig) *agentdv1.ToolSandbox {
	if !slices.ContainsFunc(cfg.GetTools(), func(t *agentdv1.Tool) bool {
		return t.GetName() == tools.Bash && t.GetExecutor() != agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT
	}) {
		return nil
	}
	ts := &agentdv1.ToolSandbox{Network: agentdv1.SandboxNetwork_SANDBOX_NETWORK_NONE, WritablePaths: cfg.GetSandbox().GetWritablePaths()}
	if len(ts.WritablePaths) == 0 {
		ts.WritablePaths = []string{"."}
	}
	if cfg.GetSandbox().GetNetwork() == agentdv1.SandboxNetwork_SANDBOX_NETWORK_ALLOWED {
		ts.Network = agentdv1.SandboxNetwork_SANDBOX_NETWORK_ALLOWED
	}
	if a.opts.Sandbox == nil {
		ts.Mechanism = "none: agentd runs with --sandbox=off, so commands have agentd's own authority"
		ts.Network = agentdv1.SandboxNetwork_SANDBOX_NETWORK_ALLOWED
		ts.WritablePaths = []string{"/"}
		return ts
	}
	st := a.opts.Sandbox.Status()
	ts.Confined = st.Active
	ts.Mechanism = st.String()
	return ts
}

// sandboxUnavailable refuses bash where the sandbox cannot confine it.
func sandboxUnavailable(err error) *Error {
	e := refuse(agentdv1.ErrorReason_ERROR_REASON_SANDBOX_UNAVAILABLE, "bash cannot run confined on this machine (%v); agentd's operator can run bash unconfined, with agentd's own authority, with agentd --sandbox=off", err)
	e.Metadata = map[string]string{"reason": err.Error(), "flag": "--sandbox=off"}
	return e
}

// builtinTool returns the built-in workspace tool name for a session's run,
// opening the session's workspace once per run; without a run it returns a
// stand-in that only declares the tool.
func (a *Agent) builtinTool(tenant string, cfg *agentdv1.SessionConfig, name, field string, r *Run) (agentloop.Tool, error) {
	if cfg.GetWorkspaceRoot() == "" {
		return nil, invalid("config.workspace_root", "required: %s uses the built-in tool %q, which works inside a workspace directory", field, name)
	}
	dir, err := a.checkWorkspaceRoot(tenant, cfg.GetWorkspaceRoot())
	if err != nil {
		return nil, err
	}
	if name == tools.Bash && a.opts.Sandbox != nil {
		if err := a.opts.Sandbox.Available(); err != nil {
			return nil, sandboxUnavailable(err)
		}
	}
	if r == nil {
		def, _ := tools.Definition(name)
		return declaredTool{def: def}, nil
	}
	ws, err := r.workspace(func() (*tools.Workspace, error) { return tools.New(dir, a.workspaceOptions(cfg)) })
	if err != nil {
		return nil, invalid("config.workspace_root", "cannot open %q: %v", cfg.GetWorkspaceRoot(), err)
	}
	t, _ := ws.Tool(name)
	return builtin{Tool: t, readOnly: tools.ReadOnly(name)}, nil
}

// builtin is a built-in workspace tool, marked read-only or not for the
// approval defaults.
type builtin struct {
	agentloop.Tool
	readOnly bool
}

// ReadOnly reports whether the tool only reads.
func (b builtin) ReadOnly() bool { return b.readOnly }

// declaredTool declares a built-in tool for checks and GetContext; it never
// runs.
type declaredTool struct{ def *agentdv1.Tool }

// Definition implements [agentloop.Tool].
func (d declaredTool) Definition() *agentdv1.Tool { return d.def }

// ReadOnly reports the built-in tool's nature.
func (d declaredTool) ReadOnly() bool { return tools.ReadOnly(d.def.GetName()) }

// Execute implements [agentloop.Tool].
func (d declaredTool) Execute(context.Context, agentloop.Call) (agentloop.Result, error) {
	return agentloop.Result{}, fmt.Errorf("tool %s is only declared here", d.def.GetName())
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
