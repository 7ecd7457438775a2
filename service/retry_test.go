package service_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/service"
)

// Continue end to end: after a run ends in ERROR, Continue retries the
// call: the model would see the prompt last, since the failed answer is
// left out (it used to be refused with "Cannot continue from message role:
// assistant"). Retries and Continue's decision are tested in agent.
func TestContinueAfterAFailedRun(t *testing.T) {
	h := newHarness(t, agent.Options{Models: &testkit.FlakyModels{}, Retry: provider.RetryPolicy{MaxRetries: -1}}, service.ServerOptions{})
	id := h.createSession(&agentdv1.SessionConfig{Model: &agentdv1.ModelRef{Provider: "test", Id: "flaky"}})
	evs := h.prompt(id, "hi")
	if end := evs[len(evs)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_ERROR {
		t.Fatalf("first run %v", end)
	}
	stream, err := h.client.Continue(h.ctx(), &agentdv1.ContinueRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	evs, err = drain(stream)
	if err != nil {
		t.Fatalf("Continue after an ERROR run: %v", err)
	}
	if end := evs[len(evs)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("Continue: %s %v", kinds(evs), end)
	}
	if got := testkit.MessageKinds(h.transcript(id)); got != "user assistant assistant" {
		t.Fatalf("transcript %q", got)
	}
	// Now the answer is last: Continue is refused as before.
	stream, err = h.client.Continue(h.ctx(), &agentdv1.ContinueRequest{SessionId: id})
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.FailedPrecondition, "Cannot continue from message role: assistant")
}
