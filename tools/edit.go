package tools

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/agentd/agentd/agentloop"
)

type editTool struct{ base }

const bom = "\uFEFF"

// Execute implements [agentloop.Tool].
func (t *editTool) Execute(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
	p, err := stringArg(call.Args, "path", true)
	if err != nil {
		return agentloop.Result{}, err
	}
	oldText, err := stringArg(call.Args, "old_text", true)
	if err != nil {
		return agentloop.Result{}, err
	}
	newText, err := stringArg(call.Args, "new_text", true)
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
	if err := w.checkSpecial(tg); err != nil {
		return agentloop.Result{}, err
	}
	// One descriptor for reading and writing: the file checked is the file
	// rewritten.
	f, fi, err := w.openRegular(tg, os.O_RDWR)
	if err != nil {
		return agentloop.Result{}, err
	}
	defer f.Close()
	if fi.Size() > int64(w.opts.MaxFileBytes) {
		return agentloop.Result{}, fmt.Errorf("File %s is %s; edit_file handles files up to %s", p, formatSize(int(fi.Size())), formatSize(w.opts.MaxFileBytes))
	}
	raw, err := io.ReadAll(io.LimitReader(f, int64(w.opts.MaxFileBytes)+1))
	if err != nil {
		return agentloop.Result{}, fmt.Errorf("Cannot read %s: %w", p, err)
	}
	if len(raw) > w.opts.MaxFileBytes {
		return agentloop.Result{}, fmt.Errorf("File %s is larger than %s; edit_file handles files up to %s", p, formatSize(w.opts.MaxFileBytes), formatSize(w.opts.MaxFileBytes))
	}

	// Like pi: match on LF-normalised text without a byte-order mark (the
	// model sees neither), then restore both.
	content := string(raw)
	prefix := ""
	if strings.HasPrefix(content, bom) {
		prefix, content = bom, content[len(bom):]
	}
	crlf := strings.Contains(content, "\r\n")
	content = toLF(content)
	oldText, newText = toLF(oldText), toLF(newText)

	if oldText == "" {
		return agentloop.Result{}, fmt.Errorf("old_text must not be empty in %s.", p)
	}
	switch n := strings.Count(content, oldText); {
	case n == 0:
		return agentloop.Result{}, fmt.Errorf("Could not find the exact text in %s. The old text must match exactly including all whitespace and newlines.", p)
	case n > 1:
		return agentloop.Result{}, fmt.Errorf("Found %d occurrences of the text in %s. The text must be unique. Please provide more context to make it unique.", n, p)
	}
	updated := strings.Replace(content, oldText, newText, 1)
	if updated == content {
		return agentloop.Result{}, fmt.Errorf("No changes made to %s. The replacement produced identical content. This might indicate an issue with special characters or the text not existing as expected.", p)
	}
	if err := ctx.Err(); err != nil {
		return agentloop.Result{}, errAborted
	}

	final := updated
	if crlf {
		final = strings.ReplaceAll(final, "\n", "\r\n")
	}
	final = prefix + final
	if err := f.Truncate(0); err != nil {
		return agentloop.Result{}, fmt.Errorf("Cannot write %s: %w", p, err)
	}
	if _, err := f.WriteAt([]byte(final), 0); err != nil {
		return agentloop.Result{}, fmt.Errorf("Cannot write %s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return agentloop.Result{}, fmt.Errorf("Cannot write %s: %w", p, err)
	}

	diff, first, added, removed := unifiedDiff(p, content, updated, 3)
	det, err := details(map[string]any{
		"path": p, "diff": diff, "first_changed_line": first, "lines_added": added, "lines_removed": removed,
	})
	return agentloop.Result{Content: text(fmt.Sprintf("Successfully replaced text in %s.", p)), Details: det}, err
}

func toLF(s string) string {
	return strings.ReplaceAll(s, "\r\n", "\n")
}
