package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentd/agentd/agentloop"
	"github.com/agentd/agentd/internal/fspath"
	"github.com/agentd/agentd/tools/sandbox"
)

// Defaults for Options. The output caps match pi's tools so models trained
// against those limits see the same truncation notes.
const (
	DefaultBashTimeout    = 120 * time.Second
	DefaultMaxBashTimeout = 600 * time.Second
	DefaultMaxOutputBytes = 50 * 1024
	DefaultMaxOutputLines = 2000
	DefaultMaxImageBytes  = 5 * 1024 * 1024
	DefaultMaxFileBytes   = 16 * 1024 * 1024
	DefaultMaxStreamBytes = 1024 * 1024
)

// Limits of the list and search tools when the model gives no limit; the
// same as pi's.
const (
	DefaultLsLimit   = 500
	DefaultFindLimit = 1000
	DefaultGrepLimit = 100
	// GrepMaxLineChars cuts long matching lines so one minified file cannot
	// fill the output.
	GrepMaxLineChars = 500
)

// Options tunes a Workspace's limits. The zero value selects every default.
type Options struct {
	// BashTimeout applies when the model gives no timeout. Default 120 s.
	BashTimeout time.Duration
	// MaxBashTimeout caps the timeout the model may ask for. Default 600 s.
	MaxBashTimeout time.Duration
	// MaxOutputBytes caps the text one tool returns to the model. Default
	// 50 KiB.
	MaxOutputBytes int
	// MaxOutputLines caps the lines read_file and bash return. Default 2000.
	MaxOutputLines int
	// MaxImageBytes is the largest image read_file attaches. Default 5 MiB.
	MaxImageBytes int
	// MaxFileBytes is the largest file edit_file rewrites and grep searches.
	// Default 16 MiB.
	MaxFileBytes int
	// MaxStreamBytes caps the bash output streamed as updates, so a command
	// that prints without end cannot flood subscribers. Default 1 MiB.
	MaxStreamBytes int
	// Shell runs bash commands as `Shell -c command`. Default: bash from
	// PATH, else /bin/sh.
	Shell string
	// Env adds "NAME=value" entries to the minimal environment of bash
	// commands (see CommandEnv): what the operator passes on (agentd
	// --tool-env). agentd's own environment never reaches a command.
	Env []string
	// Sandbox confines bash commands; nil runs them unconfined, with
	// agentd's authority (agentd --sandbox=off).
	Sandbox *sandbox.Sandbox
	// Network lets confined commands use agentd's network instead of an
	// empty one of their own.
	Network bool
	// WritablePaths are the subdirectories of the workspace that bash
	// commands, write_file and edit_file may change; empty means the whole
	// workspace.
	WritablePaths []string
}

