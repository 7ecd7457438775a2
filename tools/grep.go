package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/agentd/agentd/agentloop"
)

type grepTool struct{ base }

// grepRun is the state of one search.
type grepRun struct {
	w            *Workspace
	re           *regexp.Regexp
	context      int
	limit        int
	out          []string
	matches      []map[string]any
	count        int
	limitReached bool
	linesCut     bool
	skippedLarge int
}

// Execute implements [agentloop.Tool].
func (t *grepTool) Execute(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
	pattern, err := stringArg(call.Args, "pattern", true)
	if err != nil {
		return agentloop.Result{}, err
	}
	p, err := stringArg(call.Args, "path", false)
	if err != nil {
		return agentloop.Result{}, err
	}
	globPat, err := stringArg(call.Args, "glob", false)
	if err != nil {
		return agentloop.Result{}, err
	}
	ignoreCase, err := boolArg(call.Args, "ignore_case")
	if err != nil {
		return agentloop.Result{}, err
	}
	literal, err := boolArg(call.Args, "literal")
	if err != nil {
		return agentloop.Result{}, err
	}
	ctxLines, _, err := intArg(call.Args, "context", 0, 0)
	if err != nil {
		return agentloop.Result{}, err
	}
	limit, _, err := intArg(call.Args, "limit", DefaultGrepLimit, 1)
	if err != nil {
		return agentloop.Result{}, err
	}
	expr := pattern
	if literal {
		expr = regexp.QuoteMeta(expr)
	}
	if ignoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return agentloop.Result{}, fmt.Errorf("Invalid regex %q: %w", pattern, err)
	}
	var g *glob
	if globPat != "" {
		if g, err = compileGlob(globPat); err != nil {
			return agentloop.Result{}, err
		}
	}
	w := t.w
	if p == "" {
		p = "."
	}
	tg, err := w.resolve(p)
	if err != nil {
		return agentloop.Result{}, err
	}
	fi, err := w.root.Stat(tg.rel)
	if err != nil {
		if notFound(err) {
			return agentloop.Result{}, fmt.Errorf("Path not found: %s", p)
		}
		return agentloop.Result{}, w.rootErr(p, fmt.Errorf("Cannot stat %s: %w", p, err))
	}
	run := &grepRun{w: w, re: re, context: ctxLines, limit: limit}
	switch {
	case fi.Mode().IsRegular():
		if err := run.file(target{shown: p, rel: tg.rel}, path.Base(filepath.ToSlash(p))); err != nil {
			return agentloop.Result{}, err
		}
	case fi.IsDir():
		err = w.walk(ctx, tg.rel, func(rel string, d fs.DirEntry) error {
			if !d.Type().IsRegular() || (g != nil && !g.match(rel)) {
				return nil
			}
			ferr := run.file(target{shown: rel, rel: filepath.Join(tg.rel, filepath.FromSlash(rel))}, rel)
			if ferr != nil && !errors.Is(ferr, errLimit) {
				// A file that vanished or turned special mid-walk is skipped.
				return nil
			}
			return ferr
		})
		if err != nil && !errors.Is(err, errLimit) {
			return agentloop.Result{}, w.rootErr(p, err)
		}
	default:
		return agentloop.Result{}, notRegular(p, fi.Mode())
	}
	return run.result(p, pattern)
}

// file searches one file; label is how its lines are prefixed.
func (r *grepRun) file(t target, label string) error {
	if r.limitReached {
		return errLimit
	}
	if err := r.w.checkSpecial(t); err != nil {
		return err
	}
	f, fi, err := r.w.openRegular(t, os.O_RDONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi.Size() > int64(r.w.opts.MaxFileBytes) {
		r.skippedLarge++
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(r.w.opts.MaxFileBytes)+1))
	if err != nil {
		return fmt.Errorf("Cannot read %s: %w", t.shown, err)
	}
	if len(data) > r.w.opts.MaxFileBytes {
		r.skippedLarge++
		return nil
	}
	if bytes.IndexByte(data[:min(len(data), sniffBytes)], 0) >= 0 {
		return nil // binary, as rg skips it
	}
	lines := splitLines(strings.ReplaceAll(string(data), "\r\n", "\n"))
	for i, line := range lines {
		if !r.re.MatchString(line) {
			continue
		}
		if r.count >= r.limit {
			r.limitReached = true
			return errLimit
		}
		r.count++
		lo, hi := max(0, i-r.context), min(len(lines)-1, i+r.context)
		for j := lo; j <= hi; j++ {
			s, cut := cutLine(validText([]byte(lines[j])), GrepMaxLineChars)
			r.linesCut = r.linesCut || cut
			if j == i {
				r.out = append(r.out, fmt.Sprintf("%s:%d: %s", label, j+1, s))
				r.matches = append(r.matches, map[string]any{"path": label, "line": j + 1, "text": s})
			} else {
				r.out = append(r.out, fmt.Sprintf("%s-%d- %s", label, j+1, s))
			}
		}
	}
	return nil
}

func (r *grepRun) result(p, pattern string) (agentloop.Result, error) {
	d := map[string]any{"path": p, "pattern": pattern, "matches": r.matches}
	if r.skippedLarge > 0 {
		d["skipped_large_files"] = r.skippedLarge
	}
	var notices []string
	if r.skippedLarge > 0 {
		notices = append(notices, fmt.Sprintf("%d files larger than %s skipped", r.skippedLarge, formatSize(r.w.opts.MaxFileBytes)))
	}
	if r.count == 0 {
		d["matches"] = []any{}
		out := "No matches found"
		if len(notices) > 0 {
			out += "\n\n[" + strings.Join(notices, ". ") + "]"
		}
		det, err := details(d)
		return agentloop.Result{Content: text(out), Details: det}, err
	}
	shown, tr := headLines(r.out, len(r.out), r.w.opts.MaxOutputBytes)
	out := strings.Join(shown, "\n")
	if r.limitReached {
		notices = append(notices, fmt.Sprintf("%d matches limit reached. Use limit=%d for more, or refine pattern", r.limit, r.limit*2))
		d["match_limit_reached"] = r.limit
	}
	if tr.truncated {
		notices = append(notices, fmt.Sprintf("%s limit reached", formatSize(r.w.opts.MaxOutputBytes)))
		d["truncation"] = tr.details()
	}
	if r.linesCut {
		notices = append(notices, fmt.Sprintf("Some lines truncated to %d chars. Use read_file to see full lines", GrepMaxLineChars))
		d["lines_truncated"] = true
	}
	if len(notices) > 0 {
		out += "\n\n[" + strings.Join(notices, ". ") + "]"
	}
	det, err := details(d)
	return agentloop.Result{Content: text(out), Details: det}, err
}
