package main

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service/servicetest"
)

// ctl runs agentctl against addr and returns its exit code and output.
func ctl(t *testing.T, addr string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	getenv := func(k string) string {
		if k == "AGENTD_ADDRESS" {
			return addr
		}
		return ""
	}
	code := run(context.Background(), args, getenv, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestSubcommands(t *testing.T) {
	addr := servicetest.Start(t, agent.Options{})
	code, out, stderr := ctl(t, addr, "sessions", "create", "--faux-echo", "--title", "demo")
	if code != 0 {
		t.Fatalf("sessions create: %d %s", code, stderr)
	}
	id := strings.TrimSpace(out)
	if code, out, _ := ctl(t, addr, "sessions", "list"); code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "demo") {
		t.Fatalf("sessions list: %d %q", code, out)
	}
	if code, out, _ := ctl(t, addr, "prompt", id, "hello there"); code != 0 || !strings.Contains(out, "hello there") || !strings.Contains(out, "[COMPLETED") {
		t.Fatalf("prompt: %d %q", code, out)
	}
	// --json: one protojson AgentEvent per line, parsed back.
	code, out, _ = ctl(t, addr, "--json", "prompt", id, "again")
	if code != 0 {
		t.Fatalf("prompt --json: %d", code)
	}
	var last *agentdv1.AgentEvent
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		ev := &agentdv1.AgentEvent{}
		if err := protojson.Unmarshal([]byte(line), ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		last = ev
	}
	if last.GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("last event %v", last)
	}
	code, out, _ = ctl(t, addr, "--json", "transcript", id)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	first := &agentdv1.Entry{}
	if code != 0 || len(lines) != 4 || protojson.Unmarshal([]byte(lines[0]), first) != nil || first.GetMessage().GetUser() == nil {
		t.Fatalf("transcript --json: %d %q", code, out)
	}
	for _, args := range [][]string{{"context", id}, {"tree", id}, {"models"}, {"tool-sources"}, {"health"}, {"sessions", "show", id}} {
		if code, out, stderr := ctl(t, addr, args...); code != 0 || out == "" {
			t.Fatalf("%v: %d %q %q", args, code, out, stderr)
		}
	}
	if code, _, stderr := ctl(t, addr, "label", id, first.GetId(), "start"); code != 0 {
		t.Fatalf("label: %s", stderr)
	}
	if _, out, _ := ctl(t, addr, "tree", id); !strings.Contains(out, "[start]") {
		t.Fatalf("tree does not show the label: %q", out)
	}
	if _, out, _ := ctl(t, addr, "transcript", id); !strings.Contains(out, `[label "start" on `+first.GetId()+"]") || strings.Contains(out, "{") {
		t.Fatalf("transcript does not show the label entry readably: %q", out)
	}
	code, out, _ = ctl(t, addr, "fork", id, first.GetId())
	if code != 0 || strings.TrimSpace(out) == id {
		t.Fatalf("fork: %d %q", code, out)
	}
	if code, _, stderr := ctl(t, addr, "navigate", id, first.GetId(), "--summary", "went back"); code != 0 {
		t.Fatalf("navigate: %s", stderr)
	}
	// A dry run answers "nothing to compact" with success; a real
	// compaction is refused with the reason.
	if code, out, stderr := ctl(t, addr, "compact", id, "--dry-run"); code != 0 || !strings.HasPrefix(out, "nothing to compact: ") {
		t.Fatalf("compact --dry-run of a short session: %d %q %q", code, out, stderr)
	}
	if code, out, _ := ctl(t, addr, "--json", "compact", id, "--dry-run"); code != 0 || out != "" {
		t.Fatalf("compact --json --dry-run of a short session: %d %q", code, out)
	}
	if code, _, stderr := ctl(t, addr, "compact", id, "--summary", "x"); code != 1 || !strings.Contains(stderr, "not now: ") || !strings.Contains(stderr, "nothing to compact") ||
		!strings.Contains(stderr, "[NOTHING_TO_COMPACT]") {
		t.Fatalf("compact of a short session: %d %q", code, stderr)
	}
	file := filepath.Join(t.TempDir(), "s.agentd")
	if code, _, stderr := ctl(t, addr, "export", id, "-o", file); code != 0 {
		t.Fatalf("export: %s", stderr)
	}
	code, out, stderr = ctl(t, addr, "import", file)
	if imported := strings.TrimSpace(out); code != 0 || imported == "" || imported == id {
		t.Fatalf("import: %d %q %q", code, out, stderr)
	}
	if code, _, stderr := ctl(t, addr, "sessions", "update", id, "--title", "renamed"); code != 0 {
		t.Fatalf("update: %s", stderr)
	}
	// The run-control subcommands reach their RPCs: append, then continue
	// answers it; steer on an idle session is refused with its reason.
	if code, _, stderr := ctl(t, addr, "append", id, "appended"); code != 0 {
		t.Fatalf("append: %s", stderr)
	}
	if code, out, _ := ctl(t, addr, "continue", id); code != 0 || !strings.Contains(out, "appended") {
		t.Fatalf("continue: %d %q", code, out)
	}
	if code, _, stderr := ctl(t, addr, "steer", id, "x"); code != 1 || !strings.Contains(stderr, "no active run") {
		t.Fatalf("steer on an idle session: %d %q", code, stderr)
	}
	if code, _, stderr := ctl(t, addr, "abort", id); code != 1 || !strings.Contains(stderr, "no active run") {
		t.Fatalf("abort on an idle session: %d %q", code, stderr)
	}
	if code, out, stderr := ctl(t, addr, "redact", id, first.GetId(), "--reason", "forget me"); code != 0 || !strings.Contains(out, "redacted 1 entries") {
		t.Fatalf("redact: %d %q %q", code, out, stderr)
	}
	if _, out, _ := ctl(t, addr, "transcript", id); strings.Contains(out, "hello there") {
		t.Fatalf("the transcript after redact: %q", out)
	}
	if code, _, stderr := ctl(t, addr, "sessions", "delete", id); code != 0 {
		t.Fatalf("delete: %s", stderr)
	}
}

