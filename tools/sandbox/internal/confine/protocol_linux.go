package confine

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// The helper is agentd's own binary started again (/proc/self/exe) under
// these names, which this package's init (HelperName) and spawn_linux.c
// (the others, before Go starts) recognize.
const (
	// HelperName sets up one call's confinement and execs its command.
	HelperName = "agentd-sandbox"
	// HolderName makes a user namespace and holds it while agentd writes
	// its maps and takes a handle on it, for the idmapped workspace
	// mounts (spawn_linux.c): it says it is ready with one byte on stdout
	// and exits when its stdin closes.
	HolderName = "agentd-sandbox-userns"
	// SpawnName makes the helper's namespaces and starts the helper in
	// them (spawn_linux.c, which names it too), before the Go runtime
	// starts: agentd itself only vforks.
	SpawnName = "agentd-sandbox-spawn"
)

// SpawnArgs is the spawn stage's argv: the helper gets new namespaces of
// the kinds flags (CLONE_NEW*) names, runs as uid and gid, each mapped to
// itself, without supplementary groups when agentd runs as root (where
// setgroups stays allowed), and reports a failed set-up on [StatusFD] and
// with [ExitSetupFailed].
func SpawnArgs(flags uintptr, uid, gid int, root bool) []string {
	asRoot := "0"
	if root {
		asRoot = "1"
	}
	return []string{SpawnName, strconv.Itoa(StatusFD), "0x" + strconv.FormatUint(uint64(flags), 16),
		strconv.Itoa(uid), strconv.Itoa(gid), asRoot, strconv.Itoa(ExitSetupFailed), HelperName, HelperEnv}
}

// HelperEnv is the helper's whole environment (the command's is in its
// Config): with collection off, the helper never asks the system for
// memory to collect, which it may not once its limits are set.
const HelperEnv = "GOGC=off"

// The helper's inherited descriptors: these two, then the detached mounts
// the config names by descriptor.
const (
	// ConfigFD holds the Config, JSON in a memfd.
	ConfigFD = 3
	// StatusFD takes a setup failure, written before the helper exits.
	StatusFD = 4
)

// Config is what the parent tells the helper; the helper trusts it.
type Config struct {
	// Trees are the directories (or links) to show read-only.
	Trees []Tree `json:"trees"`
	// Masks are files and directories inside Trees shown empty.
	Masks []Mask `json:"masks"`
	// Workspace is the absolute path of the workspace, the working
	// directory. WorkspaceFD, when not 0, is it as a detached mount the
	// parent took (idmapped when its owner is not the command's identity).
	Workspace   string `json:"workspace"`
	WorkspaceFD int    `json:"workspaceFd,omitempty"`
	// Writable are the subdirectories of Workspace that may be written;
	// empty means all of it.
	Writable []string `json:"writable"`
	// Network keeps the host's network; otherwise only a loopback of its
	// own.
	Network bool `json:"network"`
	// Limits are set last, just before the exec.
	Limits Limits `json:"limits"`
	// Argv and Env are the command's, Argv[0] an absolute path.
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	// Status says StatusFD is open.
	Status bool `json:"status"`
}

// Tree is one read-only tree: a directory to bind, or a symbolic link to
// recreate. FD, when not 0, is the directory as a detached read-only
// mount the parent took: agentd as root can reach trees whose parents an
// unprivileged helper could not enter.
type Tree struct {
	// Path is the tree's absolute path, shown at the same place.
	Path string `json:"path"`
	// Link, when set, is the target of the symbolic link Path is.
	Link string `json:"link,omitempty"`
	// FD is the detached mount, or 0.
	FD int `json:"fd,omitempty"`
}

// Mask hides one path of a Tree behind an empty file or directory.
type Mask struct {
	// Path is the absolute path hidden.
	Path string `json:"path"`
	// Dir says it is shown as an empty directory, not an empty file.
	Dir bool `json:"dir"`
}

// Limits are the resource limits of the command and of what it starts
// (see sandbox.Options).
type Limits struct {
	Processes int   `json:"processes"`
	Memory    int64 `json:"memory"`
	FileSize  int64 `json:"fileSize"`
	OpenFiles int   `json:"openFiles"`
	Tmp       int64 `json:"tmp"`
}

// WriteConfig writes cfg into a memfd the helper reads as ConfigFD.
func WriteConfig(cfg Config) (*os.File, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	fd, err := unix.MemfdCreate("agentd-sandbox-config", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("sandbox: memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "agentd-sandbox-config")
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: write config: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return f, nil
}
