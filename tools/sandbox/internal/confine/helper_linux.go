package confine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// init turns agentd's binary, started again as the helper, into the
// confinement of one call before most of agentd initializes: this package
// imports little (see the package doc), so the helper reaches its command
// after about 3 ms of package start-up instead of 15.
func init() {
	if len(os.Args) == 0 {
		return
	}
	if os.Args[0] == HelperName {
		runHelper()
	}
}

// ExitSetupFailed is the helper's exit status when it could not confine
// the command, like a shell's for a command that cannot run.
const ExitSetupFailed = 126

// runHelper sets up the confinement and execs the command; it never
// returns.
func runHelper() {
	// Namespaces, capabilities, no_new_privs and Landlock belong to a
	// thread: everything from here to the exec happens on this one.
	runtime.LockOSThread()
	status := false
	err := helper(&status)
	if status {
		_, _ = unix.Write(StatusFD, []byte(err.Error()))
	}
	fmt.Fprintln(os.Stderr, "agentd sandbox:", err)
	os.Exit(ExitSetupFailed)
}

func helper(status *bool) error {
	// Everything below mounts, pivots and unmounts in "its own" namespaces:
	// run in agentd's (a caller that replaced the command's SysProcAttr),
	// it would turn the whole machine's root into a sandbox's. Refuse
	// unless the namespaces are new.
	if err := inNewNamespaces(); err != nil {
		return err
	}
	cfg, err := readConfig()
	if err != nil {
		return err
	}
	if cfg.Status {
		unix.CloseOnExec(StatusFD)
		*status = true
	}
	for _, t := range cfg.Trees {
		if t.FD > 0 {
			unix.CloseOnExec(t.FD)
		}
	}
	if cfg.WorkspaceFD > 0 {
		unix.CloseOnExec(cfg.WorkspaceFD)
	}
	lastCap, err := lastCapability()
	if err != nil {
		return err
	}
	if err := buildRoot(cfg); err != nil {
		return err
	}
	if !cfg.Network {
		if err := loopbackUp(); err != nil {
			return fmt.Errorf("bring up loopback: %w", err)
		}
	}
	_ = unix.Sethostname([]byte("sandbox"))
	if err := unix.Chdir(cfg.Workspace); err != nil {
		return fmt.Errorf("enter the workspace: %w", err)
	}
	ruleset, err := landlockRuleset(cfg)
	if err != nil {
		return err
	}
	if err := dropPrivileges(lastCap); err != nil {
		return err
	}
	if ruleset.fd >= 0 {
		if err := llsyscall.LandlockRestrictSelf(ruleset.fd, ruleset.flags); err != nil {
			return fmt.Errorf("landlock: %w", err)
		}
		unix.Close(ruleset.fd)
	}
	// Limits last: the helper itself may hold more memory than a command
	// may (it does under a small limit or in a race-detector build). From
	// here to the exec nothing may ask the system for memory, which would
	// fail: the exec's arguments are ready, and no collection starts in
	// the helper (HelperEnv).
	command, err := prepareExec(cfg.Argv, cfg.Env)
	if err != nil {
		return err
	}
	if err := setLimits(cfg.Limits); err != nil {
		return err
	}
	// Descriptors agentd inherited from whoever started it must not reach
	// the command either.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("close inherited descriptors: %w", err)
	}
	return fmt.Errorf("exec %s: %w", cfg.Argv[0], command.run())
}

// preparedExec is an execve(2) whose arguments are already in the form
// the kernel reads, so that running it allocates nothing.
type preparedExec struct {
	path       *byte
	argv, envv []*byte
}

func prepareExec(argv, env []string) (preparedExec, error) {
	if len(argv) == 0 {
		return preparedExec{}, errors.New("exec: no command")
	}
	path, err := unix.BytePtrFromString(argv[0])
	if err != nil {
		return preparedExec{}, fmt.Errorf("exec %q: %w", argv[0], err)
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return preparedExec{}, fmt.Errorf("exec %q: arguments: %w", argv[0], err)
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return preparedExec{}, fmt.Errorf("exec %q: environment: %w", argv[0], err)
	}
	return preparedExec{path: path, argv: argvp, envv: envp}, nil
}

