package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/tools/sandbox"
	"github.com/agentd/agentd/tools/sandbox/sandboxtest"
)

// TestTenantToolCallsStayConfined is the escape attempt of issue
// "confinement", from outside: agentd serving two tenants from an
// --auth-config, and a session of one tenant that enabled bash, read_file
// and grep itself (approval ALLOW) probing for agentd's keys, its
// database, the other tenant's files, agentd's configuration, the
// system's secrets and agentd's port. Every probe comes back empty or
// refused; the workspaces agentd never allows are refused at
// CreateSession.
func TestTenantToolCallsStayConfined(t *testing.T) {
	sandboxtest.New(t, sandbox.Options{}) // the machine can confine
	base := t.TempDir()
	dirs := map[string]string{}
	for _, d := range []string{"var/agentd", "etc/agentd", "tenants/acme/ws", "tenants/globex/ws"} {
		dirs[d] = filepath.Join(base, d)
		if err := os.MkdirAll(dirs[d], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	db := filepath.Join(dirs["var/agentd"], "agentd.db")
	acmeSecret := filepath.Join(dirs["tenants/acme/ws"], "plan.txt")
	if err := os.WriteFile(acmeSecret, []byte("acme-merger-plan"), 0o644); err != nil {
		t.Fatal(err)
	}
	authPath := filepath.Join(dirs["etc/agentd"], "auth.json")
	auth := map[string]any{
		"tokens": []map[string]string{
			{"sha256": sha256Hex("acme-token"), "tenant": "acme", "role": "user"},
			{"sha256": sha256Hex("globex-token"), "tenant": "globex", "role": "user"},
		},
		"tenants": map[string]any{
			"acme":   map[string]any{"workspaceRoots": []string{filepath.Join(base, "tenants/acme")}},
			"globex": map[string]any{"workspaceRoots": []string{filepath.Join(base, "tenants/globex")}},
		},
	}
	b, _ := json.Marshal(auth)
	if err := os.WriteFile(authPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	const providerKey = "sk-ant-probe-31337"
	probe := func(t *testing.T, db string, flags ...string) (map[string]string, *proc, context.Context) {
		p := startProcEnv(t, []string{"ANTHROPIC_API_KEY=" + providerKey}, db, append([]string{"--auth-config", authPath}, flags...)...)
		c := p.client()
		acme := metadata.AppendToOutgoingContext(testCtx(t), "authorization", "Bearer acme-token")
		globex := metadata.AppendToOutgoingContext(testCtx(t), "authorization", "Bearer globex-token")
		// acme's transcript, in the database.
		acmeID := createIn(t, c, acme, &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
		if _, err := drain(c.Prompt(acme, &agentdv1.PromptRequest{SessionId: acmeID, Content: texts("acme-transcript-marker")})); err != nil {
			t.Fatal(err)
		}
		port := p.addr[strings.LastIndexByte(p.addr, ':')+1:]
		var calls []*agentdv1.ContentBlock
		for _, pr := range escapeProbes(db, acmeSecret, authPath, base, port) {
			args := map[string]any{"command": pr.arg}
			switch pr.tool {
			case "read_file":
				args = map[string]any{"path": pr.arg}
			case "grep":
				args = map[string]any{"pattern": pr.arg, "path": "/"}
			}
			s, err := structpb.NewStruct(args)
			if err != nil {
				t.Fatal(err)
			}
			calls = append(calls, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: pr.id, Name: pr.tool, Arguments: s}}})
		}
		allow := agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW
		globexID := createIn(t, c, globex, &agentdv1.SessionConfig{
			WorkspaceRoot: dirs["tenants/globex/ws"],
			Tools:         []*agentdv1.Tool{{Name: "bash", Approval: allow}, {Name: "read_file", Approval: allow}, {Name: "grep", Approval: allow}},
			Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{
				{Content: calls},
				{Content: texts("done")},
			}},
		})
		if _, err := drain(c.Prompt(globex, &agentdv1.PromptRequest{SessionId: globexID, Content: texts("look around")})); err != nil {
			t.Fatal(err)
		}
		results := map[string]string{}
		for _, e := range transcriptIn(t, c, globex, globexID) {
			if tr := e.GetMessage().GetToolResult(); tr != nil {
				var sb strings.Builder
				for _, b := range tr.GetContent() {
					sb.WriteString(b.GetText().GetText())
				}
				results[tr.GetToolCallId()] = sb.String()
			}
		}
		return results, p, globex
	}

	// Unconfined (agentd --sandbox=off) the bash probes get out: they are
	// real.
	if os.Geteuid() == 0 {
		unconfined := filepath.Join(dirs["var/agentd"], "unconfined.db")
		results, _, _ := probe(t, unconfined, "--sandbox=off")
		for _, pr := range escapeProbes(unconfined, acmeSecret, authPath, base, "") {
			if pr.tool == "bash" && pr.id != "env" && pr.id != "agentd-port" && !pr.leaked(results[pr.id]) {
				t.Errorf("unconfined, probe %s did not get out, so it proves nothing:\n%s", pr.id, results[pr.id])
			}
		}
	}

	results, p, globex := probe(t, db)
	if !strings.Contains(p.log.String(), "tool sandbox active") {
		t.Fatalf("the start-up log does not say what confines tool calls:\n%s", p.log.String())
	}
	for _, pr := range escapeProbes(db, acmeSecret, authPath, base, "") {
		out, ok := results[pr.id]
		if !ok {
			t.Fatalf("no result for probe %s", pr.id)
		}
		if pr.leaked(out) {
			t.Errorf("probe %s (%s %s) got out:\n%s", pr.id, pr.tool, pr.arg, out)
		}
	}
	c := p.client()

	// Workspaces agentd never allows, and the other tenant's.
	for _, tc := range []struct {
		root string
		code codes.Code
	}{
		{"/", codes.InvalidArgument},
		{dirs["var/agentd"], codes.InvalidArgument},
		{filepath.Join(base, "var"), codes.InvalidArgument},
		{dirs["etc/agentd"], codes.InvalidArgument},
		{dirs["tenants/acme/ws"], codes.PermissionDenied},
	} {
		_, err := c.CreateSession(globex, &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{
			WorkspaceRoot: tc.root, Tools: []*agentdv1.Tool{{Name: "read_file"}}}})
		if status.Code(err) != tc.code {
			t.Errorf("workspace_root %s: %v, want %v", tc.root, err, tc.code)
		}
	}
}