func TestExitCodesAndErrors(t *testing.T) {
	addr := servicetest.Start(t, agent.Options{})
	// sessions create without flags makes a session that answers: the
	// faux model, echoing.
	_, out, _ := ctl(t, addr, "sessions", "create")
	if code, out, stderr := ctl(t, addr, "prompt", strings.TrimSpace(out), "hi"); code != 0 || !strings.Contains(out, "hi") {
		t.Fatalf("a prompt to a session created without flags: exit %d, %q %q", code, out, stderr)
	}
	// A faux model with nothing scripted fails the call: exit code 2.
	resp, err := policyClient(t, addr).CreateSession(context.Background(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{}}})
	if err != nil {
		t.Fatal(err)
	}
	if code, out, _ := ctl(t, addr, "prompt", resp.GetSession().GetId(), "hi"); code != 2 || !strings.Contains(out, "No more faux responses queued") {
		t.Fatalf("a failed run: exit %d, %q", code, out)
	}
	if code, _, stderr := ctl(t, addr, "sessions", "create", "--model", "anthropic"); code != 1 || !strings.Contains(stderr, "provider/id") {
		t.Fatalf("sessions create --model without an id: %d %q", code, stderr)
	}
	if code, _, stderr := ctl(t, addr, "sessions", "show", "no-such-session"); code != 1 || !strings.Contains(stderr, "not found") {
		t.Fatalf("unknown session: %d %q", code, stderr)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	if code, _, stderr := ctl(t, dead, "sessions", "list"); code != 1 || !strings.Contains(stderr, "agentd is not running at "+dead) {
		t.Fatalf("no agentd: %d %q", code, stderr)
	}
	if code, out, _ := ctl(t, addr, "--version"); code != 0 || !strings.Contains(out, "agentctl version") {
		t.Fatalf("--version: %d %q", code, out)
	}
}