// run replaces the process, or returns why it could not; unlike
// unix.Exec it converts nothing and so asks the runtime for no memory.
func (e preparedExec) run() error {
	_, _, errno := unix.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(e.path)),
		uintptr(unsafe.Pointer(&e.argv[0])), uintptr(unsafe.Pointer(&e.envv[0])))
	return errno
}

// inNewNamespaces checks that the helper is the first process of a new
// PID namespace and lives in a user namespace other than the initial one,
// as Command starts it.
func inNewNamespaces() error {
	if os.Getpid() != 1 {
		return fmt.Errorf("refusing to set up: this helper is process %d, not the first process of a PID namespace of its own (was its SysProcAttr replaced?)", os.Getpid())
	}
	m, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return fmt.Errorf("refusing to set up: cannot read the user namespace's map: %w", err)
	}
	if f := strings.Fields(string(m)); len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295" {
		return errors.New("refusing to set up: this helper runs in the initial user namespace, not one of its own (was its SysProcAttr replaced?)")
	}
	return nil
}

func readConfig() (Config, error) {
	var cfg Config
	f := os.NewFile(ConfigFD, "config")
	defer f.Close()
	if err := json.NewDecoder(f).Decode(&cfg); err != nil {
		return cfg, fmt.Errorf("this is agentd's sandbox helper, which agentd starts itself; no configuration on descriptor %d: %w", ConfigFD, err)
	}
	if len(cfg.Argv) == 0 || cfg.Workspace == "" {
		return cfg, errors.New("configuration without a command or workspace")
	}
	return cfg, nil
}

