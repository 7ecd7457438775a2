package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var serving = regexp.MustCompile(`msg="agentd serving" addr=(\S+)`)

// startAgentd runs a real agentd on a free port with a temporary database
// (AGENTD_BIN, or a fresh go build) and stops it with SIGTERM at cleanup.
func startAgentd(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := os.Getenv("AGENTD_BIN")
	if bin == "" {
		bin = filepath.Join(dir, "agentd")
		build := exec.Command("go", "build", "-o", bin, "github.com/agentd/agentd/cmd/agentd")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build agentd: %v\n%s", err, out)
		}
	}
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--db", filepath.Join(dir, "agentd.db"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start agentd: %v", err)
	}
	var log bytes.Buffer
	lines := bufio.NewScanner(stderr)
	addr := ""
	for addr == "" && lines.Scan() {
		log.WriteString(lines.Text() + "\n")
		if m := serving.FindStringSubmatch(lines.Text()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("agentd did not report its address:\n%s", log.String())
	}
	rest := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(stderr)
		rest <- string(b)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		tail := <-rest
		if err := cmd.Wait(); err != nil {
			t.Errorf("agentd exit: %v\n%s%s", err, log.String(), tail)
		}
		if !strings.Contains(tail, "agentd stopped") {
			t.Errorf("agentd did not stop gracefully:\n%s", tail)
		}
	})
	return addr
}

func TestTwoPrompts(t *testing.T) {
	addr := startAgentd(t)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	workspace := t.TempDir()
	if err := writeWorkspace(workspace); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res, err := twoPrompts(ctx, agentdv1.NewAgentServiceClient(conn), workspace, &out)
	if err != nil {
		t.Fatalf("twoPrompts: %v\n%s", err, out.String())
	}

	if want := []string{"默认端口是 3000。", "已把默认端口改成 8080。"}; strings.Join(res.answers, "|") != strings.Join(want, "|") {
		t.Errorf("answers = %q, want %q", res.answers, want)
	}
	for _, tc := range []struct {
		id, contains string
	}{
		{"call_read", "port: 3000"}, // the Go read_file's result, as the model saw it
		{"call_edit", ""},
	} {
		r := res.tools[tc.id]
		if r == nil || r.GetIsError() || !strings.Contains(textOf(r.GetContent()), tc.contains) {
			t.Errorf("tool result %s = %v, want a success containing %q", tc.id, r, tc.contains)
		}
	}
	if len(res.approvals) != 1 || res.approvals[0].GetDecision() != agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED ||
		res.approvals[0].GetDecidedBy() != "example" || res.approvals[0].GetToolCallId() != "call_edit" {
		t.Errorf("approval notices = %v, want one ALLOWED by example for call_edit", res.approvals)
	}
	edited, err := os.ReadFile(filepath.Join(workspace, "src", "config.ts"))
	if err != nil || !strings.Contains(string(edited), "port: 8080") {
		t.Errorf("config.ts after the approved edit = %q (%v), want port: 8080", edited, err)
	}
	// Each run's events carry seq 1..N exactly once.
	next := map[string]uint64{}
	for _, ev := range res.events {
		next[ev.GetRunId()]++
		if ev.GetSeq() != next[ev.GetRunId()] {
			t.Fatalf("run %s: seq %d, want %d", ev.GetRunId(), ev.GetSeq(), next[ev.GetRunId()])
		}
	}
	if len(next) != 2 {
		t.Errorf("%d runs, want 2", len(next))
	}
}

func TestReadFileStaysInWorkspace(t *testing.T) {
	workspace := t.TempDir()
	if err := writeWorkspace(workspace); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path    string
		wantErr bool
	}{
		{"src/config.ts", false},
		{"../outside", true},
		{"/etc/passwd", true},
		{"src/missing.ts", true},
	} {
		got, isErr := readFile(workspace, map[string]any{"path": tc.path})
		if isErr != tc.wantErr || (!isErr && got != configSource) {
			t.Errorf("readFile(%q) = %q, %v; want error %v", tc.path, got, isErr, tc.wantErr)
		}
	}
}
