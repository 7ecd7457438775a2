package agent

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider/faux"
	"github.com/agentd/agentd/tools"
	"github.com/agentd/agentd/tools/mcp"
)

// Limit is one kind of ceiling: the values the operator allows, and where
// the operator said so.
type Limit struct {
	// Values allowed. nil leaves the kind open; an empty list allows
	// nothing of it.
	Values []string
	// Setting names where the operator set it, for refusals: an
	// --auth-config key such as "tenants.acme.tools", or a flag such as
	// "--allowed-tools".
	Setting string
}

// Permit is a yes-or-no ceiling and where the operator set it.
type Permit struct {
	// Allowed is nil when the operator said nothing: a tenant's then
	// follows the default, and the default then means no.
	Allowed *bool
	// Setting names where the operator set it, as Limit.Setting.
	Setting string
}

// Ceiling bounds what the sessions of a tenant may enable: the operator's
// word, over anything a session asks.
type Ceiling struct {
	// WorkspaceRoots are the directories a session's workspace_root must
	// lie in.
	WorkspaceRoots Limit
	// Tools are the server tools (built-in, and Options.Tools) sessions
	// may enable; client tools run in the client and are not bounded here.
	Tools Limit
	// MCPServers are the MCP servers sessions may enable.
	MCPServers Limit
	// Models are patterns (path.Match) over "provider/id", such as
	// "anthropic/*" or "faux/*", of the models sessions may use.
	Models Limit
	// RequireApproval are patterns over tool names (built-in, server, and
	// mcp__server__tool) whose calls always ask for approval: a session
	// may not set ALLOW for them, and UNSPECIFIED means ASK even for a
	// read-only tool.
	RequireApproval Limit
	// Network is whether sessions may give their commands agentd's
	// network (SandboxSettings.network ALLOWED).
	Network Permit
}

// Ceilings are the operator's ceilings for every tenant. The zero value
// bounds nothing but the network, as a single app's sidecar expects.
type Ceilings struct {
	// Default applies to sessions of no tenant, and to each kind a
	// tenant's own ceiling leaves open (nil).
	Default Ceiling
	// Tenants are the tenants' own ceilings, by name.
	Tenants map[string]Ceiling
	// TenantWorkspaces makes the sessions of a tenant use only the
	// tenant's own WorkspaceRoots: a tenant without any cannot use the
	// built-in workspace tools (agentd under --auth-config).
	TenantWorkspaces bool
}

// ceiling is what bounds the sessions of tenant: its own ceiling, kind by
// kind over the default.
func (c *Ceilings) ceiling(tenant string) Ceiling {
	eff := c.Default
	if tenant == "" {
		return eff
	}
	own := c.Tenants[tenant]
	over := func(dst *Limit, src Limit) {
		if src.Values != nil {
			*dst = src
		}
	}
	if c.TenantWorkspaces {
		eff.WorkspaceRoots = own.WorkspaceRoots
		if eff.WorkspaceRoots.Setting == "" {
			eff.WorkspaceRoots.Setting = "tenants." + tenant + ".workspaceRoots"
		}
		if eff.WorkspaceRoots.Values == nil {
			eff.WorkspaceRoots.Values = []string{}
		}
	} else {
		over(&eff.WorkspaceRoots, own.WorkspaceRoots)
	}
	over(&eff.Tools, own.Tools)
	over(&eff.MCPServers, own.MCPServers)
	over(&eff.Models, own.Models)
	over(&eff.RequireApproval, own.RequireApproval)
	if own.Network.Allowed != nil {
		eff.Network = own.Network
	}
	return eff
}

// checkCeilings checks at start-up that the ceilings name tools and
// servers this agent has and patterns that compile, and resolves their
// workspace roots.
func (a *Agent) checkCeilings(c *Ceilings) error {
	check := func(cl *Ceiling) error {
		for _, t := range cl.Tools.Values {
			if _, ok := a.tools[t]; !ok && !tools.IsBuiltin(t) {
				return fmt.Errorf("%s: no server tool is named %q; server tools: %s", cl.Tools.Setting, t, a.serverToolNames())
			}
		}
		for _, s := range cl.MCPServers.Values {
			if _, ok := a.mcpServer(s); !ok {
				return fmt.Errorf("%s: %s", cl.MCPServers.Setting, a.noMCPServer(s))
			}
		}
		for _, l := range []Limit{cl.Models, cl.RequireApproval} {
			for _, p := range l.Values {
				if _, err := path.Match(p, ""); err != nil {
					return fmt.Errorf("%s: %q is not a pattern: %w", l.Setting, p, err)
				}
			}
		}
		for i, root := range cl.WorkspaceRoots.Values {
			resolved, err := filepath.EvalSymlinks(root)
			if err != nil || !filepath.IsAbs(root) {
				return fmt.Errorf("%s: workspace root %q must be an existing absolute directory", cl.WorkspaceRoots.Setting, root)
			}
			if fi, err := os.Stat(resolved); err != nil || !fi.IsDir() {
				return fmt.Errorf("%s: workspace root %q is not a directory", cl.WorkspaceRoots.Setting, root)
			}
			if err := a.forbiddenWorkspace(resolved); err != nil {
				return fmt.Errorf("%s: workspace root %q: %s", cl.WorkspaceRoots.Setting, root, err.Description)
			}
			cl.WorkspaceRoots.Values[i] = resolved
		}
		return nil
	}
	if err := check(&c.Default); err != nil {
		return err
	}
	for name, cl := range c.Tenants {
		if err := check(&cl); err != nil {
			return err
		}
		c.Tenants[name] = cl
	}
	return nil
}

