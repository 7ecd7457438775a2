package persistence

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// collapseAll is what a preview is, computed the plain way over the whole
// text.
func collapseAll(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		s = string(r[:max-1]) + "…"
	}
	return s
}

func FuzzOneLine(f *testing.F) {
	for _, s := range []string{"", " ", "a", " a  b\t\nc ", strings.Repeat("word ", 40), strings.Repeat("é", 130), "x" + strings.Repeat(" ", 200) + "y"} {
		f.Add(s, 120)
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		if !utf8.ValidString(s) || max < 2 || max > 500 {
			t.Skip()
		}
		if got, want := oneLine(s, max), collapseAll(s, max); got != want {
			t.Fatalf("oneLine(%q, %d) = %q, want %q", s, max, got, want)
		}
	})
}

func TestOneLineMatchesCollapsingEverything(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "é", "漢", " ", "\t", "\n", "\u00a0", "x"}
	for range 20000 {
		var b strings.Builder
		for range r.IntN(300) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		s, max := b.String(), 2+r.IntN(130)
		if got, want := oneLine(s, max), collapseAll(s, max); got != want {
			t.Fatalf("oneLine(%q, %d) = %q, want %q", s, max, got, want)
		}
	}
}

// A preview of a long answer reads only its start.
func BenchmarkPreviewLongAnswer(b *testing.B) {
	long := strings.Repeat("the quick brown fox jumps over the lazy dog\n", 40000) // 1.7 MB
	b.ReportAllocs()
	for b.Loop() {
		_ = oneLine(prefix(long), MaxPreviewRunes)
	}
}
