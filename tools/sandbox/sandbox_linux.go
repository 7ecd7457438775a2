package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/internal/fspath"
	"github.com/agentd/agentd/tools/sandbox/internal/confine"
)

// setupTimeout bounds the wait for a helper to reach its command.
const setupTimeout = 30 * time.Second

// Sandbox confines commands on Linux: each runs in new user, mount, PID,
// network, IPC and UTS namespaces, sees only its workspace (writable),
// a private /tmp and the system trees (read-only, secrets masked), has
// no capabilities, no_new_privs and a Landlock domain, and runs as an
// unprivileged identity. It is safe for concurrent use.
type Sandbox struct {
	opts Options
	// status is what the probe found, set before probed is closed; the
	// probe starts once, at the first Status or Available.
	status   Status
	probe1   sync.Once
	probing  atomic.Bool
	probed   chan struct{}
	root     bool // agentd runs as root: commands take opts.UID/GID
	uid, gid int  // the identity commands run as
	trees    []confine.Tree
	masks    []confine.Mask

	mu     sync.Mutex
	idmaps map[[2]int]*os.File // user namespaces mapping a workspace owner to uid/gid
}

// New returns a sandbox that tries itself once, confining `true` in an
// empty directory, at the first Status or Available, which wait for that
// try (tens of milliseconds, which a start-up need not spend: agentd asks
// once it serves) and tell whether it worked.
func New(opts Options) *Sandbox {
	if !confine.SpawnLinked {
		return Unavailable("this agentd was built without cgo, which the sandbox's spawn stage needs")
	}
	o := opts.withDefaults()
	s := &Sandbox{opts: o, idmaps: map[[2]int]*os.File{}, probed: make(chan struct{})}
	s.root = os.Geteuid() == 0
	s.uid, s.gid = os.Geteuid(), os.Getegid()
	if s.root {
		s.uid, s.gid = o.UID, o.GID
	}
	s.status = Status{UID: s.uid, GID: s.gid}
	if abi, err := llsyscall.LandlockGetABIVersion(); err == nil {
		s.status.Landlock = abi
	}
	s.trees = systemTrees(append(SystemPaths(), o.ReadPaths...))
	s.masks = masksIn(s.trees, append(append([]string(nil), secretPaths...), o.Hidden...))
	return s
}

// tried starts the probe unless it ran or runs, and waits for it.
func (s *Sandbox) tried() {
	s.probe1.Do(func() {
		s.probing.Store(true)
		s.status.Reason = s.probe()
		s.status.Active = s.status.Reason == ""
		close(s.probed)
	})
	<-s.probed
}

// Tried returns a channel closed once the sandbox has tried itself (by
// the first Status or Available), without starting the try.
func (s *Sandbox) Tried() <-chan struct{} { return s.probed }

// Unavailable returns a sandbox that cannot confine anything, for reason:
// what New returns where confinement is impossible, for the code paths
// that must then refuse.
func Unavailable(reason string) *Sandbox {
	s := &Sandbox{status: Status{Reason: reason}, probed: make(chan struct{}), idmaps: map[[2]int]*os.File{}}
	s.probe1.Do(func() { close(s.probed) })
	return s
}

// probe confines `true` and returns why that failed, or "".
func (s *Sandbox) probe() string {
	dir, err := os.MkdirTemp("", "agentd-sandbox-probe-")
	if err != nil {
		return fmt.Sprintf("cannot make a directory to try it in: %v", err)
	}
	defer os.RemoveAll(dir)
	shell, err := exec.LookPath("sh")
	if err != nil {
		return fmt.Sprintf("no shell to try it with: %v", err)
	}
	cmd, err := s.command(Spec{Dir: dir, Env: []string{"PATH=/usr/bin:/bin"}}, []string{shell, "-c", "exit 0"})
	if err != nil {
		return err.Error()
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err.Error()
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Sprintf("a confined command failed: %v: %s", err, strings.TrimSpace(out.String()))
	}
	return ""
}

