package service_test

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service"
)

// ClearQueue returns what waits for the active run and removes it: the
// run publishes its emptied queues and delivers none of it. A prompt
// queued with ENQUEUE whose message was cleared follows the run to its
// end and starts nothing: its message went back to ClearQueue's caller.
// An idle session has nothing queued.
func TestClearQueue(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := askSession(t, h, textAnswer("first done"))

	idle, err := h.client.ClearQueue(h.ctx(), &agentdv1.ClearQueueRequest{SessionId: id})
	if err != nil || len(idle.GetSteering())+len(idle.GetFollowUp()) != 0 {
		t.Fatalf("ClearQueue of an idle session: %v, %v", idle, err)
	}
	_, err = h.client.ClearQueue(h.ctx(), &agentdv1.ClearQueueRequest{SessionId: "0123456789abcdef"})
	wantCode(t, err, codes.NotFound, "0123456789abcdef")

	first, runID := startWaiting(t, h.client, h, id, "go")
	queued := busyPrompt(t, h.client, h, id, "later", agentdv1.BusyPolicy_BUSY_POLICY_ENQUEUE, "")
	seen := recvUntil(t, queued, func(ev *agentdv1.AgentEvent) bool { return queuedShows(ev, "later") })
	if _, err := h.client.Steer(h.ctx(), &agentdv1.SteerRequest{SessionId: id, Content: texts("now")}); err != nil {
		t.Fatal(err)
	}
	seen = append(seen, recvUntil(t, queued, func(ev *agentdv1.AgentEvent) bool { return queuedShows(ev, "now") })...)

	cleared, err := h.client.ClearQueue(h.ctx(), &agentdv1.ClearQueueRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	if len(cleared.GetSteering()) != 1 || blocksText(cleared.GetSteering()[0].GetUser().GetContent()) != "now" ||
		len(cleared.GetFollowUp()) != 1 || blocksText(cleared.GetFollowUp()[0].GetUser().GetContent()) != "later" {
		t.Fatalf("ClearQueue returned %v", cleared)
	}
	seen = append(seen, recvUntil(t, queued, func(ev *agentdv1.AgentEvent) bool {
		q := ev.GetQueueUpdate()
		return q != nil && len(q.GetSteering())+len(q.GetFollowUp()) == 0
	})...)
	again, err := h.client.ClearQueue(h.ctx(), &agentdv1.ClearQueueRequest{SessionId: id})
	if err != nil || len(again.GetSteering())+len(again.GetFollowUp()) != 0 {
		t.Fatalf("a second ClearQueue: %v, %v", again, err)
	}

	submitAsk(t, h.client, h, id, "c1")
	rest, err := drain(queued)
	if err != nil {
		t.Fatal(err)
	}
	evs := append(seen, rest...)
	if e := ends(evs); len(e) != 1 || e[0].GetRunId() != runID || delivered(evs, "later") || delivered(evs, "now") {
		t.Fatalf("the cleared prompt's stream: %s", kinds(evs))
	}
	if _, err := drain(first); err != nil {
		t.Fatal(err)
	}
	if got := userTexts(h.transcript(id)); !slices.Equal(got, []string{"go"}) {
		t.Fatalf("user messages %q: cleared messages were delivered", got)
	}
}
