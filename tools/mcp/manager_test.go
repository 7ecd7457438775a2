package mcp_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/tools/mcp"
	"github.com/agentd/agentd/tools/mcp/mcptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newManager(t *testing.T, servers map[string]*mcp.ServerConfig) *mcp.Manager {
	t.Helper()
	m := mcp.NewManager(&mcp.Config{Servers: servers}, mcp.Options{Version: "test"})
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func source(t *testing.T, m *mcp.Manager, name string) *agentdv1.ToolSource {
	t.Helper()
	for _, s := range m.Sources(context.Background(), false) {
		if s.GetName() == name {
			return s
		}
	}
	t.Fatalf("no source %q", name)
	return nil
}

func toolNames(tools []*agentdv1.McpTool) []string {
	var names []string
	for _, t := range tools {
		names = append(names, t.GetName())
	}
	return names
}

func text(res *mcpsdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcpsdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestEverythingOverStdio(t *testing.T) {
	ev := mcptest.Everything(t)
	ev.DenyTools = []string{"get-env"}
	m := newManager(t, map[string]*mcp.ServerConfig{"everything": ev})
	ctx := context.Background()

	if s := source(t, m, "everything"); s.GetState() != agentdv1.ToolSourceState_TOOL_SOURCE_STATE_STOPPED || s.GetPid() != 0 {
		t.Fatalf("before first use: %v, want STOPPED without a process", s)
	}
	tools, err := m.Tools(ctx, "everything")
	if err != nil {
		t.Fatal(err)
	}
	names := toolNames(tools)
	for _, want := range []string{"echo", "get-sum", "get-tiny-image", "get-structured-content", "trigger-long-running-operation"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools %v lack %q", names, want)
		}
	}
	if slices.Contains(names, "get-env") {
		t.Errorf("deny-listed get-env is listed: %v", names)
	}
	if s := source(t, m, "everything"); s.GetState() != agentdv1.ToolSourceState_TOOL_SOURCE_STATE_READY || s.GetPid() == 0 || s.GetTransport() != "stdio" {
		t.Fatalf("after listing: %v, want READY with a pid", s)
	}

	res, err := m.Call(ctx, "everything", "echo", map[string]any{"message": "hi there"}, nil)
	if err != nil || !strings.Contains(text(res), "hi there") || res.IsError {
		t.Fatalf("echo: %v %v", text(res), err)
	}

	var mu sync.Mutex
	var progress []mcp.Progress
	res, err = m.Call(ctx, "everything", "trigger-long-running-operation", map[string]any{"duration": 0.4, "steps": 4}, func(p mcp.Progress) {
		mu.Lock()
		progress = append(progress, p)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	// The last notification may cross the result, after which the call's
	// progress is no longer listened to.
	if len(progress) < 3 || progress[0].Progress != 1 || progress[len(progress)-1].Total != 4 {
		t.Errorf("progress %+v, want at least 3 of the 4 notifications, from 1/4 on", progress)
	}
	mu.Unlock()
	if !strings.Contains(text(res), "Long running operation completed") {
		t.Errorf("long operation: %q", text(res))
	}
}

func TestResultsSplitBetweenModelAndDetails(t *testing.T) {
	m := newManager(t, map[string]*mcp.ServerConfig{"everything": mcptest.Everything(t)})
	tools, err := m.Tools(context.Background(), "everything")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*agentdv1.McpTool{}
	for _, tl := range tools {
		byName[tl.GetName()] = tl
	}
	tests := []struct {
		tool  string
		args  map[string]any
		check func(t *testing.T, content []*agentdv1.ContentBlock, details map[string]any)
	}{
		{"get-tiny-image", nil, func(t *testing.T, content []*agentdv1.ContentBlock, _ map[string]any) {
			var images int
			for _, c := range content {
				if img := c.GetImage(); img != nil && len(img.GetData()) > 0 && img.GetMimeType() == "image/png" {
					images++
				}
			}
			if images != 1 {
				t.Errorf("content %v, want one PNG image for the model", content)
			}
		}},
		{"get-structured-content", map[string]any{"location": "New York"}, func(t *testing.T, content []*agentdv1.ContentBlock, details map[string]any) {
			sc, ok := details["structuredContent"].(map[string]any)
			if !ok || sc["temperature"] == nil {
				t.Errorf("details %v, want structuredContent with a temperature", details)
			}
			if len(content) == 0 || content[0].GetText().GetText() == "" {
				t.Errorf("content %v, want text for the model", content)
			}
		}},
		{"get-resource-links", map[string]any{"count": 2}, func(t *testing.T, _ []*agentdv1.ContentBlock, details map[string]any) {
			links, _ := details["resourceLinks"].([]any)
			if len(links) != 2 {
				t.Errorf("details %v, want 2 resource links", details)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.tool, func(t *testing.T) {
			spec := byName[tc.tool]
			if spec == nil {
				t.Fatalf("server has no %s", tc.tool)
			}
			tl := m.Tool("everything", spec)
			if got, want := tl.Definition().GetName(), "mcp__everything__"+tc.tool; got != want {
				t.Errorf("model name %q, want %q", got, want)
			}
			res, err := execute(tl, context.Background(), tc.args, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError {
				t.Fatalf("error result: %v", res.Content)
			}
			var details map[string]any
			if res.Details != nil {
				details, _ = res.Details.AsInterface().(map[string]any)
			}
			tc.check(t, res.Content, details)
		})
	}
}

func TestErrorResultIsKept(t *testing.T) {
	dir := t.TempDir()
	m := newManager(t, map[string]*mcp.ServerConfig{"fs": mcptest.Filesystem(t, dir)})
	res, err := m.Call(context.Background(), "fs", "read_text_file", map[string]any{"path": dir + "/missing.txt"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(strings.ToLower(text(res)), "no such file") {
		t.Fatalf("isError %v, text %q: want the server's error result", res.IsError, text(res))
	}
}

func TestServerKilledMidCallIsRestartedForTheNextCall(t *testing.T) {
	m := newManager(t, map[string]*mcp.ServerConfig{"everything": mcptest.Everything(t)})
	ctx := context.Background()
	if _, err := m.Tools(ctx, "everything"); err != nil {
		t.Fatal(err)
	}
	pid := int(source(t, m, "everything").GetPid())
	errc := make(chan error, 1)
	started := make(chan struct{}, 1)
	go func() {
		_, err := m.Call(ctx, "everything", "trigger-long-running-operation", map[string]any{"duration": 20, "steps": 40}, func(mcp.Progress) {
			select {
			case started <- struct{}{}:
			default:
			}
		})
		errc <- err
	}()
	<-started
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "stopped during the call") || !strings.Contains(err.Error(), "started again for the next call") {
			t.Fatalf("call during the crash: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not end when its server died")
	}
	if s := source(t, m, "everything"); s.GetState() != agentdv1.ToolSourceState_TOOL_SOURCE_STATE_FAILED || !strings.Contains(s.GetLastError(), "signal: killed") {
		t.Errorf("after the crash: %v, want FAILED naming the signal", s)
	}
	res, err := m.Call(ctx, "everything", "echo", map[string]any{"message": "back"}, nil)
	if err != nil || !strings.Contains(text(res), "back") {
		t.Fatalf("next call: %v, %v", res, err)
	}
	s := source(t, m, "everything")
	if s.GetRestarts() != 1 || s.GetPid() == 0 || int(s.GetPid()) == pid || s.GetState() != agentdv1.ToolSourceState_TOOL_SOURCE_STATE_READY {
		t.Errorf("after the restart: %v, want READY, a new pid and 1 restart", s)
	}
}

func TestHangingCallTimesOutAndServerStays(t *testing.T) {
	ev := mcptest.Everything(t)
	ev.Timeout = mcp.Duration(700 * time.Millisecond)
	m := newManager(t, map[string]*mcp.ServerConfig{"everything": ev})
	ctx := context.Background()
	if _, err := m.Tools(ctx, "everything"); err != nil {
		t.Fatal(err)
	}
	pid := source(t, m, "everything").GetPid()
	start := time.Now()
	_, err := m.Call(ctx, "everything", "trigger-long-running-operation", map[string]any{"duration": 30, "steps": 3}, nil)
	if err == nil || !strings.Contains(err.Error(), "did not answer the call of \"trigger-long-running-operation\" within 700ms") {
		t.Fatalf("hanging call: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the timeout took %s", d)
	}
	res, err := m.Call(ctx, "everything", "echo", map[string]any{"message": "still here"}, nil)
	if err != nil || !strings.Contains(text(res), "still here") {
		t.Fatalf("call after a timeout: %v", err)
	}
	if got := source(t, m, "everything").GetPid(); got != pid {
		t.Errorf("pid %d after a timeout, want the same server %d", got, pid)
	}
}

func TestSharedProcessIdleStopAndShutdown(t *testing.T) {
	// A shell in front of node: its child must go with it.
	ev := mcptest.BehindShell(mcptest.Everything(t))
	idle := mcp.Duration(400 * time.Millisecond)
	ev.IdleTimeout = &idle
	m := mcp.NewManager(&mcp.Config{Servers: map[string]*mcp.ServerConfig{"everything": ev}}, mcp.Options{})
	ctx := context.Background()

	var wg sync.WaitGroup
	var failures atomic.Int32
	for i := range 8 {
		wg.Go(func() {
			res, err := m.Call(ctx, "everything", "get-sum", map[string]any{"a": i, "b": 1}, nil)
			if err != nil || res.IsError {
				failures.Add(1)
			}
		})
	}
	wg.Wait()
	if failures.Load() != 0 {
		t.Fatalf("%d of 8 concurrent calls failed", failures.Load())
	}
	s := source(t, m, "everything")
	if s.GetRestarts() != 0 || s.GetPid() == 0 {
		t.Fatalf("after 8 concurrent calls: %v, want one process", s)
	}
	pgid := int(s.GetPid())
	waitFor(t, "the idle server to stop", func() bool { return !mcptest.GroupAlive(pgid) })
	if s := source(t, m, "everything"); s.GetState() != agentdv1.ToolSourceState_TOOL_SOURCE_STATE_STOPPED || s.GetLastError() != "" {
		t.Errorf("after idling: %v, want STOPPED without an error", s)
	}

	if _, err := m.Call(ctx, "everything", "echo", map[string]any{"message": "again"}, nil); err != nil {
		t.Fatal(err)
	}
	pgid = int(source(t, m, "everything").GetPid())
	if !mcptest.GroupAlive(pgid) {
		t.Fatal("restarted server is not running")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if !mcptest.GroupEnds(pgid, 2*time.Second) {
		t.Error("a process of the server's group outlived Close by 2 s")
	}
	if _, err := m.Call(ctx, "everything", "echo", map[string]any{"message": "late"}, nil); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("call after Close: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCannotStart(t *testing.T) {
	m := newManager(t, map[string]*mcp.ServerConfig{"broken": {Command: "/bin/sh", Args: []string{"-c", "echo cannot find my config >&2; exit 3"}}})
	_, err := m.Call(context.Background(), "broken", "x", nil, nil)
	if err == nil || !strings.Contains(err.Error(), `MCP server "broken" could not be used`) || !strings.Contains(err.Error(), "cannot find my config") {
		t.Fatalf("got %v, want an error naming the server and its stderr", err)
	}
	if s := source(t, m, "broken"); s.GetState() != agentdv1.ToolSourceState_TOOL_SOURCE_STATE_FAILED {
		t.Errorf("state %v, want FAILED", s.GetState())
	}
	if _, err := m.Call(context.Background(), "nope", "x", nil, nil); err == nil || !strings.Contains(err.Error(), `no such MCP server "nope"`) {
		t.Errorf("unknown server: %v", err)
	}
}

func TestStreamableHTTP(t *testing.T) {
	hs := mcptest.NewHTTPServer(t)
	cfg, err := mcp.ParseConfig([]byte(`{"mcpServers": {"remote": {"url": "`+hs.URL+`", "headers": {"Authorization": "Bearer ${TEST_MCP_TOKEN}"}, "allowTools": ["slow", "fail", "added"]}}}`),
		func(name string) (string, bool) {
			return map[string]string{"TEST_MCP_TOKEN": "s3cret"}[name], name == "TEST_MCP_TOKEN"
		})
	if err != nil {
		t.Fatal(err)
	}
	m := mcp.NewManager(cfg, mcp.Options{})
	t.Cleanup(func() { _ = m.Close() })
	ctx := context.Background()
	tools, err := m.Tools(ctx, "remote")
	if err != nil {
		t.Fatal(err)
	}
	if got := toolNames(tools); !slices.Equal(got, []string{"fail", "slow"}) {
		t.Errorf("tools %v, want fail and slow", got)
	}
	if got := <-hs.Headers; got != "Bearer s3cret" {
		t.Errorf("Authorization %q, want the secret from the environment", got)
	}

	res, err := m.Call(ctx, "remote", "fail", nil, nil)
	if err != nil || !res.IsError || text(res) != "the disk is full" {
		t.Fatalf("fail: %v %v", res, err)
	}

	if _, err := m.Call(ctx, "remote", "nope", nil, nil); err == nil || !strings.Contains(err.Error(), `MCP server "remote" refused the call of "nope"`) {
		t.Errorf("unknown tool: %v, want the server's refusal", err)
	}

	// Abort: the server sees its request cancelled.
	callCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := m.Call(callCtx, "remote", "slow", map[string]any{"seconds": 30}, nil)
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("aborted call: %v, want context.Canceled", err)
	}
	select {
	case <-hs.Cancelled:
	case <-time.After(5 * time.Second):
		t.Error("the server never saw the cancellation")
	}

	// tools/list_changed: the next listing has the new tool.
	hs.AddTool("added")
	waitFor(t, "the new tool to be listed", func() bool {
		tools, err := m.Tools(ctx, "remote")
		return err == nil && slices.Contains(toolNames(tools), "added")
	})
}