// beyond is the refusal of a session asking for value beyond tenant's
// ceiling at setting.
func beyond(tenant, setting, value, format string, args ...any) *Error {
	who := "this agentd's sessions"
	if tenant != "" {
		who = fmt.Sprintf("the sessions of tenant %q", tenant)
	}
	e := refuse(agentdv1.ErrorReason_ERROR_REASON_TENANT_CEILING, "%s may not %s (the operator's setting %s)", who, fmt.Sprintf(format, args...), setting)
	e.Metadata = map[string]string{"tenant": tenant, "setting": setting, "value": value}
	return e
}

func allows(l Limit, v string) bool { return l.Values == nil || slices.Contains(l.Values, v) }

func matchesAny(patterns []string, v string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, v); ok {
			return true
		}
	}
	return false
}

// modelName is a model reference as the Models patterns see it.
func modelName(ref *agentdv1.ModelRef) string {
	if isFaux(ref) {
		id := ref.GetId()
		if id == "" {
			id = faux.ModelID
		}
		return faux.ProviderName + "/" + id
	}
	return ref.GetProvider() + "/" + ref.GetId()
}

// checkModel refuses a model beyond the tenant's ceiling.
func (c Ceiling) checkModel(tenant, field string, ref *agentdv1.ModelRef) error {
	if c.Models.Values == nil {
		return nil
	}
	if name := modelName(ref); !matchesAny(c.Models.Values, name) {
		return beyond(tenant, c.Models.Setting, name, "use model %s (%s allows %s)", name, field, strings.Join(c.Models.Values, ", "))
	}
	return nil
}

// checkConfig refuses what a session configuration asks beyond the
// tenant's ceiling, other than the models and the workspace (checked with
// them).
func (c Ceiling) checkConfig(tenant string, cfg *agentdv1.SessionConfig) error {
	for i, d := range cfg.GetTools() {
		if d.GetExecutor() == agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT {
			continue
		}
		if !allows(c.Tools, d.GetName()) {
			return beyond(tenant, c.Tools.Setting, d.GetName(), "enable tool %q (config.tools[%d]); allowed: %s", d.GetName(), i, listOrNone(c.Tools.Values))
		}
		if d.GetApproval() == agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW && matchesAny(c.RequireApproval.Values, d.GetName()) {
			return beyond(tenant, c.RequireApproval.Setting, d.GetName(), "run tool %q without approval (config.tools[%d].approval ALLOW); leave it unset or ASK", d.GetName(), i)
		}
	}
	for i, use := range cfg.GetMcpServers() {
		if !allows(c.MCPServers, use.GetName()) {
			return beyond(tenant, c.MCPServers.Setting, use.GetName(), "enable MCP server %q (config.mcp_servers[%d]); allowed: %s", use.GetName(), i, listOrNone(c.MCPServers.Values))
		}
		if use.GetApproval() == agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW && matchesAny(c.RequireApproval.Values, mcp.ModelName(use.GetName(), "*")) {
			return beyond(tenant, c.RequireApproval.Setting, use.GetName(), "run the tools of MCP server %q without approval (config.mcp_servers[%d].approval ALLOW)", use.GetName(), i)
		}
		for tool, p := range use.GetToolApproval() {
			if name := mcp.ModelName(use.GetName(), tool); p == agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW && matchesAny(c.RequireApproval.Values, name) {
				return beyond(tenant, c.RequireApproval.Setting, name, "run tool %q without approval (config.mcp_servers[%d].tool_approval)", name, i)
			}
		}
	}
	if cfg.GetSandbox().GetNetwork() == agentdv1.SandboxNetwork_SANDBOX_NETWORK_ALLOWED && (c.Network.Allowed == nil || !*c.Network.Allowed) {
		setting := c.Network.Setting
		if setting == "" {
			setting = "--sandbox-network"
		}
		return beyond(tenant, setting, "SANDBOX_NETWORK_ALLOWED", "give commands the network (config.sandbox.network ALLOWED)")
	}
	return nil
}

// approval is the policy a call of tool name gets under the ceiling,
// given the session's (already defaulted) policy.
func (c Ceiling) approval(name string, policy agentdv1.ApprovalPolicy) agentdv1.ApprovalPolicy {
	if policy != agentdv1.ApprovalPolicy_APPROVAL_POLICY_DENY && matchesAny(c.RequireApproval.Values, name) {
		return agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK
	}
	return policy
}

func listOrNone(v []string) string {
	if len(v) == 0 {
		return "none"
	}
	return strings.Join(v, ", ")
}
