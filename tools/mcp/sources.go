package mcp

import (
	"context"
	"sync"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Sources reports every configured server, by name: its state, the tools
// it offers as last listed, and for a running stdio server its process id.
// With refresh it first connects to every server and lists its tools
// (concurrently, each within its own timeouts); a server that fails is
// reported FAILED with the reason.
func (m *Manager) Sources(ctx context.Context, refresh bool) []*agentdv1.ToolSource {
	if refresh {
		var wg sync.WaitGroup
		for _, s := range m.servers {
			wg.Go(func() {
				if _, err := s.listTools(ctx); err != nil {
					s.mu.Lock()
					s.lastErr = err.Error()
					s.mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	out := make([]*agentdv1.ToolSource, 0, len(m.servers))
	for _, name := range m.Names() {
		out = append(out, m.servers[name].source())
	}
	return out
}

func (s *server) source() *agentdv1.ToolSource {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := &agentdv1.ToolSource{
		Name:      s.name,
		Transport: s.cfg.transport(),
		ReadOnly:  s.cfg.ReadOnly,
		Tools:     s.tools,
		LastError: s.lastErr,
		Restarts:  s.restarts,
		State:     agentdv1.ToolSourceState_TOOL_SOURCE_STATE_STOPPED,
	}
	switch {
	case s.conn != nil:
		src.State = agentdv1.ToolSourceState_TOOL_SOURCE_STATE_READY
		if c := s.conn.cmd; c != nil && c.Process != nil {
			src.Pid = int32(c.Process.Pid)
		}
	case s.lastErr != "":
		src.State = agentdv1.ToolSourceState_TOOL_SOURCE_STATE_FAILED
	}
	return src
}
