package mcp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/tools/mcp"
)

func TestParseConfig(t *testing.T) {
	env := func(name string) (string, bool) {
		v, ok := map[string]string{"TOKEN": "t0k", "HOME_DIR": "/home/a"}[name]
		return v, ok
	}
	cfg, err := mcp.ParseConfig([]byte(`{"mcpServers": {
		"fs": {"command": "npx", "args": ["-y", "x"], "env": {"ROOT": "${HOME_DIR}/work"}, "readOnly": true, "timeout": "90s", "idleTimeout": "0s"},
		"remote": {"type": "streamable-http", "url": "https://mcp.example/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}, "denyTools": ["drop"]}
	}}`), env)
	if err != nil {
		t.Fatal(err)
	}
	fs, remote := cfg.Servers["fs"], cfg.Servers["remote"]
	if fs.Env["ROOT"] != "/home/a/work" || !fs.ReadOnly || time.Duration(fs.Timeout) != 90*time.Second || fs.IdleTimeout == nil || *fs.IdleTimeout != 0 {
		t.Errorf("fs: %+v", fs)
	}
	if remote.Headers["Authorization"] != "Bearer t0k" || remote.Allowed("drop") || !remote.Allowed("read") {
		t.Errorf("remote: %+v", remote)
	}

	bad := []struct{ name, json, says string }{
		{"no servers", `{}`, `no "mcpServers"`},
		{"unknown field", `{"mcpServers": {"a": {"command": "x", "comand": "y"}}}`, `unknown field "comand"`},
		{"missing variable", `{"mcpServers": {"a": {"url": "http://h", "headers": {"X": "${NOPE}"}}}}`, "mcpServers.a: headers.X: environment variable NOPE is not set"},
		{"no command", `{"mcpServers": {"a": {"args": ["x"]}}}`, `"command" is required`},
		{"mixed", `{"mcpServers": {"a": {"command": "x", "url": "http://h"}}}`, "belong to a stdio server, not an HTTP one"},
		{"bad url", `{"mcpServers": {"a": {"type": "http", "url": "ftp://h"}}}`, "not an http:// or https:// URL"},
		{"bad type", `{"mcpServers": {"a": {"type": "sse", "url": "http://h"}}}`, `unknown type "sse"`},
		{"bad name", `{"mcpServers": {"a__b": {"command": "x"}}}`, "mcpServers.a__b: the name must be"},
		{"bad duration", `{"mcpServers": {"a": {"command": "x", "timeout": "soon"}}}`, "invalid duration"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mcp.ParseConfig([]byte(tc.json), env)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want an error saying %q", err, tc.says)
			}
		})
	}
}

func TestModelName(t *testing.T) {
	long := strings.Repeat("x", 80)
	tests := []struct {
		server, tool, want string
	}{
		{"fs", "read_file", "mcp__fs__read_file"},
		{"everything", "get-sum", "mcp__everything__get-sum"},
	}
	for _, tc := range tests {
		if got := mcp.ModelName(tc.server, tc.tool); got != tc.want {
			t.Errorf("ModelName(%q, %q) = %q, want %q", tc.server, tc.tool, got, tc.want)
		}
	}
	// Replaced characters and long names stay valid and distinct.
	seen := map[string]string{}
	for _, tool := range []string{"files.read", "files_read", "files/read", long, long + "y"} {
		got := mcp.ModelName("srv", tool)
		if len(got) > 64 || strings.Trim(got, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" || !strings.HasPrefix(got, "mcp__srv__") {
			t.Errorf("ModelName(srv, %q) = %q: not a valid model tool name", tool, got)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%q and %q both become %q", other, tool, got)
		}
		seen[got] = tool
	}
}
