//go:build unix && !linux

package tools

import "os/exec"

// waitExited waits for and reaps the command: without waitid(WNOWAIT) the
// caller kills the process group just after the shell is reaped, which
// leaves a negligible window for the group id to be reused.
func waitExited(cmd *exec.Cmd) (reap func() error) {
	err := cmd.Wait()
	return func() error { return err }
}
