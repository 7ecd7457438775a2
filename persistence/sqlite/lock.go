package sqlite

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockSuffix names the owner's lock file beside the database.
const lockSuffix = "-lock"

// Files returns the database file at path and the files SQLite and the
// store keep beside it (-wal, -shm, and the owner's lock file): what a
// copy, a backup or a protection of the database must cover.
func Files(path string) []string {
	return []string{path, path + "-wal", path + "-shm", path + lockSuffix}
}

// ownerLock is this process's claim on a database: an exclusive flock on
// a companion file SQLite never touches, taken before SQLite opens the
// database. A second agentd is refused at once, while outside readers of
// the database (any language's SQLite, the sqlite3 shell, a backup or
// replication tool) use SQLite's own WAL locking and are never kept out.
// The file holds the owner's process id, for the refusal's message.
type ownerLock struct{ f *os.File }

// lockOwner claims the database at abs (path as the user gave it, for
// messages), or fails with ErrLocked naming the process that has it.
func lockOwner(path, abs string) (*ownerLock, error) {
	lockPath := abs + lockSuffix
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("open database %s: %w: cannot create its lock file %s: %v", path, ErrReadOnly, lockPath, err)
		}
		return nil, fmt.Errorf("open database %s: lock file %s: %w", path, lockPath, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, lockedBy(path, ownerPID(lockPath))
		}
		return nil, fmt.Errorf("open database %s: lock %s: %w", path, lockPath, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &ownerLock{f: f}, nil
}

// release gives the database up for another owner.
func (l *ownerLock) release() error { return l.f.Close() }

// ownerPID is the process id an owner wrote into its lock file, or 0.
func ownerPID(lockPath string) int {
	b, err := os.ReadFile(lockPath)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// lockedBy is the refusal of a database another process owns.
func lockedBy(path string, pid int) error {
	who := "another process"
	if pid > 0 {
		who = "process " + strconv.Itoa(pid)
		if name := processName(pid); name != "" {
			who += " (" + name + ")"
		}
	}
	return fmt.Errorf("open database %s: %w: %s has it open; a database has one agentd at a time: stop the other one or give this one another --db", path, ErrLocked, who)
}

// SQLite's lock bytes, which an agentd of an earlier version (SQLite's
// unix-excl VFS) holds for as long as it runs.
const (
	pendingByte = 0x40000000
	sharedFirst = pendingByte + 2
	sharedSize  = 510
)

// sqliteLockHolder returns the id of a process holding a write lock on
// SQLite's lock bytes of the file, or 0: for the refusal when SQLite finds
// the database busy although no owner's lock is held.
func sqliteLockHolder(abs string) int {
	f, err := os.Open(abs)
	if err != nil {
		return 0
	}
	// Closing a descriptor drops this process's POSIX locks on the file;
	// this runs after this process failed to open the database, so there
	// are none to lose.
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: pendingByte, Len: sharedFirst + sharedSize - pendingByte}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil || lk.Type == unix.F_UNLCK || lk.Pid <= 0 {
		return 0
	}
	return int(lk.Pid)
}

// processName is the command name of a process, when the system tells.
func processName(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
