//go:build linux && cgo

package confine

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// A process started as SpawnName is the C spawn stage's before Go starts:
// given too few arguments it says so and exits as a failed set-up, and
// when it cannot set up the helper it reports why on the status
// descriptor, as the helper reports its own failures.
func TestSpawnStageTakesOverItsStarts(t *testing.T) {
	var out bytes.Buffer
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{SpawnName}, Stderr: &out}
	_ = cmd.Run()
	if cmd.ProcessState.ExitCode() != ExitSetupFailed || !strings.Contains(out.String(), "the spawn stage takes 8 arguments") {
		t.Fatalf("the spawn stage without its arguments: exit %d, %q", cmd.ProcessState.ExitCode(), out.String())
	}

	statusR, statusW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer statusR.Close()
	out.Reset()
	// No new user namespace (flags 0), so the identity map cannot be
	// written; fd 3 is the status descriptor here.
	args := SpawnArgs(0, os.Getuid(), os.Getgid(), os.Geteuid() == 0)
	args[1] = "3"
	cmd = &exec.Cmd{Path: "/proc/self/exe", Args: args, Stderr: &out, ExtraFiles: []*os.File{statusW},
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}}
	err = cmd.Run()
	statusW.Close()
	var status bytes.Buffer
	_, _ = status.ReadFrom(statusR)
	if cmd.ProcessState.ExitCode() != ExitSetupFailed || !strings.Contains(status.String(), "map the sandbox's identity") {
		t.Fatalf("a spawn that cannot map the identity: %v, status %q, stderr %q", err, status.String(), out.String())
	}
}
