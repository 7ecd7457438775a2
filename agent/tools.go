package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/tools"
)

// Defaults for how long a run waits for a client.
const (
	DefaultClientToolTimeout = 10 * time.Minute
	DefaultApprovalTimeout   = 10 * time.Minute
)

// ToolNamePattern is what a tool name may be: what every provider API
// accepts.
var ToolNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

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

// Definition implements agentloop.Tool.
func (t sessionTool) Definition() *agentdv1.Tool { return t.def }

// readOnly reports whether a server tool only reads: such tools run
// without approval unless a session asks otherwise.
func readOnly(t agentloop.Tool) bool {
	ro, ok := t.(interface{ ReadOnly() bool })
	return ok && ro.ReadOnly()
}

// toolKit builds the tools a session's run may call, with client tools
// bound to run r (nil when only checking or previewing) and the MCP tools
// of mcp (nil when only checking); its errors are *FieldError naming the
// field.
func (a *Agent) toolKit(cfg *agentdv1.SessionConfig, r *Run, mcp mcpTools) (*toolKit, error) {
	decls := cfg.GetTools()
	if len(decls) > MaxTools {
		return nil, invalid("config.tools", "%d tools exceed the limit of %d", len(decls), MaxTools)
	}
	kit := &toolKit{policies: map[string]agentdv1.ApprovalPolicy{}}
	seen := map[string]int{}
	list := make([]agentloop.Tool, 0, len(decls))
	for i, d := range decls {
		field := fmt.Sprintf("config.tools[%d]", i)
		if !ToolNamePattern.MatchString(d.GetName()) {
			return nil, invalid(field+".name", "%q is not a valid tool name (1 to 64 characters of a-z A-Z 0-9 _ -)", truncate(d.GetName(), 70))
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
				t, err := a.builtinTool(cfg, d.GetName(), field, r)
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
	list = a.addMCPTools(cfg, mcp, list, kit.policies)
	if r != nil && a.tracer != nil {
		list = a.tracer.tools(list)
	}
	set, err := agentloop.NewToolSet(list...)
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

// checkWorkspaceRoot validates a session's workspace_root: an existing
// absolute directory, inside one of the allowed roots when agentd restricts
// them.
func (a *Agent) checkWorkspaceRoot(root string) error {
	const field = "config.workspace_root"
	if !filepath.IsAbs(root) {
		return invalid(field, "%q is not an absolute path", root)
	}
	resolved, err := filepath.EvalSymlinks(root)
	if err != nil {
		return invalid(field, "%q cannot be used: %v", root, err)
	}
	if fi, err := os.Stat(resolved); err != nil || !fi.IsDir() {
		return invalid(field, "%q is not a directory", root)
	}
	if len(a.workspaceRoots) == 0 {
		return nil
	}
	for _, allowed := range a.workspaceRoots {
		if rel, err := filepath.Rel(allowed, resolved); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return nil
		}
	}
	return invalid(field, "%q is outside the roots this agentd allows (%s; see --workspace-roots)", root, strings.Join(a.workspaceRoots, ", "))
}

// builtinTool returns the built-in workspace tool name for a session's run,
// opening the session's workspace once per run; without a run it returns a
// stand-in that only declares the tool.
func (a *Agent) builtinTool(cfg *agentdv1.SessionConfig, name, field string, r *Run) (agentloop.Tool, error) {
	if cfg.GetWorkspaceRoot() == "" {
		return nil, invalid("config.workspace_root", "required: %s uses the built-in tool %q, which works inside a workspace directory", field, name)
	}
	if err := a.checkWorkspaceRoot(cfg.GetWorkspaceRoot()); err != nil {
		return nil, err
	}
	if r == nil {
		def, _ := tools.Definition(name)
		return declaredTool{def: def}, nil
	}
	ws, err := r.workspace(func() (*tools.Workspace, error) { return tools.New(cfg.GetWorkspaceRoot(), a.opts.WorkspaceTools) })
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

// Definition implements agentloop.Tool.
func (d declaredTool) Definition() *agentdv1.Tool { return d.def }

// ReadOnly reports the built-in tool's nature.
func (d declaredTool) ReadOnly() bool { return tools.ReadOnly(d.def.GetName()) }

// Execute implements agentloop.Tool.
func (d declaredTool) Execute(context.Context, agentloop.Call) (agentloop.Result, error) {
	return agentloop.Result{}, fmt.Errorf("tool %s is only declared here", d.def.GetName())
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
