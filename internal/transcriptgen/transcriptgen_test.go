package transcriptgen_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/internal/transcriptgen"
)

// TestCorpus checks that corpus text ends up in the entries, cut so that
// every entry still encodes (valid UTF-8 even where a window splits a
// multi-byte character), and that a seed always gives the same transcript.
func TestCorpus(t *testing.T) {
	tests := []struct {
		name   string
		corpus transcriptgen.Corpus
	}{
		{"ascii", transcriptgen.Corpus{Prose: "the quick brown fox\njumps over\n", Code: "func main() {\n\treturn\n}\n"}},
		{"multi-byte", transcriptgen.Corpus{Prose: strings.Repeat("héllo wörld ✓\n", 3), Code: strings.Repeat("// 日本語のコメント\nx := 1\n", 5)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gen := func() []byte {
				g := transcriptgen.New(42).WithCorpus(&tc.corpus)
				var all []byte
				for range 10 {
					b, err := proto.MarshalOptions{Deterministic: true}.Marshal(g.Next()) // Struct fields are maps
					if err != nil {
						t.Fatalf("entry does not encode: %v", err)
					}
					all = append(all, b...)
				}
				return all
			}
			first, second := gen(), gen()
			if string(first) != string(second) {
				t.Fatal("the same seed gave different transcripts")
			}
			firstCodeLine := strings.SplitN(tc.corpus.Code, "\n", 2)[0]
			firstProseWord := strings.Fields(tc.corpus.Prose)[0]
			if !strings.Contains(string(first), firstProseWord) || !strings.Contains(string(first), firstCodeLine) {
				t.Fatalf("transcript does not draw on the corpus (%q, %q)", firstProseWord, firstCodeLine)
			}
		})
	}
}
