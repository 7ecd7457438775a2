package sandbox

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Defaults for Options.
const (
	// DefaultUID and DefaultGID are the identity commands run as when agentd
	// runs as root: nobody and nogroup on Debian.
	DefaultUID = 65534
	DefaultGID = 65534
	// DefaultMaxProcesses bounds the processes and threads of one call
	// (RLIMIT_NPROC, counted per call).
	DefaultMaxProcesses = 512
	// DefaultMaxMemoryBytes bounds the private writable memory of each
	// process (RLIMIT_DATA).
	DefaultMaxMemoryBytes = 4 << 30
	// DefaultMaxFileBytes bounds the size of any file a call writes
	// (RLIMIT_FSIZE).
	DefaultMaxFileBytes = 1 << 30
	// DefaultMaxOpenFiles bounds the open files of each process
	// (RLIMIT_NOFILE).
	DefaultMaxOpenFiles = 4096
	// DefaultTmpBytes is the size of the private /tmp of one call.
	DefaultTmpBytes = 256 << 20
)

// SystemPaths are the trees a confined command may read (and execute
// from) besides its workspace: the system's programs and libraries and
// the public files of /etc. Those missing on a system are skipped; a
// symbolic link among them (/bin on a merged-/usr system) is kept as a
// link.
func SystemPaths() []string {
	return []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}
}

// secretPaths are the files and directories of the system trees that are
// never visible in a sandbox, whatever their permissions say: password
// hashes, sudo rules, private keys. A pattern may hold a glob.
var secretPaths = []string{
	"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
	"/etc/sudoers", "/etc/sudoers.d", "/etc/ssh/ssh_host_*_key",
	"/etc/ssl/private", "/etc/security/opasswd",
}

// Options configure a Sandbox. The zero value of each field means its
// default.
type Options struct {
	// UID and GID are the identity confined commands run as when agentd
	// runs as root; otherwise commands keep agentd's own unprivileged
	// identity. Default DefaultUID and DefaultGID.
	UID, GID int
	// MaxProcesses, MaxMemoryBytes, MaxFileBytes, MaxOpenFiles and
	// TmpBytes bound one call; see the Default constants.
	MaxProcesses   int
	MaxMemoryBytes int64
	MaxFileBytes   int64
	MaxOpenFiles   int
	TmpBytes       int64
	// ReadPaths are more trees commands may read and execute from, such as
	// a toolchain under /opt.
	ReadPaths []string
	// Hidden are files and directories never visible to a command even
	// where they lie inside the trees it may read: agentd's database and
	// every file agentd was configured with.
	Hidden []string
}

func (o Options) withDefaults() Options {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def64 := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.UID == 0 && o.GID == 0 {
		o.UID, o.GID = DefaultUID, DefaultGID
	}
	def(&o.MaxProcesses, DefaultMaxProcesses)
	def64(&o.MaxMemoryBytes, DefaultMaxMemoryBytes)
	def64(&o.MaxFileBytes, DefaultMaxFileBytes)
	def(&o.MaxOpenFiles, DefaultMaxOpenFiles)
	def64(&o.TmpBytes, DefaultTmpBytes)
	return o
}

// Spec is what one confined command may reach.
type Spec struct {
	// Dir is the workspace: an absolute directory without symbolic links
	// in its path, the command's working directory and HOME. It is opened
	// refusing symbolic links, so a link swapped into its path after it
	// was checked fails the call instead of leading elsewhere.
	Dir string
	// Writable are the subdirectories of Dir (relative, resolved beneath
	// it) the command may write; empty means the whole of Dir.
	Writable []string
	// ReadPaths are directories outside Dir the command may read, on top
	// of the sandbox's (an MCP server's own code).
	ReadPaths []string
	// Network shares agentd's network; otherwise the command has a
	// network of its own with nothing but a loopback interface.
	Network bool
	// Env is the command's whole environment.
	Env []string
}

// SetupError is a confinement the kernel refused to set up for one call:
// the command did not run.
type SetupError struct {
	// Reason is what failed, as the sandbox helper reported it.
	Reason string
}

// Error implements error.
func (e *SetupError) Error() string { return "sandbox: " + e.Reason }

// ErrUnavailable is the kind of error Available returns.
var ErrUnavailable = errors.New("tool sandbox unavailable")

// Cmd is a command that runs confined. Start it with its own Start, which
// waits until the confined program runs and reports a failed setup as a
// *SetupError; the embedded exec.Cmd gives its pipes, process and Wait.
// Code that must start the exec.Cmd itself (an MCP transport) calls
// Release once it started: a failed setup then shows only on the
// command's stderr, with exit status 126.
type Cmd struct {
	*exec.Cmd
	start   func() error
	release func()
}

// Start starts the command and returns once the confined program runs.
func (c *Cmd) Start() error { return c.start() }

// Release closes agentd's copies of what the helper inherits, after the
// embedded exec.Cmd was started (or will not be). Start does it itself.
func (c *Cmd) Release() { c.release() }

// Status is what a Sandbox found when it was created.
type Status struct {
	// Active reports whether commands can be confined.
	Active bool
	// Reason says why not, when Active is false.
	Reason string
	// Landlock is the kernel's Landlock ABI version, 0 without Landlock.
	Landlock int
	// UID and GID are the identity outside the sandbox that commands run
	// as.
	UID, GID int
}

// String describes the confinement for agentd's start-up log.
func (s Status) String() string {
	if !s.Active {
		return "unavailable: " + s.Reason
	}
	parts := []string{"user, mount, PID, network, IPC and UTS namespaces"}
	if s.Landlock > 0 {
		parts = append(parts, fmt.Sprintf("Landlock ABI %d", s.Landlock))
	} else {
		parts = append(parts, "no Landlock (the kernel has none)")
	}
	parts = append(parts, "no_new_privs", fmt.Sprintf("uid %d gid %d", s.UID, s.GID))
	return strings.Join(parts, ", ")
}
