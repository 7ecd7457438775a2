package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service/servicetest"
)

// tmuxChat runs agentctl chat in a real terminal (a detached tmux session)
// and reads the screen.
type tmuxChat struct {
	t    *testing.T
	name string
}

func startChat(t *testing.T, bin, addr string, args ...string) *tmuxChat {
	t.Helper()
	name := fmt.Sprintf("agentctl-test-%d", time.Now().UnixNano())
	cmdline := append([]string{bin, "chat", "--addr", addr}, args...)
	cmd := exec.Command("tmux", append([]string{"new-session", "-d", "-s", name, "-x", "200", "-y", "60", "env", "NO_COLOR=1", "TERM=xterm"}, cmdline...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("tmux", "kill-session", "-t", name).Run() })
	return &tmuxChat{t: t, name: name}
}

func (c *tmuxChat) send(keys ...string) {
	c.t.Helper()
	if out, err := exec.Command("tmux", append([]string{"send-keys", "-t", c.name}, keys...)...).CombinedOutput(); err != nil {
		c.t.Fatalf("tmux send-keys: %v\n%s", err, out)
	}
}

// typeLine types text literally and presses Enter.
func (c *tmuxChat) typeLine(text string) {
	c.send("-l", text)
	c.send("Enter")
}

func (c *tmuxChat) screen() string {
	out, _ := exec.Command("tmux", "capture-pane", "-p", "-t", c.name, "-S", "-200").Output()
	return string(out)
}

