package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service/servicetest"
)

// Ctrl-C (SIGINT) on agentctl prompt aborts the run: agentctl says so and
// exits 3, as for any aborted run, and agentd records the run as aborted.
func TestPromptInterruptedAbortsTheRun(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "agentctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build agentctl: %v\n%s", err, out)
	}
	addr := servicetest.Start(t, agent.Options{})
	c := policyClient(t, addr)
	ctx := context.Background()
	// An echo paced at 5 tokens a second: the run lasts long enough to be
	// interrupted.
	resp, err := c.CreateSession(ctx, &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true, TokensPerSecond: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetSession().GetId()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "--addr", addr, "prompt", id, strings.Repeat("a long prompt to echo slowly ", 20))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s, err := c.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: id})
		if err != nil {
			t.Fatal(err)
		}
		if s.GetSession().GetState() == agentdv1.SessionState_SESSION_STATE_RUNNING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run never started")
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("agentctl prompt after SIGINT: %v, want exit 3\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if got := stderr.String(); !strings.Contains(got, "interrupted: the run was aborted") || strings.Contains(got, "context canceled") {
		t.Fatalf("stderr after SIGINT = %q, want it to say the run was aborted", got)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		runs, err := c.ListRuns(ctx, &agentdv1.ListRunsRequest{SessionId: id})
		if err != nil {
			t.Fatal(err)
		}
		if len(runs.GetRuns()) == 1 && runs.GetRuns()[0].GetOutcome() == agentdv1.RunOutcome_RUN_OUTCOME_ABORTED {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run was not recorded as aborted: %v", runs.GetRuns())
		}
	}
}