// escapeProbe is one tool call of TestTenantToolCallsStayConfined and the
// text in its result that would show it got out.
type escapeProbe struct{ id, tool, arg, secret string }

func (pr escapeProbe) leaked(out string) bool {
	if pr.id == "root" {
		return strings.TrimSpace(out) == "0"
	}
	return strings.Contains(out, pr.secret)
}

func escapeProbes(db, acmeSecret, authPath, base, port string) []escapeProbe {
	return []escapeProbe{
		{"env", "bash", "env", "sk-ant-probe-31337"},
		{"db", "bash", "grep -a -o -h acme-transcript-marker " + db + " " + db + "-wal", "acme-transcript-marker"},
		{"db-search", "bash", "grep -a -r -l acme-transcript-marker " + base + " /tmp 2>/dev/null", ".db"},
		{"other-workspace", "bash", "cat " + acmeSecret, "acme-merger-plan"},
		{"auth-config", "bash", "cat " + authPath, "sha256"},
		{"shadow", "bash", "cat /etc/shadow", "root:"},
		{"agentd-port", "bash", "exec 3<>/dev/tcp/127.0.0.1/" + port + " && echo connected", "connected"},
		{"root", "bash", "id -u", "0"},
		{"read-db", "read_file", db, "SQLite"},
		{"grep-db", "grep", "acme-transcript-marker", "agentd.db"},
	}
}

// agentd --sandbox=off says at start that tool calls run with its
// authority.
func TestSandboxOffIsLogged(t *testing.T) {
	p := startProc(t, filepath.Join(t.TempDir(), "agentd.db"), "--sandbox=off")
	if log := p.log.String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "tool sandbox off") {
		t.Fatalf("no warning:\n%s", log)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func createIn(t *testing.T, c agentdv1.AgentServiceClient, ctx context.Context, cfg *agentdv1.SessionConfig) string {
	t.Helper()
	resp, err := c.CreateSession(ctx, &agentdv1.CreateSessionRequest{Config: cfg})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	return resp.GetSession().GetId()
}

func transcriptIn(t *testing.T, c agentdv1.AgentServiceClient, ctx context.Context, id string) []*agentdv1.Entry {
	t.Helper()
	resp, err := c.GetTranscript(ctx, &agentdv1.GetTranscriptRequest{SessionId: id, PageSize: 1000})
	if err != nil {
		t.Fatalf("GetTranscript: %v", err)
	}
	return resp.GetEntries()
}

// The sandbox tries itself after the delay agentd serves with, at once
// when a call needs it sooner, and not at all when agentd stops first;
// each try is reported in the log.
func TestSandboxTryIsDeferred(t *testing.T) {
	const reported = "tool sandbox "
	// report runs reportSandbox on a new sandbox, which it returns with
	// the log and a channel closed when reportSandbox returned.
	report := func(t *testing.T, ctx context.Context, delay time.Duration) (*sandbox.Sandbox, *lockedBuffer, chan struct{}) {
		sb := sandbox.New(sandbox.Options{})
		t.Cleanup(func() { sb.Close() })
		log := &lockedBuffer{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			reportSandbox(ctx, sb, delay, slog.New(slog.NewTextHandler(log, nil)))
		}()
		return sb, log, done
	}
	finished := func(t *testing.T, done chan struct{}) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("reportSandbox did not return")
		}
	}

	t.Run("after the delay", func(t *testing.T) {
		_, log, done := report(t, context.Background(), time.Millisecond)
		finished(t, done)
		if !strings.Contains(log.String(), reported) {
			t.Fatalf("nothing reported:\n%s", log.String())
		}
	})
	t.Run("a call needs it sooner", func(t *testing.T) {
		sb, log, done := report(t, context.Background(), time.Hour)
		select {
		case <-done:
			t.Fatalf("reported before the delay with no call needing the sandbox:\n%s", log.String())
		case <-sb.Tried():
			t.Fatal("the sandbox tried itself before the delay with no call needing it")
		case <-time.After(50 * time.Millisecond):
		}
		_ = sb.Available() // what a bash call asks first
		finished(t, done)
		if !strings.Contains(log.String(), reported) {
			t.Fatalf("nothing reported:\n%s", log.String())
		}
	})
	t.Run("agentd stops first", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		sb, log, done := report(t, ctx, time.Hour)
		cancel()
		finished(t, done)
		select {
		case <-sb.Tried():
			t.Fatal("the sandbox tried itself while agentd was stopping")
		default:
		}
		if log.String() != "" {
			t.Fatalf("reported while stopping:\n%s", log.String())
		}
	})
}
