package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/tools/mcp"
)

// mcpListTimeout bounds how long starting a run waits for an MCP server's
// tool list (starting a stdio server included) before it goes on with the
// session's stored snapshot.
const mcpListTimeout = 10 * time.Second

// mcpTools are the tools of a session's MCP servers as one run (or one
// GetContext) sees them: server name → tools.
type mcpTools map[string][]*agentdv1.McpTool

// checkMCPServers checks config.mcp_servers against this agent's servers.
func (a *Agent) checkMCPServers(cfg *agentdv1.SessionConfig) error {
	seen := map[string]int{}
	for i, use := range cfg.GetMcpServers() {
		field := fmt.Sprintf("config.mcp_servers[%d]", i)
		name := use.GetName()
		if name == "" {
			return invalid(field+".name", "required: the name of one of this agentd's MCP servers (see ListToolSources)")
		}
		server, ok := a.mcpServer(name)
		if !ok {
			return invalid(field+".name", "%s", a.noMCPServer(name))
		}
		if j, dup := seen[name]; dup {
			return invalid(field+".name", "MCP server %q is already enabled by config.mcp_servers[%d]", name, j)
		}
		seen[name] = i
		for j, tool := range use.GetTools() {
			if !server.Allowed(tool) {
				return invalid(fmt.Sprintf("%s.tools[%d]", field, j), "tool %q of MCP server %q is hidden by this agentd's allow or deny list for the server", tool, name)
			}
		}
		if err := checkApprovalPolicy(field+".approval", use.GetApproval()); err != nil {
			return err
		}
		for tool, policy := range use.GetToolApproval() {
			if tool == "" {
				return invalid(field+".tool_approval", "a key is empty; keys are the server's tool names")
			}
			if err := checkApprovalPolicy(fmt.Sprintf("%s.tool_approval[%q]", field, tool), policy); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkApprovalPolicy(field string, p agentdv1.ApprovalPolicy) error {
	if _, ok := agentdv1.ApprovalPolicy_name[int32(p)]; !ok {
		return invalid(field, "unknown approval policy %d", p)
	}
	return nil
}

func (a *Agent) mcpServer(name string) (*mcp.ServerConfig, bool) {
	if a.opts.MCP == nil {
		return nil, false
	}
	return a.opts.MCP.Server(name)
}

func (a *Agent) noMCPServer(name string) string {
	if a.opts.MCP == nil || len(a.opts.MCP.Names()) == 0 {
		return fmt.Sprintf("no MCP server is named %q: this agentd has none (its operator configures them with --mcp-config)", name)
	}
	return fmt.Sprintf("no MCP server is named %q; this agentd's MCP servers: %s", name, strings.Join(a.opts.MCP.Names(), ", "))
}

// addMCPTools adds the tools of the session's MCP servers to a kit being
// built: each server's tools as tools declares them, narrowed by the
// operator's lists and the session's, with their approval policies.
func (a *Agent) addMCPTools(cfg *agentdv1.SessionConfig, ceiling Ceiling, tools mcpTools, list []agentloop.Tool, policies map[string]agentdv1.ApprovalPolicy) []agentloop.Tool {
	for _, use := range cfg.GetMcpServers() {
		server, ok := a.mcpServer(use.GetName())
		if !ok {
			continue // checked by checkMCPServers
		}
		for _, spec := range tools[use.GetName()] {
			if !server.Allowed(spec.GetName()) || (len(use.GetTools()) > 0 && !slices.Contains(use.GetTools(), spec.GetName())) {
				continue
			}
			tool := a.opts.MCP.Tool(use.GetName(), spec)
			if _, err := a.schemas.NewToolSet(tool); err != nil {
				a.opts.Logger.Warn("MCP tool left out: its input schema does not compile", "server", use.GetName(), "tool", spec.GetName(), "err", err)
				continue
			}
			policy, ok := use.GetToolApproval()[spec.GetName()]
			if !ok || policy == agentdv1.ApprovalPolicy_APPROVAL_POLICY_UNSPECIFIED {
				policy = use.GetApproval()
			}
			if policy == agentdv1.ApprovalPolicy_APPROVAL_POLICY_UNSPECIFIED && !server.ReadOnly {
				policy = agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK
			}
			policy = ceiling.approval(tool.Definition().GetName(), policy)
			if policy == agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK || policy == agentdv1.ApprovalPolicy_APPROVAL_POLICY_DENY {
				policies[tool.Definition().GetName()] = policy
			}
			list = append(list, tool)
		}
	}
	return list
}

// storedMCPTools returns the latest snapshot of each of the session's MCP
// servers on the path to leaf (the session's leaf when empty). path is the
// part of it a context is built from; when that starts after the root (a
// compaction) and a server's snapshot is not in it, the whole path is read.
func (a *Agent) storedMCPTools(ctx context.Context, sessionID, leaf string, cfg *agentdv1.SessionConfig, path []*agentdv1.Entry) (mcpTools, error) {
	want := len(cfg.GetMcpServers())
	found := mcpTools{}
	scan := func(path []*agentdv1.Entry) {
		for i := len(path) - 1; i >= 0 && len(found) < want; i-- {
			if s := path[i].GetMcpTools(); s != nil {
				if _, seen := found[s.GetServer()]; !seen {
					found[s.GetServer()] = s.GetTools()
				}
			}
		}
	}
	scan(path)
	if len(found) < want && len(path) > 0 && path[0].GetParentId() != "" {
		var full []*agentdv1.Entry
		var err error
		if leaf == "" {
			full, err = a.store.Path(ctx, sessionID)
		} else {
			full, err = a.store.PathTo(ctx, sessionID, leaf)
		}
		if err != nil {
			return nil, err
		}
		scan(full)
	}
	return found, nil
}

// runMCPTools decides the MCP tools of a run that starts: each server's
// current list (connecting to it when needed), or, when the server cannot
// be reached now, its stored snapshot (its calls then fail as results).
// It returns the snapshots to write because they are new or changed.
func (a *Agent) runMCPTools(ctx context.Context, sessionID string, cfg *agentdv1.SessionConfig, stored mcpTools) (mcpTools, []*agentdv1.McpToolsSnapshot) {
	tools := mcpTools{}
	var changed []*agentdv1.McpToolsSnapshot
	for _, use := range cfg.GetMcpServers() {
		name := use.GetName()
		lctx, cancel := context.WithTimeout(ctx, mcpListTimeout)
		live, err := a.opts.MCP.Tools(lctx, name)
		cancel()
		old, had := stored[name]
		if err != nil {
			a.opts.Logger.WarnContext(ctx, "MCP server unavailable at the start of a run; its stored tools are offered", "session", sessionID, "server", name, "stored", had, "err", err)
			if had {
				tools[name] = old
			}
			continue
		}
		tools[name] = live
		if !had || !sameTools(old, live) {
			changed = append(changed, &agentdv1.McpToolsSnapshot{Server: name, Tools: live})
		}
	}
	return tools, changed
}

// contextMCPTools decides the MCP tools GetContext shows: those the next
// run would see, without writing anything. A stored snapshot stands
// unless the server is connected with a different current list; a server
// without one is asked for its list.
func (a *Agent) contextMCPTools(ctx context.Context, cfg *agentdv1.SessionConfig, stored mcpTools) mcpTools {
	tools := mcpTools{}
	if a.opts.MCP == nil {
		return tools
	}
	for _, use := range cfg.GetMcpServers() {
		name := use.GetName()
		if known, ok := a.opts.MCP.Known(name); ok {
			tools[name] = known
			continue
		}
		if old, had := stored[name]; had {
			tools[name] = old
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, mcpListTimeout)
		live, err := a.opts.MCP.Tools(lctx, name)
		cancel()
		if err == nil {
			tools[name] = live
		}
	}
	return tools
}

func sameTools(a, b []*agentdv1.McpTool) bool {
	return slices.EqualFunc(a, b, func(x, y *agentdv1.McpTool) bool { return proto.Equal(x, y) })
}

// mcpSnapshotEntries are the entries a run writes for changed snapshots.
func mcpSnapshotEntries(runID string, snaps []*agentdv1.McpToolsSnapshot) []*agentdv1.Entry {
	entries := make([]*agentdv1.Entry, len(snaps))
	for i, s := range snaps {
		entries[i] = &agentdv1.Entry{RunId: runID, Payload: &agentdv1.Entry_McpTools{McpTools: s}}
	}
	return entries
}

// reservedToolName reports whether a declared tool takes a name of the
// MCP tools' namespace.
func reservedToolName(name string) bool { return strings.HasPrefix(name, mcp.ToolPrefix) }

// ToolSources reports the MCP servers sessions may enable, with their
// state and tools; refresh connects to each first (see
// [mcp.Manager.Sources]).
func (a *Agent) ToolSources(ctx context.Context, refresh bool) []*agentdv1.ToolSource {
	if a.opts.MCP == nil {
		return []*agentdv1.ToolSource{}
	}
	return a.opts.MCP.Sources(ctx, refresh)
}
