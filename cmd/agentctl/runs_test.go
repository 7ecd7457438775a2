package main

import (
	"strings"
	"testing"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/service/servicetest"
)

func TestRunsCommands(t *testing.T) {
	addr := servicetest.Start(t, agent.Options{})
	_, out, _ := ctl(t, addr, "sessions", "create", "--faux-echo")
	id := strings.TrimSpace(out)
	for _, p := range []string{"one", "two"} {
		if code, _, stderr := ctl(t, addr, "prompt", id, p); code != 0 {
			t.Fatalf("prompt: %d %s", code, stderr)
		}
	}
	code, out, stderr := ctl(t, addr, "runs", "list", id)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.Contains(lines[0], "COMPLETED") {
		t.Fatalf("runs list: %d %q %s", code, out, stderr)
	}
	newest := strings.Fields(lines[0])[0]
	if code, out, _ := ctl(t, addr, "runs", "list", id, "--limit", "1"); code != 0 || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, newest) {
		t.Fatalf("runs list --limit 1: %d %q", code, out)
	}
	if code, out, _ := ctl(t, addr, "runs", "list", id, "--outcome", "error"); code != 0 || out != "" {
		t.Fatalf("runs list --outcome error: %d %q", code, out)
	}
	if code, out, _ := ctl(t, addr, "runs", "list", id, "--metadata", "job="); code != 0 || out != "" {
		t.Fatalf("runs list --metadata: %d %q", code, out)
	}
	if code, out, _ := ctl(t, addr, "--json", "runs", "list", id, "--outcome", "completed"); code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"outcome":"RUN_OUTCOME_COMPLETED"`) {
		t.Fatalf("runs list --json: %d %q", code, out)
	}
	code, out, stderr = ctl(t, addr, "runs", "show", id, newest)
	if code != 0 || !strings.Contains(out, "outcome:  COMPLETED") || !strings.Contains(out, "method:   prompt") || !strings.Contains(out, "usage:") {
		t.Fatalf("runs show: %d %q %s", code, out, stderr)
	}
	for _, args := range [][]string{
		{"runs", "show", id, "run-nope"},
		{"runs", "list", id, "--outcome", "bogus"},
		{"runs", "list", id, "--after", "yesterday"},
		{"runs", "list", id, "--metadata", "bad key=1"},
	} {
		if code, _, stderr := ctl(t, addr, args...); code != 1 || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
}
