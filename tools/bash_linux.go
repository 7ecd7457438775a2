package tools

import (
	"errors"
	"os/exec"

	"golang.org/x/sys/unix"
)

// waitExited blocks until the command's process has exited without reaping
// it (WNOWAIT), so its pid and process group id stay reserved while the
// caller kills the group; the returned reap then collects the status.
func waitExited(cmd *exec.Cmd) (reap func() error) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	return cmd.Wait
}
