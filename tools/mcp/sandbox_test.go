package mcp_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd/agentd/tools/mcp"
	"github.com/agentd/agentd/tools/mcp/mcptest"
	"github.com/agentd/agentd/tools/sandbox"
	"github.com/agentd/agentd/tools/sandbox/sandboxtest"
)

// A stdio server gets the environment its entry names, with PATH, HOME
// and LANG, and nothing else of agentd's.
func TestServerEnvironmentIsItsEntrys(t *testing.T) {
	t.Setenv("AGENTD_PROVIDER_KEY_FOR_TEST", "sk-leak")
	ev := mcptest.Everything(t)
	ev.Env = map[string]string{"GREETING": "hello"}
	m := newManager(t, map[string]*mcp.ServerConfig{"everything": ev})
	res, err := m.Call(context.Background(), "everything", "get-env", map[string]any{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := text(res)
	if strings.Contains(env, "sk-leak") || !strings.Contains(env, `"GREETING": "hello"`) || !strings.Contains(env, `"PATH"`) {
		t.Fatalf("the server's environment: %s", env)
	}
}

// A server whose entry asks for the sandbox runs confined: as the
// sandbox's identity, in PID namespaces of its own, in a workspace made
// for it and removed with it; without a sandbox it does not start.
func TestSandboxedServer(t *testing.T) {
	sb := sandboxtest.New(t, sandbox.Options{})
	ev := mcptest.Everything(t)
	script := ev.Args[0]
	ev.Sandbox = true
	ev.ReadPaths = []string{script[:strings.Index(script, "/node_modules/")+len("/node_modules")]}
	m := mcp.NewManager(&mcp.Config{Servers: map[string]*mcp.ServerConfig{"everything": ev}}, mcp.Options{Sandbox: sb})
	defer m.Close()
	res, err := m.Call(context.Background(), "everything", "get-env", map[string]any{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := text(res)
	home := ""
	for _, line := range strings.Split(env, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), `"HOME": "`); ok {
			home = strings.TrimSuffix(strings.TrimSuffix(v, ","), `"`)
		}
	}
	if home == "" || home == os.Getenv("HOME") || !strings.Contains(filepath.Base(home), "agentd-mcp-everything-") {
		t.Fatalf("the server's HOME is %q; environment %s", home, env)
	}
	// The pid is the sandbox's spawn stage; its one child is the server.
	pid := sandboxtest.Confined(t, int(source(t, m, "everything").GetPid()))
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var uid, nspid string
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			uid = strings.Fields(v)[0]
		}
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			nspid = v
		}
	}
	if uid != strconv.Itoa(sb.Status().UID) || len(strings.Fields(nspid)) != 2 {
		t.Fatalf("the server runs as uid %s with NSpid %q", uid, nspid)
	}
	m.Close()
	if _, err := os.Stat(home); !os.IsNotExist(err) {
		t.Fatalf("the server's workspace %s outlived it: %v", home, err)
	}

	bare := mcp.NewManager(&mcp.Config{Servers: map[string]*mcp.ServerConfig{"everything": ev}}, mcp.Options{})
	defer bare.Close()
	if _, err := bare.Call(context.Background(), "everything", "get-env", map[string]any{}, nil); err == nil || !strings.Contains(err.Error(), "asks for the sandbox") {
		t.Fatalf("a sandboxed server without a sandbox: %v", err)
	}
}