// waitFor waits until the screen shows want, n times.
func (c *tmuxChat) waitFor(want string, n int) string {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := c.screen()
		if strings.Count(s, want) >= n {
			return s
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the terminal never showed %q (%d times):\n%s", want, n, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitForSpinner waits until the prompt shows the spinner of a run
// waiting for its first token.
func (c *tmuxChat) waitForSpinner() {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.ContainsAny(lastLine(c.screen()), strings.Join(spinner, "")) {
		if time.Now().After(deadline) {
			c.t.Fatalf("no spinner:\n%s", c.screen())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lastLine is the last line of a screen with text: the prompt.
func lastLine(screen string) string {
	lines := strings.Split(strings.TrimRight(screen, "\n "), "\n")
	return lines[len(lines)-1]
}

// TestChatInATerminal drives agentctl chat under tmux: the seed's two
// prompts with read_file and an approved edit_file, and Ctrl-C aborting a
// paced answer without leaving the program.
func TestChatInATerminal(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is required (make deb-deps installs it)")
	}
	bin := filepath.Join(t.TempDir(), "agentctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build agentctl: %v\n%s", err, out)
	}
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(ws, "src", "config.ts")
	if err := os.WriteFile(config, []byte("export const config = {\n  port: 3000,\n};\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := servicetest.Start(t, agent.Options{Ceilings: agent.Ceilings{Default: agent.Ceiling{WorkspaceRoots: agent.Limit{Values: []string{filepath.Dir(ws)}, Setting: "--workspace-roots"}}}})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := agentdv1.NewAgentServiceClient(conn)
	call := func(id, name string, args map[string]any) *agentdv1.AssistantMessage {
		st, _ := structpb.NewStruct(args)
		return &agentdv1.AssistantMessage{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: id, Name: name, Arguments: st}}}}}
	}
	answer := func(s string) *agentdv1.AssistantMessage {
		return &agentdv1.AssistantMessage{Content: texts(s)}
	}
	resp, err := client.CreateSession(context.Background(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{
		SystemPrompt: "你是桌面开发助手。", WorkspaceRoot: ws, Tools: []*agentdv1.Tool{{Name: "read_file"}, {Name: "edit_file"}},
		Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{
			call("call_read", "read_file", map[string]any{"path": "src/config.ts"}),
			answer("默认端口是 3000。"),
			call("call_edit", "edit_file", map[string]any{"path": "src/config.ts", "old_text": "port: 3000", "new_text": "port: 8080"}),
			answer("已把默认端口改成 8080。"),
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	chat := startChat(t, bin, addr, "--session", resp.GetSession().GetId())
	chat.typeLine("读取 src/config.ts，告诉我默认端口。")
	chat.waitFor("默认端口是 3000。", 1)
	chat.waitFor("[COMPLETED", 1)
	chat.typeLine("把它改成 8080。")
	chat.waitFor("allow edit_file(", 1)
	chat.typeLine("y")
	screen := chat.waitFor("[COMPLETED", 2)
	if !strings.Contains(screen, "已把默认端口改成 8080。") || !strings.Contains(screen, "✓ read_file") || !strings.Contains(screen, "✓ edit_file") {
		t.Fatalf("the second prompt's screen:\n%s", screen)
	}
	if b, _ := os.ReadFile(config); !strings.Contains(string(b), "port: 8080") {
		t.Fatalf("config.ts after the approved edit: %s", b)
	}

	// Ctrl-C during a paced answer aborts the run; the program stays.
	paced := startChat(t, bin, addr, "--faux-echo")
	paced.waitFor("session ", 1)
	// A fresh chat session echoes; make it slow through UpdateSession.
	sessions, err := client.ListSessions(context.Background(), &agentdv1.ListSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	newest := sessions.GetSessions()[0].GetId()
	if _, err := client.UpdateSession(context.Background(), &agentdv1.UpdateSessionRequest{SessionId: newest,
		Config:     &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true, TokensPerSecond: 1}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"config.faux"}}}); err != nil {
		t.Fatal(err)
	}
	// While it streams: /steer is delivered to the run, /abort ends it.
	paced.typeLine("a long answer " + strings.Repeat("word ", 100))
	paced.waitForSpinner() // the run started; the first token is seconds away
	paced.typeLine("/steer be brief")
	paced.waitFor("[queued: 1 steering", 1)
	// The line being generated streams in the prompt line.
	for deadline := time.Now().Add(20 * time.Second); !strings.HasPrefix(lastLine(paced.screen()), "a long"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the answer does not stream in the prompt line:\n%s", paced.screen())
		}
	}
	paced.typeLine("/abort")
	paced.waitFor("[ABORTED", 1)
	// Ctrl-C aborts the next one; the program stays.
	paced.typeLine("another long answer " + strings.Repeat("word ", 100))
	paced.waitForSpinner()
	paced.send("C-c")
	paced.waitFor("[ABORTED", 2)
	paced.typeLine("/help")
	paced.waitFor("/steer TEXT", 1)
	paced.send("C-d")
}

// A chat goes on after agentd restarts: the next prompt reaches the new
// process (same address, same database, same session).
func TestChatAfterAgentdRestarts(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is required (make deb-deps installs it)")
	}
	dir := t.TempDir()
	ctlBin, agentdBin := filepath.Join(dir, "agentctl"), filepath.Join(dir, "agentd")
	for bin, pkg := range map[string]string{ctlBin: ".", agentdBin: "../agentd"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	db := filepath.Join(dir, "agentd.db")
	start := func() *exec.Cmd {
		cmd := exec.Command(agentdBin, "--listen", addr, "--db", db)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if c, err := net.Dial("tcp", addr); err == nil {
				c.Close()
				return cmd
			}
			if time.Now().After(deadline) {
				t.Fatalf("agentd does not listen on %s", addr)
			}
		}
	}
	agentd := start()
	chat := startChat(t, ctlBin, addr, "--faux-echo")
	chat.waitFor("session ", 1)
	chat.typeLine("before the restart")
	chat.waitFor("[COMPLETED", 1)
	if err := agentd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = agentd.Wait()
	// The chat is idle while agentd is down; it tries again until agentd
	// is back.
	chat.typeLine("after the restart")
	time.Sleep(300 * time.Millisecond)
	start()
	screen := chat.waitFor("[COMPLETED", 2)
	if strings.Count(screen, "after the restart") < 2 { // typed, and echoed by the new process
		t.Fatalf("the answer after the restart:\n%s", screen)
	}
}
