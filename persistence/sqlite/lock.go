package sqlite

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// SQLite's lock bytes: the unix-excl VFS holds a write lock on the shared
// range, and any SQLite reader or writer of the file holds a lock within
// pendingByte..sharedFirst+sharedSize.
const (
	pendingByte = 0x40000000
	sharedFirst = pendingByte + 2
	sharedSize  = 510
)

// checkOwner fails with ErrLocked, naming the process, when another
// process holds a lock on the database file at abs: another agentd serving
// it, or another program reading it. A file that does not exist yet has no
// owner.
func checkOwner(path, abs string) error {
	pid, err := lockHolder(abs)
	if err != nil || pid == 0 {
		// Unknown: SQLite's own locking still refuses a second owner.
		return nil
	}
	who := "process " + strconv.Itoa(pid)
	if name := processName(pid); name != "" {
		who += " (" + name + ")"
	}
	return fmt.Errorf("open database %s: %w: %s has it open; a database has one agentd at a time: stop the other one or give this one another --db", path, ErrLocked, who)
}

// lockHolder returns the id of a process holding a lock that conflicts
// with an exclusive one on SQLite's lock bytes of the file, or 0.
func lockHolder(abs string) (int, error) {
	f, err := os.Open(abs)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	// Closing a descriptor drops this process's POSIX locks on the file;
	// checkOwner runs before this process opens the database, or after it
	// failed to, so there are none to lose.
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: pendingByte, Len: sharedFirst + sharedSize - pendingByte}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil {
		return 0, err
	}
	if lk.Type == unix.F_UNLCK || lk.Pid <= 0 {
		return 0, nil
	}
	return int(lk.Pid), nil
}

// processName is the command name of a process, when the system tells.
func processName(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
