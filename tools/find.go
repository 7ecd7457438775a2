package tools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/agentd/agentd/agentloop"
)

type findTool struct{ base }

var errLimit = errors.New("limit reached")

// walk visits every entry below the directory rel (slash-separated paths
// relative to it), skipping .git directories and unreadable entries. It
// does not follow symbolic links, so it never leaves the workspace.
func (w *Workspace) walk(ctx context.Context, rel string, visit func(relPath string, d fs.DirEntry) error) error {
	dir := filepath.ToSlash(rel)
	err := fs.WalkDir(w.root.FS(), dir, func(p string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil {
			if p == dir {
				return err
			}
			// An entry we cannot read is skipped, like fd and rg do.
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if p == dir {
			return nil
		}
		if d.IsDir() && d.Name() == ".git" {
			return fs.SkipDir
		}
		r := p
		if dir != "." {
			r = strings.TrimPrefix(p, dir+"/")
		}
		return visit(r, d)
	})
	if ctx.Err() != nil {
		return errAborted
	}
	return err
}

// Execute implements [agentloop.Tool].
func (t *findTool) Execute(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
	pattern, err := stringArg(call.Args, "pattern", true)
	if err != nil {
		return agentloop.Result{}, err
	}
	p, err := stringArg(call.Args, "path", false)
	if err != nil {
		return agentloop.Result{}, err
	}
	limit, _, err := intArg(call.Args, "limit", DefaultFindLimit, 1)
	if err != nil {
		return agentloop.Result{}, err
	}
	g, err := compileGlob(pattern)
	if err != nil {
		return agentloop.Result{}, err
	}
	w := t.w
	tg, err := w.dirTarget(p)
	if err != nil {
		return agentloop.Result{}, err
	}
	var found []string
	limitReached := false
	err = w.walk(ctx, tg.rel, func(rel string, d fs.DirEntry) error {
		if !g.match(rel) {
			return nil
		}
		if len(found) >= limit {
			limitReached = true
			return errLimit
		}
		if d.IsDir() {
			rel += "/"
		}
		found = append(found, rel)
		return nil
	})
	if err != nil && !errors.Is(err, errLimit) {
		return agentloop.Result{}, w.rootErr(displayDir(p), err)
	}
	if len(found) == 0 {
		det, err := details(map[string]any{"path": displayDir(p), "pattern": pattern, "files": []any{}})
		return agentloop.Result{Content: text("No files found matching pattern"), Details: det}, err
	}
	shown, tr := headLines(found, len(found), w.opts.MaxOutputBytes)
	out := strings.Join(shown, "\n")
	d := map[string]any{"path": displayDir(p), "pattern": pattern, "files": found}
	var notices []string
	if limitReached {
		notices = append(notices, fmt.Sprintf("%d results limit reached. Use limit=%d for more, or refine pattern", limit, limit*2))
		d["result_limit_reached"] = limit
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
