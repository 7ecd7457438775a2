package tools

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentd/agentd/agentloop"
)

type lsTool struct{ base }

// dirTarget resolves an optional directory argument ("" is the root) and
// checks that it is a directory.
func (w *Workspace) dirTarget(p string) (target, error) {
	if p == "" {
		p = "."
	}
	tg, err := w.resolve(p)
	if err != nil {
		return target{}, err
	}
	fi, err := w.root.Stat(tg.rel)
	if err != nil {
		if notFound(err) {
			return target{}, fmt.Errorf("Path not found: %s", p)
		}
		return target{}, w.rootErr(p, fmt.Errorf("Cannot stat %s: %w", p, err))
	}
	if !fi.IsDir() {
		return target{}, fmt.Errorf("Not a directory: %s", p)
	}
	return tg, nil
}

// Execute implements [agentloop.Tool].
func (t *lsTool) Execute(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
	p, err := stringArg(call.Args, "path", false)
	if err != nil {
		return agentloop.Result{}, err
	}
	limit, _, err := intArg(call.Args, "limit", DefaultLsLimit, 1)
	if err != nil {
		return agentloop.Result{}, err
	}
	w := t.w
	tg, err := w.dirTarget(p)
	if err != nil {
		return agentloop.Result{}, err
	}
	entries, err := fs.ReadDir(w.root.FS(), filepath.ToSlash(tg.rel))
	if err != nil {
		return agentloop.Result{}, fmt.Errorf("Cannot read directory: %w", err)
	}
	sort.SliceStable(entries, func(i, j int) bool {
		return strings.ToLower(entries[i].Name()) < strings.ToLower(entries[j].Name())
	})
	var names []string
	var list []map[string]any
	limitReached := false
	for _, e := range entries {
		if ctx.Err() != nil {
			return agentloop.Result{}, errAborted
		}
		if len(names) >= limit {
			limitReached = true
			break
		}
		kind := entryKind(w, path.Join(filepath.ToSlash(tg.rel), e.Name()), e)
		name := e.Name()
		if kind == "directory" || kind == "symlink_directory" {
			name += "/"
		}
		names = append(names, name)
		list = append(list, map[string]any{"name": e.Name(), "type": kind})
	}
	if len(names) == 0 {
		det, err := details(map[string]any{"path": displayDir(p), "entries": []any{}})
		return agentloop.Result{Content: text("(empty directory)"), Details: det}, err
	}
	shown, tr := headLines(names, len(names), w.opts.MaxOutputBytes)
	out := strings.Join(shown, "\n")
	var notices []string
	d := map[string]any{"path": displayDir(p), "entries": list}
	if limitReached {
		notices = append(notices, fmt.Sprintf("%d entries limit reached. Use limit=%d for more", limit, limit*2))
		d["entry_limit_reached"] = limit
	}
	if tr.truncated {
		notices = append(notices, fmt.Sprintf("%s limit reached", formatSize(w.opts.MaxOutputBytes)))
		d["truncation"] = tr.details()
	}
	if len(notices) > 0 {
		out += "\n\n[" + strings.Join(notices, ". ") + "]"
	}
	det, err := details(d)
	return agentloop.Result{Content: text(out), Details: det}, err
}

func displayDir(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// entryKind names an entry's type for details. A symbolic link is followed
// only inside the workspace (through os.Root); one that leads outside or
// nowhere stays a plain "symlink".
func entryKind(w *Workspace, rel string, e fs.DirEntry) string {
	t := e.Type()
	switch {
	case t.IsDir():
		return "directory"
	case t.IsRegular():
		return "file"
	case t&fs.ModeSymlink != 0:
		fi, err := w.root.Stat(filepath.FromSlash(rel))
		if err != nil {
			return "symlink"
		}
		if fi.IsDir() {
			return "symlink_directory"
		}
		return "symlink_file"
	case t&fs.ModeNamedPipe != 0:
		return "named_pipe"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&(fs.ModeDevice|fs.ModeCharDevice) != 0:
		return "device"
	}
	return "other"
}
