//go:build linux

package sandbox

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
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
	conf, err := configFile(helperConfig{Workspace: dir, Argv: []string{"/bin/true"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conf.Close()
	var out bytes.Buffer
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{helperName}, Stderr: &out, ExtraFiles: []*os.File{conf},
		SysProcAttr: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}}
	err = cmd.Run()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != exitSetupFailed || !strings.Contains(out.String(), "refusing to set up") {
		t.Fatalf("a helper outside its namespaces: %v, %q", err, out.String())
	}
}
