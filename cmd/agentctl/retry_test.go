package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/service/servicetest"
)

// A model call that fails once and is retried reads as one retry, not as
// a failure: the retry line names the error and the attempt, and no bare
// "error:" line precedes it.
func TestPromptShowsTheRetry(t *testing.T) {
	addr := servicetest.Start(t, agent.Options{Models: &testkit.FlakyModels{}, Retry: provider.RetryPolicy{BaseDelay: time.Millisecond}})
	resp, err := policyClient(t, addr).CreateSession(context.Background(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{
		Model: &agentdv1.ModelRef{Provider: "test", Id: "flaky"}}})
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr := ctl(t, addr, "prompt", resp.GetSession().GetId(), "hi")
	if code != 0 {
		t.Fatalf("prompt: %d %q %q", code, out, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "↻ model call failed (429 rate_limit_error") || !strings.Contains(lines[0], "retry 1 in ") ||
		lines[1] != testkit.FlakyAnswer || !strings.HasPrefix(lines[2], "[COMPLETED") {
		t.Fatalf("prompt's output is not the retry, the answer and the summary:\n%s", out)
	}
}

func TestErrorLine(t *testing.T) {
	for _, tt := range []struct {
		e    *agentdv1.AgentError
		want string
	}{
		{&agentdv1.AgentError{Stage: "provider_retry", Message: "model call failed (overloaded); retry 2 in 4s"}, "↻ model call failed (overloaded); retry 2 in 4s"},
		{&agentdv1.AgentError{Stage: "store", Message: "disk full", Fatal: true}, "error (store): disk full"},
	} {
		if got := errorLine(tt.e); got != tt.want {
			t.Errorf("errorLine(%v) = %q, want %q", tt.e, got, tt.want)
		}
	}
}
