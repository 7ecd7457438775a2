package tools

import (
	"fmt"
	"strings"
)

// maxDiffCells bounds the LCS table of the changed middle of a diff; beyond
// it the middle is shown as removed and re-added, which is still a correct
// diff, only not a minimal one.
const maxDiffCells = 1 << 20

type opKind byte

const (
	opEqual opKind = ' '
	opDel   opKind = '-'
	opIns   opKind = '+'
)

type diffOp struct {
	kind opKind
	// line is the text with its newline, if it had one.
	line string
	// a and b are the 1-based line numbers in the old and new text before
	// this op (the line's own number for a deletion or insertion).
	a, b int
}

// lines splits text into lines keeping each newline; a last line without
// one stays as it is, so "no newline at end of file" is visible.
func lines(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// diffOps returns an edit script from a to b: common prefix and suffix, and
// an LCS of the middle when it is small enough.
func diffOps(a, b []string) []diffOp {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var ops []diffOp
	ai, bi := 0, 0
	emit := func(k opKind, line string) {
		ops = append(ops, diffOp{kind: k, line: line, a: ai + 1, b: bi + 1})
		if k != opIns {
			ai++
		}
		if k != opDel {
			bi++
		}
	}
	for i := 0; i < pre; i++ {
		emit(opEqual, a[i])
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	if len(ma)*len(mb) <= maxDiffCells {
		// lcs[i][j] is the LCS length of ma[i:] and mb[j:].
		w := len(mb) + 1
		lcs := make([]int32, (len(ma)+1)*w)
		for i := len(ma) - 1; i >= 0; i-- {
			for j := len(mb) - 1; j >= 0; j-- {
				if ma[i] == mb[j] {
					lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
				} else {
					lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
				}
			}
		}
		i, j := 0, 0
		for i < len(ma) || j < len(mb) {
			switch {
			case i < len(ma) && j < len(mb) && ma[i] == mb[j]:
				emit(opEqual, ma[i])
				i, j = i+1, j+1
			case j == len(mb) || (i < len(ma) && lcs[(i+1)*w+j] >= lcs[i*w+j+1]):
				// Deletions before insertions, as diff(1) prints them.
				emit(opDel, ma[i])
				i++
			default:
				emit(opIns, mb[j])
				j++
			}
		}
	} else {
		for _, l := range ma {
			emit(opDel, l)
		}
		for _, l := range mb {
			emit(opIns, l)
		}
	}
	for i := len(a) - suf; i < len(a); i++ {
		emit(opEqual, a[i])
	}
	return ops
}

// unifiedDiff renders the change from old to new as a unified diff with ctx
// lines of context, and reports the first changed line of the new text and
// the counts of added and removed lines.
func unifiedDiff(name, old, new string, ctx int) (diff string, firstChanged, added, removed int) {
	ops := diffOps(lines(old), lines(new))
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- a/%s\n+++ b/%s\n", name, name)
	for i := 0; i < len(ops); {
		if ops[i].kind == opEqual {
			i++
			continue
		}
		// A hunk starts ctx lines before this change and runs until a
		// stretch of more than 2*ctx equal lines (or the end).
		start := max(0, i-ctx)
		end := i
		for end < len(ops) {
			if ops[end].kind != opEqual {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == opEqual {
				run++
			}
			if run == len(ops) || run-end > 2*ctx {
				end = min(end+ctx, len(ops))
				break
			}
			end = run
		}
		writeHunk(&sb, ops[start:end])
		i = end
	}
	for _, op := range ops {
		switch op.kind {
		case opIns:
			added++
		case opDel:
			removed++
		}
		if op.kind != opEqual && firstChanged == 0 {
			firstChanged = op.b
		}
	}
	return sb.String(), firstChanged, added, removed
}

func writeHunk(sb *strings.Builder, ops []diffOp) {
	na, nb := 0, 0
	for _, op := range ops {
		if op.kind != opIns {
			na++
		}
		if op.kind != opDel {
			nb++
		}
	}
	fmt.Fprintf(sb, "@@ -%s +%s @@\n", hunkRange(ops[0].a, na), hunkRange(ops[0].b, nb))
	for _, op := range ops {
		sb.WriteByte(byte(op.kind))
		sb.WriteString(op.line)
		if !strings.HasSuffix(op.line, "\n") {
			sb.WriteString("\n\\ No newline at end of file\n")
		}
	}
}

// hunkRange prints a range the way GNU diff does: the count is left out
// when it is one, and an empty range names the line before it.
func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start-1)
	case 1:
		return fmt.Sprintf("%d", start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}
