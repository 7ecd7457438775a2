package mcptest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/tools/mcp"
)

// GroupAlive reports whether a process of the process group pgid runs
// (zombies, killed and waiting for their parent to reap them, do not
// count). Linux only: it reads /proc.
func GroupAlive(pgid int) bool {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces.
		fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(fields) > 2 && fields[0] != "Z" && fields[2] == strconv.Itoa(pgid) {
			return true
		}
	}
	return false
}

// GroupEnds waits up to limit for the process group pgid to have no
// running process, and reports whether it came to that. SIGKILL is
// delivered asynchronously: a group killed a moment ago may still show.
func GroupEnds(pgid int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for GroupAlive(pgid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// BehindShell returns cfg run through /bin/sh, which starts the server as
// its child: a server whose process group holds more than one process, as
// npx and wrapper scripts make.
func BehindShell(cfg *mcp.ServerConfig) *mcp.ServerConfig {
	c := *cfg
	c.Args = append([]string{"-c", `"$0" "$@"; echo exited >&2`, cfg.Command}, cfg.Args...)
	c.Command = "/bin/sh"
	return &c
}