// Status reports what the sandbox found when it tried itself (at the
// first Status or Available).
func (s *Sandbox) Status() Status {
	s.tried()
	return s.status
}

// Available returns nil when commands can be confined, otherwise an error
// (of kind ErrUnavailable) saying why.
func (s *Sandbox) Available() error {
	s.tried()
	if s.status.Active {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrUnavailable, s.status.Reason)
}

// Close releases the namespaces kept for idmapped workspaces.
func (s *Sandbox) Close() error {
	if s.probing.Load() {
		<-s.probed // the probe's command may map a workspace
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, f := range s.idmaps {
		f.Close()
		delete(s.idmaps, k)
	}
	return nil
}

// Command returns argv (argv[0] an absolute path inside the trees the
// command can see) to run confined as spec says.
func (s *Sandbox) Command(spec Spec, argv []string) (*Cmd, error) {
	if err := s.Available(); err != nil {
		return nil, err
	}
	return s.command(spec, argv)
}

func (s *Sandbox) command(spec Spec, argv []string) (*Cmd, error) {
	if len(argv) == 0 || !filepath.IsAbs(argv[0]) {
		return nil, errors.New("sandbox: the command must be an absolute path")
	}
	if !filepath.IsAbs(spec.Dir) || filepath.Clean(spec.Dir) != spec.Dir || spec.Dir == "/" {
		return nil, fmt.Errorf("sandbox: workspace %q is not a clean absolute directory other than /", spec.Dir)
	}
	for _, w := range spec.Writable {
		if !filepath.IsLocal(w) {
			return nil, fmt.Errorf("sandbox: writable path %q does not lie inside the workspace", w)
		}
	}
	cfg := confine.Config{
		Trees:     s.trees,
		Masks:     s.masks,
		Workspace: spec.Dir,
		Writable:  spec.Writable,
		Network:   spec.Network,
		Limits: confine.Limits{Processes: s.opts.MaxProcesses, Memory: s.opts.MaxMemoryBytes, FileSize: s.opts.MaxFileBytes,
			OpenFiles: s.opts.MaxOpenFiles, Tmp: s.opts.TmpBytes},
		Argv:   argv,
		Env:    spec.Env,
		Status: true,
	}
	if len(spec.ReadPaths) > 0 {
		extra := systemTrees(spec.ReadPaths)
		cfg.Trees = append(append([]confine.Tree(nil), s.trees...), extra...)
		cfg.Masks = append(append([]confine.Mask(nil), s.masks...), masksIn(extra, append(append([]string(nil), secretPaths...), s.opts.Hidden...))...)
	}

	conf, statusR, statusW, mounts, err := s.helperFiles(&cfg)
	if err != nil {
		return nil, err
	}
	files := append([]*os.File{conf, statusW}, mounts...)
	var once sync.Once
	closeAll := func() {
		once.Do(func() {
			for _, f := range files {
				f.Close()
			}
		})
	}

	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	if !spec.Network {
		flags |= unix.CLONE_NEWNET
	}
	// agentd vforks the spawn stage, which makes the namespaces and the
	// helper from a process of its own (see confine.SpawnName): a real
	// fork of agentd would make its every next write to its heap fault.
	// The helper is in the spawn stage's process group, so killing the
	// group kills both, and each dies with its parent.
	cmd := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        confine.SpawnArgs(flags, s.uid, s.gid, s.root),
		Env:         []string{},
		Dir:         "/",
		ExtraFiles:  files,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	c := &Cmd{Cmd: cmd, release: func() { closeAll(); statusR.Close() }}
	c.start = func() error {
		defer statusR.Close()
		if s.root {
			s.givePipes(cmd)
		}
		err := cmd.Start()
		closeAll()
		if err != nil {
			return fmt.Errorf("sandbox: cannot start the helper: %w", err)
		}
		_ = statusR.SetReadDeadline(time.Now().Add(setupTimeout))
		msg, rerr := io.ReadAll(io.LimitReader(statusR, 4096))
		if len(msg) > 0 || rerr != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			reason := strings.TrimSpace(string(msg))
			if reason == "" {
				reason = fmt.Sprintf("the helper did not report within %v: %v", setupTimeout, rerr)
			}
			return &SetupError{Reason: reason}
		}
		return nil
	}
	return c, nil
}