func lastCapability() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("read the last capability: %w", err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// newRoot is where the new root file system is assembled: a tmpfs mounted
// over /tmp in the helper's own mount namespace, after every Tree it
// shows was taken as a detached mount (so a workspace under /tmp is not
// hidden by it).
const newRoot = "/tmp"

// buildRoot makes the command's view of the file system and enters it.
func buildRoot(cfg Config) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// Take every Tree before the new root hides anything.
	type detached struct {
		path string
		fd   int
	}
	var trees []detached
	closeTrees := func() {
		for _, t := range trees {
			if t.fd >= 0 {
				unix.Close(t.fd)
			}
		}
	}
	defer closeTrees()
	for _, t := range cfg.Trees {
		if t.Link != "" {
			continue
		}
		fd := t.FD
		if fd == 0 {
			var err error
			if fd, err = CloneTree(unix.AT_FDCWD, t.Path, ReadOnly); err != nil {
				return err
			}
		}
		trees = append(trees, detached{t.Path, fd})
	}
	ws := cfg.WorkspaceFD
	if ws == 0 {
		dfd, err := unix.Openat2(unix.AT_FDCWD, cfg.Workspace, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return fmt.Errorf("open the workspace %s (a symbolic link in its path is refused): %w", cfg.Workspace, err)
		}
		ws, err = CloneTree(dfd, "", unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
		unix.Close(dfd)
		if err != nil {
			return err
		}
	}
	devices := map[string]int{}
	for _, d := range []string{"null", "zero", "full", "random", "urandom"} {
		fd, err := unix.OpenTree(unix.AT_FDCWD, "/dev/"+d, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fmt.Errorf("take /dev/%s: %w", d, err)
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC}); err != nil {
			return fmt.Errorf("/dev/%s: %w", d, err)
		}
		devices[d] = fd
	}

	if err := unix.Mount("tmpfs", newRoot, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("mount the new root: %w", err)
	}
	at := func(p string) string { return path.Join(newRoot, p) }
	slices.SortFunc(cfg.Trees, func(a, b Tree) int { return strings.Count(a.Path, "/") - strings.Count(b.Path, "/") })
	for _, t := range cfg.Trees {
		if t.Link == "" {
			continue
		}
		if err := os.MkdirAll(path.Dir(at(t.Path)), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(t.Link, at(t.Path)); err != nil {
			return fmt.Errorf("link %s: %w", t.Path, err)
		}
	}
	// A private /tmp first: trees, like workspaces, may lie under /tmp.
	if err := mountTmpfs(at("/tmp"), fmt.Sprintf("mode=1777,size=%d", cfg.Limits.Tmp), 0); err != nil {
		return fmt.Errorf("private /tmp: %w", err)
	}
	slices.SortFunc(trees, func(a, b detached) int { return strings.Count(a.path, "/") - strings.Count(b.path, "/") })
	for i := range trees {
		if err := os.MkdirAll(at(trees[i].path), 0o755); err != nil {
			return err
		}
		if err := attach(&trees[i].fd, at(trees[i].path)); err != nil {
			return fmt.Errorf("show %s: %w", trees[i].path, err)
		}
	}

	// /dev and /proc.
	if err := mountTmpfs(at("/dev"), "mode=0755,size=64k", unix.MS_NOEXEC); err != nil {
		return fmt.Errorf("/dev: %w", err)
	}
	for d, fd := range devices {
		target := at("/dev/" + d)
		if err := os.WriteFile(target, nil, 0o644); err != nil {
			return err
		}
		if err := attach(&fd, target); err != nil {
			return fmt.Errorf("/dev/%s: %w", d, err)
		}
		devices[d] = -1
	}
	for name, dest := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(dest, at("/dev/"+name)); err != nil {
			return err
		}
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, at("/dev"), 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("/dev read-only: %w", err)
	}
	if err := os.MkdirAll(at("/proc"), 0o555); err != nil {
		return err
	}
	if err := unix.Mount("proc", at("/proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}

	// The workspace, read-only where only some subdirectories are
	// writable, then those.
	target := at(cfg.Workspace)
	if err := os.MkdirAll(target, 0o755); err != nil && !errors.Is(err, unix.EROFS) {
		return fmt.Errorf("workspace mount point: %w", err)
	}
	if err := attach(&ws, target); err != nil {
		return fmt.Errorf("show the workspace: %w", err)
	}
	if len(cfg.Writable) > 0 {
		wsDir, err := unix.Open(target, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(wsDir)
		type sub struct{ at, clone int }
		var subs []sub
		for _, w := range cfg.Writable {
			at, err := unix.Openat2(wsDir, w, &unix.OpenHow{
				Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
				Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
			})
			if err != nil {
				return fmt.Errorf("writable path %q of the workspace: %w", w, err)
			}
			clone, err := CloneTree(at, "", 0)
			if err != nil {
				return err
			}
			subs = append(subs, sub{at, clone})
		}
		if err := unix.MountSetattr(unix.AT_FDCWD, target, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return fmt.Errorf("workspace read-only: %w", err)
		}
		for i, s := range subs {
			if err := unix.MoveMount(s.clone, "", s.at, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
				return fmt.Errorf("writable path %q: %w", cfg.Writable[i], err)
			}
			unix.Close(s.clone)
			unix.Close(s.at)
		}
	}

	// Secrets inside the trees: an empty read-only file or directory over
	// each.
	empty := at("/.empty")
	if err := os.WriteFile(empty, nil, 0o444); err != nil {
		return err
	}
	for _, m := range cfg.Masks {
		target := at(m.Path)
		if m.Dir {
			if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0,size=4k"); err != nil {
				return fmt.Errorf("hide %s: %w", m.Path, err)
			}
			continue
		}
		fd, err := CloneTree(unix.AT_FDCWD, empty, ReadOnly|unix.MOUNT_ATTR_NOEXEC)
		if err != nil {
			return fmt.Errorf("hide %s: %w", m.Path, err)
		}
		if err := attach(&fd, target); err != nil {
			return fmt.Errorf("hide %s: %w", m.Path, err)
		}
	}
	if err := os.Remove(empty); err != nil {
		return err
	}

	// Enter the new root and let go of the old one.
	if err := unix.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}); err != nil {
		return fmt.Errorf("root read-only: %w", err)
	}
	return nil
}

