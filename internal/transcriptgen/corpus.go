package transcriptgen

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// GoSourceCorpus is real text for transcripts: the Go standard library's
// net/http sources as tool output and their comments as prose, read from
// the GOROOT of the go command on PATH. Unlike the built-in vocabulary it
// compresses like what agents read and write.
func GoSourceCorpus() (*Corpus, error) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return nil, fmt.Errorf("no Go toolchain to take real text from: %w", err)
	}
	files, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "src", "net", "http", "*.go"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no net/http sources in GOROOT (%v)", err)
	}
	var code, prose strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		code.Write(src)
		for line := range strings.Lines(string(src)) {
			if c, ok := strings.CutPrefix(strings.TrimSpace(line), "// "); ok {
				prose.WriteString(c)
				prose.WriteString("\n")
			}
		}
	}
	return &Corpus{Prose: prose.String(), Code: code.String()}, nil
}