// helperFiles makes the descriptors the helper inherits: the config (last,
// once cfg names the mounts), the status pipe and, when agentd is root,
// every tree and the workspace as detached mounts.
func (s *Sandbox) helperFiles(cfg *confine.Config) (conf, statusR, statusW *os.File, mounts []*os.File, err error) {
	closeMounts := func() {
		for _, m := range mounts {
			m.Close()
		}
	}
	if s.root {
		next := confine.StatusFD + 1
		cfg.Trees = append([]confine.Tree(nil), cfg.Trees...)
		for i, t := range cfg.Trees {
			if t.Link != "" {
				continue
			}
			fd, err := confine.CloneTree(unix.AT_FDCWD, t.Path, confine.ReadOnly)
			if err != nil {
				closeMounts()
				return nil, nil, nil, nil, err
			}
			mounts = append(mounts, os.NewFile(uintptr(fd), t.Path))
			cfg.Trees[i].FD = next
			next++
		}
		ws, err := s.workspaceMount(cfg.Workspace)
		if err != nil {
			closeMounts()
			return nil, nil, nil, nil, err
		}
		mounts = append(mounts, ws)
		cfg.WorkspaceFD = next
	}
	if conf, err = confine.WriteConfig(*cfg); err != nil {
		closeMounts()
		return nil, nil, nil, nil, err
	}
	if statusR, statusW, err = os.Pipe(); err != nil {
		conf.Close()
		closeMounts()
		return nil, nil, nil, nil, fmt.Errorf("sandbox: %w", err)
	}
	return conf, statusR, statusW, mounts, nil
}

// givePipes hands the pipes among the command's standard descriptors to
// the identity it runs as: a pipe agentd made as root is root's, and a
// command reopening it (echo > /dev/stdout) would be refused.
func (s *Sandbox) givePipes(cmd *exec.Cmd) {
	for _, v := range []any{cmd.Stdin, cmd.Stdout, cmd.Stderr} {
		f, ok := v.(*os.File)
		if !ok {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(int(f.Fd()), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
			_ = unix.Fchown(int(f.Fd()), s.uid, s.gid)
		}
	}
}

// openNoSymlinks opens dir as an O_PATH handle, refusing a symbolic link
// anywhere in its path.
func openNoSymlinks(dir string) (int, error) {
	return unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// workspaceMount returns the workspace as a detached mount, opened
// refusing symbolic links in its path. When its owner is not the
// command's identity the mount is idmapped: files owned by the owner
// appear owned by the command (and files it creates are the owner's), so
// an unprivileged command can work in a workspace root made.
func (s *Sandbox) workspaceMount(dir string) (*os.File, error) {
	dfd, err := openNoSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox: open workspace %s (a symbolic link in its path is refused): %w", dir, err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return nil, fmt.Errorf("sandbox: workspace %s: %w", dir, err)
	}
	mfd, err := confine.CloneTree(dfd, "", unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return nil, err
	}
	if int(st.Uid) != s.uid || int(st.Gid) != s.gid {
		ns, err := s.idmapNamespace(int(st.Uid), int(st.Gid))
		if err != nil {
			unix.Close(mfd)
			return nil, err
		}
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns.Fd())}
		if err := unix.MountSetattr(mfd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
			unix.Close(mfd)
			return nil, fmt.Errorf("sandbox: the workspace's file system cannot map its owner (uid %d) to the sandbox's uid %d (idmapped mount): %w", st.Uid, s.uid, err)
		}
	}
	return os.NewFile(uintptr(mfd), "workspace"), nil
}

