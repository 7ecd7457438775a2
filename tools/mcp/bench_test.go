package mcp_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agentloop"
	"github.com/agentd/agentd/tools"
	"github.com/agentd/agentd/tools/mcp"
	"github.com/agentd/agentd/tools/mcp/mcptest"
)

// BenchmarkToolCallRoundTrip reads the same small file through the
// built-in read_file tool and through @modelcontextprotocol/server-filesystem's
// read_text_file over stdio, one call of each per iteration (interleaved,
// so both see the same machine), and reports each per call and their ratio.
func BenchmarkToolCallRoundTrip(b *testing.B) {
	dir := b.TempDir()
	file := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(file, []byte(strings.Repeat("a line of notes\n", 64)), 0o644); err != nil {
		b.Fatal(err)
	}
	ws, err := tools.New(dir, tools.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	builtin, _ := ws.Tool(tools.ReadFile)
	m := mcp.NewManager(&mcp.Config{Servers: map[string]*mcp.ServerConfig{"fs": mcptest.Filesystem(b, dir)}}, mcp.Options{})
	defer m.Close()
	ctx := context.Background()
	specs, err := m.Tools(ctx, "fs")
	if err != nil {
		b.Fatal(err)
	}
	var viaMCP agentloop.Tool
	for _, s := range specs {
		if s.GetName() == "read_text_file" {
			viaMCP = m.Tool("fs", s)
		}
	}
	if viaMCP == nil {
		b.Fatal("server-filesystem has no read_text_file")
	}
	args := map[string]any{"path": file}
	var inMCP, inBuiltin time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		res, err := execute(viaMCP, ctx, args, nil)
		inMCP += time.Since(start)
		if err != nil || res.IsError {
			b.Fatalf("mcp: %v %v", res.Content, err)
		}
		start = time.Now()
		res, err = execute(builtin, ctx, args, nil)
		inBuiltin += time.Since(start)
		if err != nil || res.IsError {
			b.Fatalf("builtin: %v %v", res.Content, err)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(inMCP.Microseconds())/n, "µs/mcp-call")
	b.ReportMetric(float64(inBuiltin.Microseconds())/n, "µs/builtin-call")
	b.ReportMetric(float64(inMCP)/float64(inBuiltin), "mcp/builtin")
}
