package agent_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/provider/faux"
	"github.com/agentd/agentd/tools/mcp"
	"github.com/agentd/agentd/tools/mcp/mcptest"
)

// mcpHarness is a harness whose agent has the given MCP servers.
func mcpHarness(t *testing.T, servers map[string]*mcp.ServerConfig) (*harness, *mcp.Manager) {
	t.Helper()
	m := mcp.NewManager(&mcp.Config{Servers: servers}, mcp.Options{})
	h := newHarness(t, agent.Options{MCP: m})
	t.Cleanup(func() { _ = m.Close() }) // after the agent's Close (cleanups run last first)
	return h, m
}

// runAnswering starts a prompt and follows it to agent_end, answering
// approval requests with decide(tool call id), and calling onEvent on
// every event.
func runAnswering(t *testing.T, h *harness, sessionID, prompt string, decide func(callID string) bool, onEvent func(*agentdv1.AgentEvent)) []*agentdv1.AgentEvent {
	t.Helper()
	ctx := context.Background()
	runID, err := h.a.Start(ctx, agent.StartRequest{SessionID: sessionID, Prompt: user(prompt)})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	var mu sync.Mutex
	var got []*agentdv1.AgentEvent
	err = h.a.Follow(ctx, sessionID, runID, 0, agent.FollowOptions{}, func(e agent.Event) error {
		ev, err := e.Decode()
		if err != nil {
			return err
		}
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
		if onEvent != nil {
			onEvent(ev)
		}
		if req := ev.GetApprovalRequested(); req != nil {
			_, err := h.a.ResolveApproval(ctx, sessionID, req.GetToolCallId(), agent.Approval{Allowed: decide(req.GetToolCallId()), Reason: "test"})
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func toolResults(evs []*agentdv1.AgentEvent) map[string]*agentdv1.ToolResultMessage {
	out := map[string]*agentdv1.ToolResultMessage{}
	for _, ev := range evs {
		if r := ev.GetMessageEnd().GetMessage().GetToolResult(); r != nil {
			out[r.GetToolCallId()] = r
		}
	}
	return out
}

func resultText(r *agentdv1.ToolResultMessage) string {
	var b strings.Builder
	for _, c := range r.GetContent() {
		b.WriteString(c.GetText().GetText())
	}
	return b.String()
}

// A run calls MCP tools through the same path as every tool: approval by
// the session's policies (ASK by default for a server not marked
// read-only), progress as updates, deny-listed tools invisible; the tools
// it saw are stored as a snapshot before its prompt, once.
func TestMCPToolsInARun(t *testing.T) {
	ev := mcptest.Everything(t)
	ev.DenyTools = []string{"get-env"}
	h, _ := mcpHarness(t, map[string]*mcp.ServerConfig{"everything": ev})
	cfg := script(
		faux.Message(
			faux.ToolCall("echo", "mcp__everything__echo", map[string]any{"message": "hello"}),
			faux.ToolCall("long", "mcp__everything__trigger-long-running-operation", map[string]any{"duration": 0.3, "steps": 3}),
			faux.ToolCall("sum", "mcp__everything__get-sum", map[string]any{"a": 1, "b": 2}),
			faux.ToolCall("env", "mcp__everything__get-env", nil),
			faux.ToolCall("bad", "mcp__everything__echo", map[string]any{"text": "no message"}),
		),
		text("done"),
		text("again"))
	cfg.McpServers = []*agentdv1.McpServer{{Name: "everything",
		ToolApproval: map[string]agentdv1.ApprovalPolicy{"echo": agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW}}}
	id := h.session(cfg)

	var asked []string
	evs := runAnswering(t, h, id, "go", func(callID string) bool {
		asked = append(asked, callID)
		return callID == "long"
	}, nil)
	if end := evs[len(evs)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("%s: %v", kinds(evs), end)
	}
	slices.Sort(asked)
	if !slices.Equal(asked, []string{"long", "sum"}) {
		t.Errorf("approval asked for %v, want long and sum (echo is allowed by the session)", asked)
	}
	var updates int
	for _, e := range evs {
		if u := e.GetToolExecutionUpdate(); u != nil && u.GetToolCallId() == "long" && strings.HasPrefix(u.GetContent()[0].GetText().GetText(), "progress ") {
			updates++
		}
	}
	// The last notification may cross the result, after which updates
	// are dropped.
	if updates < 2 {
		t.Errorf("%d progress updates, want at least 2 of 3", updates)
	}
	results := toolResults(evs)
	checks := []struct {
		call, contains string
		isError        bool
	}{
		{"echo", "hello", false},
		{"long", "Long running operation completed", false},
		{"sum", "denied", true},
		{"env", "not found", true},
		{"bad", `validation failed for tool "mcp__everything__echo"`, true}, // checked against the server's schema, never sent
	}
	for _, c := range checks {
		r := results[c.call]
		if r == nil || r.GetIsError() != c.isError || !strings.Contains(strings.ToLower(resultText(r)), strings.ToLower(c.contains)) {
			t.Errorf("result of %s: %v, want is_error %v mentioning %q", c.call, r, c.isError, c.contains)
		}
	}

	path, err := h.store.Path(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	snap := path[0].GetMcpTools()
	if snap.GetServer() != "everything" || path[1].GetMessage().GetUser() == nil || path[0].GetRunId() == "" {
		t.Fatalf("path starts %v, %v: want the snapshot, then the prompt", path[0], path[1])
	}
	var names []string
	for _, tl := range snap.GetTools() {
		names = append(names, tl.GetName())
	}
	if !slices.Contains(names, "echo") || slices.Contains(names, "get-env") {
		t.Errorf("snapshot tools %v: want echo and not the deny-listed get-env", names)
	}

	rep, err := h.a.Context(context.Background(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, tl := range rep.Context.GetTools() {
		declared = append(declared, tl.GetName())
	}
	if len(declared) != len(names) || !slices.Contains(declared, "mcp__everything__echo") {
		t.Errorf("GetContext tools %v, want the %d of the snapshot", declared, len(names))
	}

	// A second run with the same tools stores no second snapshot.
	runAnswering(t, h, id, "more", func(string) bool { return true }, nil)
	path, _ = h.store.Path(context.Background(), id)
	var snaps int
	for _, e := range path {
		if e.GetMcpTools() != nil {
			snaps++
		}
	}
	if snaps != 1 {
		t.Errorf("%d snapshots after two runs with unchanged tools, want 1", snaps)
	}
}

// A session narrowed to some tools sees only those, and a tools/list_changed
// reaches the session's next run as a new snapshot.
func TestMCPNarrowingAndListChanged(t *testing.T) {
	hs := mcptest.NewHTTPServer(t)
	h, m := mcpHarness(t, map[string]*mcp.ServerConfig{"remote": {URL: hs.URL, ReadOnly: true}})
	cfg := script(
		faux.Message(faux.ToolCall("f", "mcp__remote__fail", nil)),
		text("first"),
		faux.Message(faux.ToolCall("n", "mcp__remote__added", nil)),
		text("second"))
	cfg.McpServers = []*agentdv1.McpServer{{Name: "remote", Tools: []string{"fail", "added"}}}
	id := h.session(cfg)

	evs := runAnswering(t, h, id, "one", func(string) bool { t.Error("a read-only server's tool asked for approval"); return true }, nil)
	if r := toolResults(evs)["f"]; !r.GetIsError() || resultText(r) != "the disk is full" {
		t.Errorf("fail: %v, want the server's error result kept", r)
	}
	rep, err := h.a.Context(context.Background(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Context.GetTools(); len(got) != 1 || got[0].GetName() != "mcp__remote__fail" {
		t.Errorf("tools %v, want only mcp__remote__fail (slow is not in the session's list, added does not exist yet)", got)
	}

	hs.AddTool("added")
	// The announcement travels on its own: wait until agentd has it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		tools, err := m.Tools(context.Background(), "remote")
		if err == nil && len(tools) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new tool never appeared: %v %v", tools, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	evs = runAnswering(t, h, id, "two", func(string) bool { return true }, nil)
	if r := toolResults(evs)["n"]; r.GetIsError() || resultText(r) != "ok" {
		t.Errorf("the added tool: %v", r)
	}
	path, _ := h.store.Path(context.Background(), id)
	var snaps [][]string
	for _, e := range path {
		if s := e.GetMcpTools(); s != nil {
			var names []string
			for _, tl := range s.GetTools() {
				names = append(names, tl.GetName())
			}
			slices.Sort(names)
			snaps = append(snaps, names)
		}
	}
	if len(snaps) != 2 || !slices.Equal(snaps[1], []string{"added", "fail", "slow"}) {
		t.Errorf("snapshots %v, want a second one with the added tool", snaps)
	}
}

// A server that dies during a call gives the model an error result, the
// run completes, and the next call starts the server again; two sessions
// share one server process; an abort cancels a running call.
func TestMCPFailuresNeverBreakARun(t *testing.T) {
	h, m := mcpHarness(t, map[string]*mcp.ServerConfig{"everything": mcptest.Everything(t)})
	long := map[string]any{"duration": 30, "steps": 60}
	cfg := script(faux.Message(faux.ToolCall("long", "mcp__everything__trigger-long-running-operation", long)), text("recovered"))
	cfg.McpServers = []*agentdv1.McpServer{{Name: "everything", Approval: agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW}}
	crashed := h.session(cfg)
	evs := runAnswering(t, h, crashed, "go", nil, func(ev *agentdv1.AgentEvent) {
		if ev.GetToolExecutionUpdate() != nil {
			for _, s := range m.Sources(context.Background(), false) {
				if s.GetPid() != 0 {
					_ = syscall.Kill(int(s.GetPid()), syscall.SIGKILL)
				}
			}
		}
	})
	if end := evs[len(evs)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("%s: %v", kinds(evs), end)
	}
	if r := toolResults(evs)["long"]; !r.GetIsError() || !strings.Contains(resultText(r), "stopped during the call") {
		t.Errorf("result of the call whose server died: %v", r)
	}

	// Two sessions on the restarted server: one process.
	echo := script(faux.Message(faux.ToolCall("e", "mcp__everything__echo", map[string]any{"message": "shared"})), text("ok"))
	echo.McpServers = cfg.McpServers
	var pids []int32
	for range 2 {
		evs := runAnswering(t, h, h.session(echo), "go", nil, nil)
		if r := toolResults(evs)["e"]; r.GetIsError() {
			t.Fatalf("echo: %v", r)
		}
		pids = append(pids, m.Sources(context.Background(), false)[0].GetPid())
	}
	if pids[0] == 0 || pids[0] != pids[1] {
		t.Errorf("pids %v: want both sessions on one server process", pids)
	}

	// Abort during a call.
	aborted := h.session(cfg)
	ctx := context.Background()
	runID, err := h.a.Start(ctx, agent.StartRequest{SessionID: aborted, Prompt: user("go")})
	if err != nil {
		t.Fatal(err)
	}
	var got []*agentdv1.AgentEvent
	err = h.a.Follow(ctx, aborted, runID, 0, agent.FollowOptions{}, func(e agent.Event) error {
		ev, _ := e.Decode()
		got = append(got, ev)
		if ev.GetToolExecutionUpdate() != nil && len(got) < 1000 {
			_, err := h.a.Abort(ctx, aborted, runID)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if end := got[len(got)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_ABORTED {
		t.Errorf("aborted run ended %v", end)
	}
}

func TestMCPConfigChecks(t *testing.T) {
	ev := mcptest.Everything(t)
	ev.DenyTools = []string{"get-env"}
	h, _ := mcpHarness(t, map[string]*mcp.ServerConfig{"everything": ev})
	tests := []struct {
		name    string
		servers []*agentdv1.McpServer
		tools   []*agentdv1.Tool
		field   string
		says    string
	}{
		{"unknown server", []*agentdv1.McpServer{{Name: "github"}}, nil, "config.mcp_servers[0].name", `no MCP server is named "github"; this agentd's MCP servers: everything`},
		{"no name", []*agentdv1.McpServer{{}}, nil, "config.mcp_servers[0].name", "required"},
		{"twice", []*agentdv1.McpServer{{Name: "everything"}, {Name: "everything"}}, nil, "config.mcp_servers[1].name", "already enabled"},
		{"hidden tool", []*agentdv1.McpServer{{Name: "everything", Tools: []string{"echo", "get-env"}}}, nil, "config.mcp_servers[0].tools[1]", "hidden"},
		{"bad policy", []*agentdv1.McpServer{{Name: "everything", Approval: 9}}, nil, "config.mcp_servers[0].approval", "unknown approval policy"},
		{"reserved name", nil, []*agentdv1.Tool{{Name: "mcp__everything__echo", Description: "d", Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT}}, "config.tools[0].name", "names the tools of MCP servers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := h.a.CheckConfig("", &agentdv1.SessionConfig{McpServers: tc.servers, Tools: tc.tools})
			fe, ok := err.(*agent.FieldError)
			if !ok || fe.Field != tc.field || !strings.Contains(fe.Description, tc.says) {
				t.Fatalf("got %v, want a field error on %s saying %q", err, tc.field, tc.says)
			}
		})
	}
	bare := newHarness(t, agent.Options{})
	err := bare.a.CheckConfig("", &agentdv1.SessionConfig{McpServers: []*agentdv1.McpServer{{Name: "everything"}}})
	if fe, ok := err.(*agent.FieldError); !ok || !strings.Contains(fe.Description, "this agentd has none") {
		t.Errorf("without MCP servers: %v", err)
	}
}

// The tools a session saw stay with it: after a compaction has cut the
// snapshot out of the context, and with the server unreachable, GetContext
// and the next run still offer its tools from the stored snapshot, and a
// call becomes an error result.
func TestMCPSnapshotOutlivesCompactionAndServer(t *testing.T) {
	hs := mcptest.NewHTTPServer(t)
	h, _ := mcpHarness(t, map[string]*mcp.ServerConfig{"remote": {URL: hs.URL, ReadOnly: true}})
	cfg := script(text("one"), text("two"))
	cfg.McpServers = []*agentdv1.McpServer{{Name: "remote"}}
	id := h.session(cfg)
	runAnswering(t, h, id, "first", nil, nil)
	runAnswering(t, h, id, "second", nil, nil)
	err := h.a.Compact(context.Background(), id, agent.CompactOptions{Summary: "they said one", KeepRecentTokens: 1}, func(*agentdv1.AgentEvent) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctxPath, err := h.store.ContextPath(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ctxPath {
		if e.GetMcpTools() != nil {
			t.Fatal("the compaction kept the snapshot in the context path: the test needs it cut")
		}
	}

	unreachable := mcp.NewManager(&mcp.Config{Servers: map[string]*mcp.ServerConfig{"remote": {URL: "http://127.0.0.1:1/mcp", ReadOnly: true}}}, mcp.Options{})
	t.Cleanup(func() { _ = unreachable.Close() })
	h.opts.MCP = unreachable
	h.restart()
	rep, err := h.a.Context(context.Background(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	if tools := rep.Context.GetTools(); len(tools) != 2 {
		t.Errorf("GetContext tools %v, want the 2 of the stored snapshot", tools)
	}
	// The faux model answers by the count of answers in its context,
	// which the compaction changed: script the next run from there.
	seen := 0
	for _, m := range rep.Context.GetMessages() {
		if m.GetAssistant() != nil {
			seen++
		}
	}
	next := script(append(make([]*agentdv1.AssistantMessage, seen), faux.Message(faux.ToolCall("f", "mcp__remote__fail", nil)), text("three"))...)
	for i := range seen {
		next.GetFaux().Responses[i] = text("unused")
	}
	next.McpServers = cfg.McpServers
	if _, _, err := h.a.UpdateSession(context.Background(), id, persistence.SessionUpdate{Config: next}); err != nil {
		t.Fatal(err)
	}
	evs := runAnswering(t, h, id, "third", nil, nil)
	if end := evs[len(evs)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("%s: %v", kinds(evs), end)
	}
	if r := toolResults(evs)["f"]; !r.GetIsError() || !strings.Contains(resultText(r), `MCP server "remote" could not be used`) {
		t.Errorf("call to the unreachable server: %v (%s)", r, kinds(evs))
	}
}