// idmapNamespace returns a user namespace mapping uid/gid (a workspace's
// owner) to the sandbox's identity, made once per owner by a holder
// process that exits as soon as agentd has a handle on it.
func (s *Sandbox) idmapNamespace(uid, gid int) (*os.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := [2]int{uid, gid}
	if f, ok := s.idmaps[key]; ok {
		return f, nil
	}
	// The holder makes the namespace itself, before Go starts
	// (spawn_linux.c): agentd only vforks it, as it does the spawn stage.
	var stderr bytes.Buffer
	cmd := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        []string{confine.HolderName},
		Env:         []string{},
		Dir:         "/",
		Stderr:      &stderr,
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	hold, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	ready, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("sandbox: start a user namespace for the workspace's owner: %w", err)
	}
	// Wait, which ends the copy into stderr, before stderr is read.
	var once sync.Once
	finish := func() { once.Do(func() { hold.Close(); _ = cmd.Wait() }) }
	defer finish()
	if _, err := io.ReadFull(ready, make([]byte, 1)); err != nil {
		_ = cmd.Process.Kill()
		finish()
		return nil, fmt.Errorf("sandbox: user namespace for the workspace's owner: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	proc := fmt.Sprintf("/proc/%d/", cmd.Process.Pid)
	for _, m := range []struct{ file, text string }{
		{"uid_map", fmt.Sprintf("%d %d 1\n", uid, s.uid)},
		{"setgroups", "deny"},
		{"gid_map", fmt.Sprintf("%d %d 1\n", gid, s.gid)},
	} {
		if err := os.WriteFile(proc+m.file, []byte(m.text), 0); err != nil {
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("sandbox: map the workspace's owner (uid %d, gid %d) to the sandbox's identity: %w", uid, gid, err)
		}
	}
	f, err := os.Open(proc + "ns/user")
	if err != nil {
		return nil, fmt.Errorf("sandbox: user namespace for the workspace's owner: %w", err)
	}
	s.idmaps[key] = f
	return f, nil
}

// systemTrees lists the paths that exist, as directories to bind or links
// to recreate.
func systemTrees(paths []string) []confine.Tree {
	var out []confine.Tree
	seen := map[string]bool{}
	for _, p := range paths {
		p = filepath.Clean(p)
		if seen[p] || !filepath.IsAbs(p) || p == "/" {
			continue
		}
		seen[p] = true
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				continue
			}
			// A link is kept as it is only when it stays among the
			// trees; otherwise what it leads to is bound in its place.
			if real, err := filepath.EvalSymlinks(p); err == nil && underAny(real, paths) {
				out = append(out, confine.Tree{Path: p, Link: link})
			} else if err == nil {
				if st, err := os.Stat(real); err == nil && st.IsDir() {
					out = append(out, confine.Tree{Path: p})
				}
			}
		case fi.IsDir():
			out = append(out, confine.Tree{Path: p})
		}
	}
	return out
}

// masksIn returns the paths (patterns expanded, links resolved) that lie
// inside one of the bound trees.
func masksIn(trees []confine.Tree, patterns []string) []confine.Mask {
	var out []confine.Mask
	seen := map[string]bool{}
	for _, pat := range patterns {
		matches, _ := filepath.Glob(pat)
		for _, m := range matches {
			real, err := filepath.EvalSymlinks(m)
			if err != nil || seen[real] {
				continue
			}
			fi, err := os.Stat(real)
			if err != nil {
				continue
			}
			for _, t := range trees {
				if t.Link != "" {
					continue
				}
				if fspath.Inside(t.Path, real) {
					seen[real] = true
					out = append(out, confine.Mask{Path: real, Dir: fi.IsDir()})
					break
				}
			}
		}
	}
	return out
}

func underAny(p string, roots []string) bool {
	for _, r := range roots {
		if fspath.Inside(filepath.Clean(r), p) {
			return true
		}
	}
	return false
}