// commandPath is the PATH of bash commands.
const commandPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// CommandEnv is the whole environment of a bash command in the workspace
// dir: PATH, HOME (the workspace), LANG, TERM and TMPDIR, then extra
// ("NAME=value"; a name given here replaces the default), sorted.
func CommandEnv(dir string, extra []string) []string {
	env := map[string]string{
		"PATH": commandPath, "HOME": dir, "LANG": "C.UTF-8", "TERM": "dumb", "TMPDIR": "/tmp",
	}
	for _, kv := range extra {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

func (o Options) withDefaults() (Options, error) {
	for _, w := range o.WritablePaths {
		if !filepath.IsLocal(w) {
			return o, fmt.Errorf("tools: writable path %q is not a path inside the workspace", w)
		}
	}
	for name, v := range map[string]int64{
		"BashTimeout":    int64(o.BashTimeout),
		"MaxBashTimeout": int64(o.MaxBashTimeout),
		"MaxOutputBytes": int64(o.MaxOutputBytes),
		"MaxOutputLines": int64(o.MaxOutputLines),
		"MaxImageBytes":  int64(o.MaxImageBytes),
		"MaxFileBytes":   int64(o.MaxFileBytes),
		"MaxStreamBytes": int64(o.MaxStreamBytes),
	} {
		if v < 0 {
			return o, fmt.Errorf("tools: Options.%s must not be negative", name)
		}
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if o.BashTimeout == 0 {
		o.BashTimeout = DefaultBashTimeout
	}
	if o.MaxBashTimeout == 0 {
		o.MaxBashTimeout = DefaultMaxBashTimeout
	}
	if o.BashTimeout > o.MaxBashTimeout {
		return o, fmt.Errorf("tools: Options.BashTimeout %v exceeds MaxBashTimeout %v", o.BashTimeout, o.MaxBashTimeout)
	}
	def(&o.MaxOutputBytes, DefaultMaxOutputBytes)
	def(&o.MaxOutputLines, DefaultMaxOutputLines)
	def(&o.MaxImageBytes, DefaultMaxImageBytes)
	def(&o.MaxFileBytes, DefaultMaxFileBytes)
	def(&o.MaxStreamBytes, DefaultMaxStreamBytes)
	return o, nil
}

// Workspace is one directory the built-in tools are confined to. It is safe
// for concurrent use; Close releases the directory handle once no tool call
// is running.
type Workspace struct {
	// dir is the root with symbolic links resolved; given is the path New
	// received, accepted as a prefix of absolute paths too.
	dir, given string
	root       *os.Root
	opts       Options
	tools      []agentloop.Tool
	// mutate serializes write_file and edit_file so two calls in one
	// parallel batch cannot interleave a read-modify-write of one file.
	mutate sync.Mutex
}

// New opens the workspace at root, which must be an existing absolute
// directory. Symbolic links in root itself are resolved once here, and the
// result is opened refusing links, so a link swapped into the path in
// between fails; links inside it are checked on every call.
func New(root string, opts Options) (*Workspace, error) {
	if root == "" {
		return nil, errors.New("tools: workspace root is empty")
	}
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("tools: workspace root %s is not an absolute path", root)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("tools: workspace root %s: %w", root, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("tools: workspace root %s: %w", root, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("tools: workspace root %s is not a directory", root)
	}
	r, err := openRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("tools: open workspace root %s: %w", root, err)
	}
	w := &Workspace{dir: dir, given: filepath.Clean(root), root: r, opts: o}
	b := func(name string) base { return base{w: w, def: definition(name, o)} }
	w.tools = []agentloop.Tool{
		&readTool{b(ReadFile)}, &writeTool{b(WriteFile)}, &editTool{b(EditFile)},
		&lsTool{b(Ls)}, &findTool{b(Find)}, &grepTool{b(Grep)}, &bashTool{b(Bash)},
	}
	return w, nil
}

// Root is the workspace directory with symbolic links resolved: the working
// directory of bash and the base of relative paths.
func (w *Workspace) Root() string { return w.dir }

// Close releases the directory handle. Tool calls after Close fail.
func (w *Workspace) Close() error { return w.root.Close() }

// Tools returns every built-in tool bound to this workspace, in the order of
// Names. The slice is fresh; the tools are shared.
func (w *Workspace) Tools() []agentloop.Tool {
	return append([]agentloop.Tool(nil), w.tools...)
}

// Tool returns the built-in tool with that name, so a session can enable a
// subset.
func (w *Workspace) Tool(name string) (agentloop.Tool, bool) {
	for _, t := range w.tools {
		if t.Definition().GetName() == name {
			return t, true
		}
	}
	return nil, false
}

// target is a path checked to lie inside the workspace.
type target struct {
	// shown is the path as the model gave it, for messages.
	shown string
	// rel is the path relative to the root with every symbolic link
	// resolved ("." for the root), for os.Root.
	rel string
}

// outsideError is the refusal for a path that leaves the workspace.
func (w *Workspace) outsideError(shown string) error {
	return fmt.Errorf("Path %s is outside the workspace %s", shown, w.dir)
}

// escapeError is the refusal for a path whose symbolic links lead out of
// the workspace. It never names where they lead: a tool result must not
// reveal paths outside the workspace.
func (w *Workspace) escapeError(shown string) error {
	return fmt.Errorf("Path %s leads outside the workspace %s through a symbolic link", shown, w.dir)
}

// resolveError is the refusal for a path that cannot be resolved. It keeps
// the system's reason (such as "permission denied") but not the path the
// system names, which may lie outside the workspace behind a link.
func resolveError(shown string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("Cannot resolve path %s: %w", shown, err)
}

// lexical maps a model-given path to a cleaned path relative to the root,
// without touching the file system.
func (w *Workspace) lexical(p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("Path %q contains a NUL byte", p)
	}
	if filepath.IsAbs(p) {
		c := filepath.Clean(p)
		for _, base := range []string{w.dir, w.given} {
			if rel, ok := fspath.Within(base, c); ok {
				return rel, nil
			}
		}
		return "", w.outsideError(p)
	}
	c := filepath.Clean(p)
	if c != "." && !filepath.IsLocal(c) {
		return "", w.outsideError(p)
	}
	return c, nil
}

// resolve checks that p, after resolving symbolic links, lies inside the
// workspace. The path may not exist yet (write_file): then its deepest
// existing ancestor is resolved. The returned rel contains no symbolic links
// at the time of the check; os.Root enforces confinement at the time of use.
func (w *Workspace) resolve(p string) (target, error) {
	if p == "" {
		return target{}, errors.New("path must not be empty")
	}
	rel, err := w.lexical(p)
	if err != nil {
		return target{}, err
	}
	existing := filepath.Join(w.dir, rel)
	rest := ""
	var real string
	for {
		r, err := filepath.EvalSymlinks(existing)
		if err == nil {
			real = r
			break
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrInvalid) && !isNotDir(err) {
			return target{}, resolveError(p, err)
		}
		if fi, lerr := os.Lstat(existing); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return target{}, w.brokenLink(p, existing)
		}
		if existing == w.dir {
			return target{}, resolveError(p, err)
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = filepath.Dir(existing)
	}
	full := filepath.Join(real, rest)
	relReal, ok := fspath.Within(w.dir, full)
	if !ok {
		return target{}, w.escapeError(p)
	}
	return target{shown: p, rel: relReal}, nil
}

// checkWritable refuses a target outside the session's writable paths.
func (w *Workspace) checkWritable(tg target) error {
	if len(w.opts.WritablePaths) == 0 {
		return nil
	}
	for _, wp := range w.opts.WritablePaths {
		if r, err := w.resolve(wp); err == nil {
			if fspath.Inside(r.rel, tg.rel) {
				return nil
			}
		}
	}
	return fmt.Errorf("Path %s is outside the paths this session may change (%s)", tg.shown, strings.Join(w.opts.WritablePaths, ", "))
}

// brokenLink explains a symbolic link whose target does not exist, naming
// an outside target as an escape.
func (w *Workspace) brokenLink(p, link string) error {
	dest, err := os.Readlink(link)
	if err != nil {
		return resolveError(p, err)
	}
	abs := dest
	if !filepath.IsAbs(abs) {
		parent, perr := filepath.EvalSymlinks(filepath.Dir(link))
		if perr != nil {
			parent = filepath.Dir(link)
		}
		abs = filepath.Join(parent, dest)
	}
	if !fspath.Inside(w.dir, filepath.Clean(abs)) {
		return w.escapeError(p)
	}
	return fmt.Errorf("Path %s is a symbolic link to %s, which does not exist", p, dest)
}

func isNotDir(err error) bool { return errors.Is(err, syscall.ENOTDIR) }

// kindOf names a file type that is not a regular file or directory, for the
// refusal text; "" for regular files and directories.
func kindOf(m fs.FileMode) string {
	switch t := m.Type(); {
	case t&fs.ModeDevice != 0, t&fs.ModeCharDevice != 0:
		return "a device file"
	case t&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeSymlink != 0:
		return "a symbolic link"
	case t&fs.ModeIrregular != 0:
		return "an irregular file"
	}
	return ""
}

// notRegular is the refusal for special files.
func notRegular(shown string, m fs.FileMode) error {
	if m.IsDir() {
		return fmt.Errorf("Path %s is a directory, not a file", shown)
	}
	return fmt.Errorf("Path %s is %s, not a regular file", shown, kindOf(m))
}

// rootErr rewrites an os.Root refusal (a race the explicit checks missed)
// into the workspace's wording and keeps other errors.
func (w *Workspace) rootErr(shown string, err error) error {
	if err != nil && strings.Contains(err.Error(), "path escapes from parent") {
		return w.outsideError(shown)
	}
	return err
}
