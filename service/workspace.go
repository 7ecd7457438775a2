package service

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/tools"
)

// checkWorkspaceRoot validates a session's workspace_root: an existing
// absolute directory, inside one of the allowed roots when the server
// restricts them.
func (s *Service) checkWorkspaceRoot(root string) error {
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
	if len(s.workspaceRoots) == 0 {
		return nil
	}
	for _, allowed := range s.workspaceRoots {
		if rel, err := filepath.Rel(allowed, resolved); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return nil
		}
	}
	return invalid(field, "%q is outside the roots this agentd allows (%s; see --workspace-roots)", root, strings.Join(s.workspaceRoots, ", "))
}

// builtinTool returns the built-in workspace tool name for a session's run,
// opening the session's workspace once per run; without a run it returns a
// stand-in that only declares the tool.
func (s *Service) builtinTool(cfg *agentdv1.SessionConfig, name, field string, run *runHandle) (agentloop.Tool, error) {
	if cfg.GetWorkspaceRoot() == "" {
		return nil, invalid("config.workspace_root", "required: %s uses the built-in tool %q, which works inside a workspace directory", field, name)
	}
	if err := s.checkWorkspaceRoot(cfg.GetWorkspaceRoot()); err != nil {
		return nil, err
	}
	if run == nil {
		def, _ := tools.Definition(name)
		return declaredTool{def: def}, nil
	}
	ws, err := run.workspace(func() (*tools.Workspace, error) { return tools.New(cfg.GetWorkspaceRoot(), s.workspaceTools) })
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

// declaredTool declares a built-in tool for validation and GetContext; it
// never runs.
type declaredTool struct{ def *agentdv1.Tool }

// Definition implements agentloop.Tool.
func (d declaredTool) Definition() *agentdv1.Tool { return d.def }

// ReadOnly reports the built-in tool's nature.
func (d declaredTool) ReadOnly() bool { return tools.ReadOnly(d.def.GetName()) }

// Execute implements agentloop.Tool.
func (d declaredTool) Execute(context.Context, agentloop.Call) (agentloop.Result, error) {
	return agentloop.Result{}, fmt.Errorf("tool %s is only declared here", d.def.GetName())
}
