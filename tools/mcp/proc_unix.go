//go:build unix

package mcp

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts cmd in a process group of its own, so the
// server's children (npx, shells) are stopped with it.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killProcessGroup kills what is left of cmd's process group.
func killProcessGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
