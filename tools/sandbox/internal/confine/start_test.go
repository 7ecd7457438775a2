//go:build linux

package confine_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/tools/sandbox/internal/confine"
)

// TestHelperStartsBeforeAgentdInitializes: agentd's binary started as the
// helper reaches this package's init before most of agentd's packages
// initialize, so a confined command does not wait for agentd's start-up.
// A dependency of this package that Go initializes late (path/filepath,
// runtime/debug did) makes the helper wait for over half of them.
func TestHelperStartsBeforeAgentdInitializes(t *testing.T) {
	bin := agentdBinary(t)
	initialized := func(args ...string) []string {
		t.Helper()
		var stderr bytes.Buffer
		cmd := &exec.Cmd{Path: bin, Args: args, Env: []string{"GODEBUG=inittrace=1"}, Stderr: &stderr}
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s as %q: %v\n%s", bin, args, err, stderr.String())
		}
		var pkgs []string
		for line := range strings.Lines(stderr.String()) {
			if f := strings.Fields(line); len(f) > 2 && f[0] == "init" {
				pkgs = append(pkgs, f[1])
			}
		}
		return pkgs
	}
	all := initialized("agentd", "--version")
	before := initialized(confine.HolderName) // no stdin: it exits at once
	if len(all) == 0 {
		t.Fatal("GODEBUG=inittrace=1 printed nothing")
	}
	if 2*len(before) >= len(all) {
		t.Errorf("the helper starts after %d of the %d packages a start initializes", len(before), len(all))
	}
	for _, p := range before {
		if strings.HasPrefix(p, "github.com/agentd/agentd/") {
			t.Errorf("agentd's package %s initializes before the helper starts", p)
		}
	}
}

// agentdBinary is AGENTD_BIN, or agentd built for this test.
func agentdBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("AGENTD_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "agentd")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/agentd/agentd/cmd/agentd").CombinedOutput(); err != nil {
		t.Fatalf("go build agentd: %v\n%s", err, out)
	}
	return bin
}
