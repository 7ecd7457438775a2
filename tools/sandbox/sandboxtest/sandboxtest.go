// Package sandboxtest gives tests a working tool sandbox, or skips them
// where the machine cannot confine (failing instead under CI=true, where
// confinement must work).
package sandboxtest

import (
	"os"
	"testing"

	"github.com/agentd/agentd/tools/sandbox"
)

// New returns a sandbox with opts that can confine commands. Without one
// the test is skipped, or fails when the environment variable CI is
// "true".
func New(t testing.TB, opts sandbox.Options) *sandbox.Sandbox {
	t.Helper()
	sb := sandbox.New(opts)
	t.Cleanup(func() { sb.Close() })
	if err := sb.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs the tool sandbox: %v", err)
		}
		t.Skipf("no tool sandbox on this machine: %v", err)
	}
	return sb
}
