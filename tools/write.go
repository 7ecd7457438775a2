package tools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/agentd/agentd/agentloop"
)

type writeTool struct{ base }

// Execute implements [agentloop.Tool].
func (t *writeTool) Execute(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
	p, err := stringArg(call.Args, "path", true)
	if err != nil {
		return agentloop.Result{}, err
	}
	content, err := stringArg(call.Args, "content", true)
	if err != nil {
		return agentloop.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return agentloop.Result{}, errAborted
	}
	w := t.w
	w.mutate.Lock()
	defer w.mutate.Unlock()
	tg, err := w.resolve(p)
	if err != nil {
		return agentloop.Result{}, err
	}
	if err := w.checkWritable(tg); err != nil {
		return agentloop.Result{}, err
	}
	if tg.rel == "." {
		return agentloop.Result{}, fmt.Errorf("Path %s is a directory, not a file", p)
	}
	if err := w.checkSpecial(tg); err != nil {
		return agentloop.Result{}, err
	}
	created := false
	_, err = w.root.Lstat(tg.rel)
	if errors.Is(err, syscall.ENOTDIR) {
		return agentloop.Result{}, fmt.Errorf("Cannot write %s: a parent of it is a file, not a directory", p)
	}
	if errors.Is(err, fs.ErrNotExist) {
		created = true
		if dir := filepath.Dir(tg.rel); dir != "." {
			if err := w.root.MkdirAll(dir, 0o755); err != nil {
				return agentloop.Result{}, w.rootErr(p, fmt.Errorf("Cannot create directory for %s: %w", p, err))
			}
		}
	}
	// No O_TRUNC: the file is emptied only after it proved to be a regular
	// file, so a special file swapped in after the checks is left untouched.
	f, _, err := w.openRegular(tg, os.O_WRONLY|os.O_CREATE)
	if err != nil {
		return agentloop.Result{}, err
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return agentloop.Result{}, fmt.Errorf("Cannot write %s: %w", p, err)
	}
	if _, err := f.WriteAt([]byte(content), 0); err != nil {
		f.Close()
		return agentloop.Result{}, fmt.Errorf("Cannot write %s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return agentloop.Result{}, fmt.Errorf("Cannot write %s: %w", p, err)
	}
	det, err := details(map[string]any{
		"path": p, "bytes": len(content), "lines": len(splitLines(content)), "created": created,
	})
	return agentloop.Result{Content: text(fmt.Sprintf("Successfully wrote %d bytes to %s", len(content), p)), Details: det}, err
}
