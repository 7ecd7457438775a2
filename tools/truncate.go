package tools

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// formatSize prints a byte count the way pi's notes do: 512B, 50.0KB, 1.5MB.
func formatSize(n int) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%dB", n)
	case n < 1024*1024:
		return fmt.Sprintf("%.1fKB", float64(n)/1024)
	default:
		return fmt.Sprintf("%.1fMB", float64(n)/(1024*1024))
	}
}

// truncation describes how a text was cut, for notes and details.
type truncation struct {
	truncated bool
	// by is "lines" or "bytes" when truncated.
	by          string
	totalLines  int
	outputLines int
	outputBytes int
	// lastLinePartial: tail truncation kept only the end of one long line.
	lastLinePartial bool
}

func (t truncation) details() map[string]any {
	return map[string]any{
		"truncated":         t.truncated,
		"truncated_by":      t.by,
		"total_lines":       t.totalLines,
		"output_lines":      t.outputLines,
		"output_bytes":      t.outputBytes,
		"last_line_partial": t.lastLinePartial,
	}
}

// headLines keeps the first lines that fit both caps, never a partial line.
// Each line costs its length plus one for the newline that joins it.
func headLines(lines []string, maxLines, maxBytes int) ([]string, truncation) {
	t := truncation{totalLines: len(lines)}
	size := 0
	for i, l := range lines {
		if i >= maxLines {
			t.truncated, t.by = true, "lines"
			break
		}
		cost := len(l)
		if i > 0 {
			cost++
		}
		if size+cost > maxBytes {
			t.truncated, t.by = true, "bytes"
			break
		}
		size += cost
		t.outputLines++
	}
	t.outputBytes = size
	return lines[:t.outputLines], t
}

// tailLines keeps the last lines that fit both caps. When even the last line
// is too long, it keeps that line's end (on a UTF-8 boundary), like pi.
func tailLines(lines []string, maxLines, maxBytes int) ([]string, truncation) {
	t := truncation{totalLines: len(lines)}
	size := 0
	start := len(lines)
	for i := len(lines) - 1; i >= 0; i-- {
		if t.outputLines >= maxLines {
			t.truncated, t.by = true, "lines"
			break
		}
		cost := len(lines[i])
		if t.outputLines > 0 {
			cost++
		}
		if size+cost > maxBytes {
			t.truncated, t.by = true, "bytes"
			if t.outputLines == 0 {
				tail := tailBytes(lines[i], maxBytes)
				t.outputLines, t.outputBytes, t.lastLinePartial = 1, len(tail), true
				return []string{tail}, t
			}
			break
		}
		size += cost
		t.outputLines++
		start = i
	}
	t.outputBytes = size
	return lines[start:], t
}

// tailBytes returns at most n bytes from the end of s, starting on a rune
// boundary.
func tailBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// splitLines splits text into lines; a final newline ends the last line
// rather than starting an empty one, and "" has no lines.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// cutLine shortens a line to max characters with pi's marker.
func cutLine(s string, max int) (string, bool) {
	if utf8.RuneCountInString(s) <= max {
		return s, false
	}
	n := 0
	for i := range s {
		if n == max {
			return s[:i] + "... [truncated]", true
		}
		n++
	}
	return s, false
}

// validText makes bytes safe for a protobuf string field.
func validText(b []byte) string {
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
