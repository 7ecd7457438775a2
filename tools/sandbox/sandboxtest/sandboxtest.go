// Package sandboxtest gives tests a working tool sandbox, or skips them
// where the machine cannot confine (failing instead under CI=true, where
// confinement must work).
package sandboxtest

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/tools/sandbox"
)

// New returns a sandbox with opts that can confine commands. Without one
// the test is skipped, or fails when the environment variable CI is
// "true".
func New(t testing.TB, opts sandbox.Options) *sandbox.Sandbox {
	t.Helper()
	sb := sandbox.New(opts)
	t.Cleanup(func() { sb.Close() })
	if err := sb.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs the tool sandbox: %v", err)
		}
		t.Skipf("no tool sandbox on this machine: %v", err)
	}
	return sb
}

// FIFO makes a named pipe at path, opened for reading, for a command to
// hold open for writing in the background (`sleep 300 > fifo &`), and
// returns a function that waits until no process holds it any more,
// failing the test after 10 s: the proof that what a call left running
// ended with it.
func FIFO(t testing.TB, path string) (gone func()) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o666); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return func() {
		t.Helper()
		if err := syscall.SetNonblock(int(r.Fd()), false); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := r.Read(make([]byte, 1))
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("read data from a process that should be gone")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a background process outlived its call")
		}
	}
}

// Confined returns the pid of what a confined start runs: the one child
// of pid, the sandbox's spawn stage that agentd started (what
// exec.Cmd.Process and an MCP server's status name).
func Confined(t testing.TB, pid int) int {
	t.Helper()
	p := strconv.Itoa(pid)
	children, err := os.ReadFile("/proc/" + p + "/task/" + p + "/children")
	if err != nil || len(strings.Fields(string(children))) != 1 {
		t.Fatalf("the sandbox's spawn stage %s has children %q (%v), want one: what it started", p, children, err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(children)))
	if err != nil {
		t.Fatal(err)
	}
	return child
}
