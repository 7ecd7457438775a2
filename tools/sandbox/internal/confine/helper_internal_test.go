//go:build linux

package confine

import (
	"bytes"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The helper refuses to mount anything unless it runs in the namespaces
// Command gives it: started by a caller that replaced its SysProcAttr, it
// would otherwise pivot the whole machine's root. The test gives it a
// mount namespace of its own only, so a helper that did not refuse would
// harm nothing but that.
func TestHelperRefusesWithoutItsNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a mount namespace without a user namespace")
	}
	dir := t.TempDir()
	conf, err := WriteConfig(Config{Workspace: dir, Argv: []string{"/bin/true"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conf.Close()
	var out bytes.Buffer
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{HelperName}, Stderr: &out, ExtraFiles: []*os.File{conf},
		SysProcAttr: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}}
	err = cmd.Run()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != ExitSetupFailed || !strings.Contains(out.String(), "refusing to set up") {
		t.Fatalf("a helper outside its namespaces: %v, %q", err, out.String())
	}
}

// Once the helper has set a memory limit, which may be below what it
// holds itself, asking the system for memory fails the process. What
// runs then, setting the limits and the exec, must allocate nothing.
func TestHelperAllocatesNothingOnceLimited(t *testing.T) {
	command, err := prepareExec([]string{filepath.Join(t.TempDir(), "missing"), "-c", "true"}, []string{"PATH=/bin"})
	if err != nil {
		t.Fatal(err)
	}
	var runErr error
	if n := testing.AllocsPerRun(50, func() { runErr = command.run() }); n != 0 {
		t.Errorf("the exec allocated %v times", n)
	}
	if !errors.Is(runErr, syscall.ENOENT) {
		t.Errorf("exec of a missing file: %v, want ENOENT", runErr)
	}
	// This process's hard limits: setting them takes nothing away.
	hard := func(resource int) int64 {
		var l unix.Rlimit
		if err := unix.Getrlimit(resource, &l); err != nil {
			t.Fatal(err)
		}
		return int64(min(l.Max, math.MaxInt64))
	}
	current := Limits{Processes: int(hard(unix.RLIMIT_NPROC)), Memory: hard(unix.RLIMIT_DATA),
		FileSize: hard(unix.RLIMIT_FSIZE), OpenFiles: int(hard(unix.RLIMIT_NOFILE))}
	if n := testing.AllocsPerRun(50, func() { runErr = setLimits(current) }); n != 0 || runErr != nil {
		t.Errorf("setting the limits allocated %v times: %v", n, runErr)
	}
}
