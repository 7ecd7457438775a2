package service_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/faux"
	"github.com/agentd/agentd/service"
)

// flakyModels is a ModelResolver with one model, "test/flaky", that fails
// with a rate limit on its first call and then answers.
type flakyModels struct{ calls atomic.Int32 }

func (f *flakyModels) Resolve(ref *agentdv1.ModelRef) (provider.Model, provider.StreamFunc, error) {
	model := provider.Model{Provider: "test", ID: "flaky", API: "faux"}
	switch {
	case ref.GetProvider() != "test" || ref.GetId() != "flaky":
		return provider.Model{}, nil, errors.New("unknown model")
	}
	return model, func(ctx context.Context, m provider.Model, c *agentdv1.Context, o provider.Options) provider.Stream {
		if f.calls.Add(1) == 1 {
			return faux.New(faux.Options{}, faux.Reply(faux.Errored("429 rate_limit_error: Too many requests"))).Stream(ctx, m, c, o)
		}
		return faux.New(faux.Options{}, faux.Reply(faux.Message(faux.Text("answer after retry")))).Stream(ctx, m, c, o)
	}, nil
}

func (f *flakyModels) List() []*agentdv1.Model {
	return []*agentdv1.Model{{Ref: &agentdv1.ModelRef{Provider: "test", Id: "flaky"}, Configured: true}}
}

// Continue end to end: after a run ends in ERROR, Continue retries the
// call: the model would see the prompt last, since the failed answer is
// left out (it used to be refused with "Cannot continue from message role:
// assistant"). Retries and Continue's decision are tested in agent.
func TestContinueAfterAFailedRun(t *testing.T) {
	h := newHarness(t, agent.Options{Models: &flakyModels{}, Retry: provider.RetryPolicy{MaxRetries: -1}}, service.ServerOptions{})
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
	if got := messageKinds(h.transcript(id)); got != "user assistant assistant" {
		t.Fatalf("transcript %q", got)
	}
	// Now the answer is last: Continue is refused as before.
	stream, err = h.client.Continue(h.ctx(), &agentdv1.ContinueRequest{SessionId: id})
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.FailedPrecondition, "Cannot continue from message role: assistant")
}