// attach mounts a detached mount at target and closes it.
func attach(fd *int, target string) error {
	err := unix.MoveMount(*fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH)
	unix.Close(*fd)
	*fd = -1
	return err
}

func mountTmpfs(target, data string, flags uintptr) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	return unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|flags, data)
}

// loopbackUp brings up the new network namespace's loopback interface, so
// programs can talk to themselves over 127.0.0.1 and nothing else.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

func setLimits(l Limits) error {
	for _, r := range []struct {
		name     string
		resource int
		value    uint64
	}{
		{"processes", unix.RLIMIT_NPROC, uint64(l.Processes)},
		{"memory", unix.RLIMIT_DATA, uint64(l.Memory)},
		{"file size", unix.RLIMIT_FSIZE, uint64(l.FileSize)},
		{"open files", unix.RLIMIT_NOFILE, uint64(l.OpenFiles)},
		{"core dumps", unix.RLIMIT_CORE, 0},
	} {
		var cur unix.Rlimit
		if err := unix.Getrlimit(r.resource, &cur); err != nil {
			return fmt.Errorf("limit %s: %w", r.name, err)
		}
		v := min(r.value, cur.Max)
		if err := unix.Setrlimit(r.resource, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("limit %s: %w", r.name, err)
		}
	}
	return nil
}

// dropPrivileges leaves the thread with no capability it could use or
// regain, and no_new_privs, so setuid and file-capability binaries give
// nothing.
func dropPrivileges(lastCap int) error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := 0; c <= lastCap; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	// linux/securebits.h: root's uid gives no capabilities, changing uids
	// never adjusts them, and none of this can be undone.
	const (
		noRoot             = 1 << 0
		noRootLocked       = 1 << 1
		noSetuidFixup      = 1 << 2
		noSetuidFixupLock  = 1 << 3
		keepCapsLocked     = 1 << 5
		noAmbientRaise     = 1 << 6
		noAmbientRaiseLock = 1 << 7
		securebits         = noRoot | noRootLocked | noSetuidFixup | noSetuidFixupLock | keepCapsLocked | noAmbientRaise | noAmbientRaiseLock
	)
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, securebits, 0, 0, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return nil
}

type ruleset struct {
	fd    int
	flags uint32
}

// landlockRuleset is the Landlock domain of the command: read and execute
// in the trees, read and write in the writable parts of the workspace and
// /tmp, a few devices, and no signals or abstract sockets out of the
// domain. Without Landlock in the kernel it is empty (fd -1): the
// namespaces above are the walls then.
func landlockRuleset(cfg Config) (ruleset, error) {
	var ro []string
	for _, t := range cfg.Trees {
		if t.Link == "" {
			ro = append(ro, t.Path)
		}
	}
	rules := []landlock.Rule{
		landlock.PathAccess(landlock.AccessFSSet(llsyscall.AccessFSReadDir), "/"),
		landlock.RODirs(ro...).IgnoreIfMissing(),
		landlock.RODirs("/proc", "/dev"),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full"),
		landlock.RWDirs("/tmp").WithRefer(),
	}
	if len(cfg.Writable) == 0 {
		rules = append(rules, landlock.RWDirs(cfg.Workspace).WithRefer())
	} else {
		rules = append(rules, landlock.RODirs(cfg.Workspace))
		for _, w := range cfg.Writable {
			rules = append(rules, landlock.RWDirs(path.Join(cfg.Workspace, w)).WithRefer())
		}
	}
	c := landlock.Config{HandledAccessFS: landlock.V7.HandledAccessFS, Scoped: landlock.V7.Scoped}.BestEffort()
	fd, flags, err := c.NewRulesetFD(rules...)
	if err != nil {
		if errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EOPNOTSUPP) {
			return ruleset{fd: -1}, nil
		}
		return ruleset{}, fmt.Errorf("landlock rules: %w", err)
	}
	return ruleset{fd: fd, flags: flags}, nil
}
