package service_test

import (
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/persistence/postgres/pgtest"
	"github.com/agentd/agentd/service"
)

// askSession creates a session whose model first calls the client tool
// "ask" (answered only when the test says so), then answers responses in
// order, then echoes the last user message.
func askSession(t *testing.T, h *harness, responses ...*agentdv1.AssistantMessage) string {
	t.Helper()
	return h.createSession(askConfig(t, responses...))
}

func askConfig(t *testing.T, responses ...*agentdv1.AssistantMessage) *agentdv1.SessionConfig {
	t.Helper()
	schema := mustStruct(t, map[string]any{"type": "object"})
	return &agentdv1.SessionConfig{
		Tools: []*agentdv1.Tool{{Name: "ask", Description: "asks the user", Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT, Parameters: schema}},
		Faux:  &agentdv1.FauxScript{Echo: true, Responses: append([]*agentdv1.AssistantMessage{toolCallAnswer(t, "c1", "ask", map[string]any{})}, responses...)},
	}
}

// startWaiting prompts sessionID and reads the stream until the run waits
// for the client tool; it returns the stream and the run's id.
func startWaiting(t *testing.T, client agentdv1.AgentServiceClient, h *harness, sessionID, text string) (grpc.ServerStreamingClient[agentdv1.AgentEvent], string) {
	t.Helper()
	stream, err := client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: sessionID, Content: texts(text)})
	if err != nil {
		t.Fatal(err)
	}
	evs := recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetToolCallRequested() != nil })
	return stream, evs[0].GetRunId()
}

// busyPrompt sends a prompt with a busy policy.
func busyPrompt(t *testing.T, client agentdv1.AgentServiceClient, h *harness, sessionID, text string, policy agentdv1.BusyPolicy, requestID string) grpc.ServerStreamingClient[agentdv1.AgentEvent] {
	t.Helper()
	stream, err := client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: sessionID, Content: texts(text), IfBusy: policy, RequestId: requestID})
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// queuedShows reports whether ev is a queue_update showing text.
func queuedShows(ev *agentdv1.AgentEvent, text string) bool {
	q := ev.GetQueueUpdate()
	if q == nil {
		return false
	}
	for _, m := range append(q.GetSteering(), q.GetFollowUp()...) {
		if blocksText(m.GetUser().GetContent()) == text {
			return true
		}
	}
	return false
}

// userTexts are the texts of the transcript's user messages, in order.
func userTexts(entries []*agentdv1.Entry) []string {
	var out []string
	for _, e := range entries {
		if u := e.GetMessage().GetUser(); u != nil {
			out = append(out, blocksText(u.GetContent()))
		}
	}
	return out
}

// ends returns the agent_end events of evs.
func ends(evs []*agentdv1.AgentEvent) []*agentdv1.AgentEvent {
	var out []*agentdv1.AgentEvent
	for _, ev := range evs {
		if ev.GetAgentEnd() != nil {
			out = append(out, ev)
		}
	}
	return out
}

// delivered reports whether evs start text as a user message.
func delivered(evs []*agentdv1.AgentEvent, text string) bool {
	return slices.ContainsFunc(evs, func(ev *agentdv1.AgentEvent) bool {
		return blocksText(ev.GetMessageStart().GetMessage().GetUser().GetContent()) == text
	})
}

func submitAsk(t *testing.T, client agentdv1.AgentServiceClient, h *harness, sessionID, callID string) {
	t.Helper()
	if _, err := client.SubmitToolResult(h.ctx(), &agentdv1.SubmitToolResultRequest{SessionId: sessionID, ToolCallId: callID, Content: texts("answered")}); err != nil {
		t.Fatal(err)
	}
}

// ENQUEUE and STEER put the prompt into the active run, and the prompt's
// stream follows that run from then on to its end: the client sees its
// message delivered (after the tool batch for STEER, when the model
// would stop for ENQUEUE) and the run's one agent_end.
func TestBusyPolicyQueuesIntoTheActiveRun(t *testing.T) {
	for _, tc := range []struct {
		policy agentdv1.BusyPolicy
		users  []string // the transcript's user messages afterwards
	}{
		{agentdv1.BusyPolicy_BUSY_POLICY_ENQUEUE, []string{"go", "later"}},
		{agentdv1.BusyPolicy_BUSY_POLICY_STEER, []string{"go", "later"}},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			h := newHarness(t, agent.Options{}, service.ServerOptions{})
			id := askSession(t, h, textAnswer("first done"))
			first, runID := startWaiting(t, h.client, h, id, "go")
			queued := busyPrompt(t, h.client, h, id, "later", tc.policy, "")
			seen := recvUntil(t, queued, func(ev *agentdv1.AgentEvent) bool { return queuedShows(ev, "later") })
			if q := seen[len(seen)-1].GetQueueUpdate(); (len(q.GetSteering()) == 1) != (tc.policy == agentdv1.BusyPolicy_BUSY_POLICY_STEER) {
				t.Fatalf("queue_update %v for %v", q, tc.policy)
			}
			submitAsk(t, h.client, h, id, "c1")
			rest, err := drain(queued)
			if err != nil {
				t.Fatal(err)
			}
			evs := append(seen, rest...)
			for _, ev := range evs {
				if ev.GetRunId() != runID {
					t.Fatalf("the queued prompt's stream carries run %q, want the active run %q (%s)", ev.GetRunId(), runID, kinds(evs))
				}
			}
			if e := ends(evs); len(e) != 1 || e[0].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED || !delivered(evs, "later") {
				t.Fatalf("the queued prompt's stream: %s", kinds(evs))
			}
			if _, err := drain(first); err != nil {
				t.Fatal(err)
			}
			entries := h.transcript(id)
			if got := userTexts(entries); !slices.Equal(got, tc.users) {
				t.Fatalf("user messages %q, want %q", got, tc.users)
			}
			// Steering arrives right after the tool batch; a follow-up only
			// once the model would stop.
			kinds := testkit.MessageKinds(entries)
			want := map[agentdv1.BusyPolicy]string{
				agentdv1.BusyPolicy_BUSY_POLICY_STEER:   "user assistant tool_result user assistant",
				agentdv1.BusyPolicy_BUSY_POLICY_ENQUEUE: "user assistant tool_result assistant user assistant",
			}[tc.policy]
			if kinds != want {
				t.Fatalf("transcript %q, want %q", kinds, want)
			}
		})
	}
}

// A prompt queued into a run that ends before taking it (here: aborted
// while the model waits for a client tool) is not lost: it starts a run
// of its own, which its stream follows; the ended run's agent_end is not
// on that stream.
func TestBusyPolicyEnqueueStartsItsOwnRunWhenTheRunEndsFirst(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := askSession(t, h, textAnswer("first done"))
	first, runID := startWaiting(t, h.client, h, id, "go")
	queued := busyPrompt(t, h.client, h, id, "later", agentdv1.BusyPolicy_BUSY_POLICY_ENQUEUE, "")
	seen := recvUntil(t, queued, func(ev *agentdv1.AgentEvent) bool { return queuedShows(ev, "later") })
	if _, err := h.client.Abort(h.ctx(), &agentdv1.AbortRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	rest, err := drain(queued)
	if err != nil {
		t.Fatal(err)
	}
	evs := append(seen, rest...)
	e := ends(evs)
	if len(e) != 1 || e[0].GetRunId() == runID || e[0].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("want one agent_end, of a new run that completed: %s", kinds(evs))
	}
	own := e[0].GetRunId()
	if !slices.ContainsFunc(evs, func(ev *agentdv1.AgentEvent) bool { return ev.GetAgentStart() != nil && ev.GetRunId() == own }) || !delivered(evs, "later") {
		t.Fatalf("the prompt's own run is not on its stream: %s", kinds(evs))
	}
	firstEvs, _ := drain(first)
	if fe := ends(firstEvs); len(fe) != 1 || fe[0].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_ABORTED {
		t.Fatalf("the aborted run's stream: %s", kinds(firstEvs))
	}
	if got := userTexts(h.transcript(id)); !slices.Equal(got, []string{"go", "later"}) {
		t.Fatalf("user messages %q: the prompt must be stored once", got)
	}
}

// INTERRUPT aborts the active run while its tool runs (a client tool
// nobody answers), waits for its end and streams a run of its own. With
// a request id it is idempotent: a retry follows that run and never
// aborts it, while it runs and after it ended.
func TestBusyPolicyInterrupt(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	// The interrupting run waits for a tool of its own (c2), so a retry
	// arrives while it runs.
	id := askSession(t, h, toolCallAnswer(t, "c2", "ask", map[string]any{}), textAnswer("done"))
	first, runID := startWaiting(t, h.client, h, id, "go")
	interrupt := busyPrompt(t, h.client, h, id, "instead", agentdv1.BusyPolicy_BUSY_POLICY_INTERRUPT, "req-1")
	firstEvs, err := drain(first)
	if err != nil {
		t.Fatal(err)
	}
	if fe := ends(firstEvs); len(fe) != 1 || fe[0].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_ABORTED {
		t.Fatalf("the interrupted run's stream: %s", kinds(firstEvs))
	}
	evs := recvUntil(t, interrupt, func(ev *agentdv1.AgentEvent) bool { return ev.GetToolCallRequested() != nil })
	own := evs[0].GetRunId()
	if own == runID || evs[0].GetAgentStart() == nil || !delivered(evs, "instead") {
		t.Fatalf("the interrupting prompt's stream: %s (run %s, interrupted %s)", kinds(evs), own, runID)
	}
	retry := busyPrompt(t, h.client, h, id, "instead", agentdv1.BusyPolicy_BUSY_POLICY_INTERRUPT, "req-1")
	retried := recvUntil(t, retry, func(ev *agentdv1.AgentEvent) bool { return ev.GetToolCallRequested() != nil })
	if retried[0].GetRunId() != own {
		t.Fatalf("the retry follows run %q, want %q", retried[0].GetRunId(), own)
	}
	submitAsk(t, h.client, h, id, "c2")
	for _, s := range []grpc.ServerStreamingClient[agentdv1.AgentEvent]{interrupt, retry} {
		rest, err := drain(s)
		if err != nil {
			t.Fatal(err)
		}
		if e := ends(rest); len(e) != 1 || e[0].GetRunId() != own || e[0].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
			t.Fatalf("stream after the answer: %s", kinds(rest))
		}
	}
	after := promptEvents(t, busyPrompt(t, h.client, h, id, "instead", agentdv1.BusyPolicy_BUSY_POLICY_INTERRUPT, "req-1"))
	if e := ends(after); len(e) != 1 || e[0].GetRunId() != own {
		t.Fatalf("a retry after the end replays %s", kinds(after))
	}
	if got := userTexts(h.transcript(id)); !slices.Equal(got, []string{"go", "instead"}) {
		t.Fatalf("user messages %q", got)
	}
}

// While the session is idle every policy simply starts a run; REJECT
// (and no policy) refuses a busy session as before.
func TestBusyPolicyIdleAndReject(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := askSession(t, h, textAnswer("first done"))
	for _, p := range []agentdv1.BusyPolicy{agentdv1.BusyPolicy_BUSY_POLICY_ENQUEUE, agentdv1.BusyPolicy_BUSY_POLICY_STEER, agentdv1.BusyPolicy_BUSY_POLICY_INTERRUPT} {
		s := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
		evs := promptEvents(t, busyPrompt(t, h.client, h, s, "hello", p, ""))
		if e := ends(evs); len(e) != 1 || e[0].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
			t.Fatalf("%v on an idle session: %s", p, kinds(evs))
		}
	}
	first, _ := startWaiting(t, h.client, h, id, "go")
	for _, p := range []agentdv1.BusyPolicy{agentdv1.BusyPolicy_BUSY_POLICY_UNSPECIFIED, agentdv1.BusyPolicy_BUSY_POLICY_REJECT} {
		_, err := drain(busyPrompt(t, h.client, h, id, "no", p, ""))
		wantCode(t, err, codes.FailedPrecondition, "already running")
		wantReasonName(t, err, "SESSION_BUSY")
	}
	submitAsk(t, h.client, h, id, "c1")
	if _, err := drain(first); err != nil {
		t.Fatal(err)
	}
}

// Concurrent ENQUEUE prompts into one run are each delivered once.
func TestBusyPolicyConcurrentEnqueues(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := askSession(t, h, textAnswer("first done"))
	first, runID := startWaiting(t, h.client, h, id, "go")
	const n = 4
	var wg sync.WaitGroup
	streams := make([]grpc.ServerStreamingClient[agentdv1.AgentEvent], n)
	for i := range n {
		streams[i] = busyPrompt(t, h.client, h, id, string(rune('a'+i)), agentdv1.BusyPolicy_BUSY_POLICY_ENQUEUE, "")
	}
	for i := range n {
		recvUntil(t, streams[i], func(ev *agentdv1.AgentEvent) bool { return queuedShows(ev, string(rune('a'+i))) })
	}
	submitAsk(t, h.client, h, id, "c1")
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			evs, err := drain(streams[i])
			if err == nil && (len(ends(evs)) != 1 || ends(evs)[0].GetRunId() != runID) {
				t.Errorf("stream %d: %s", i, kinds(evs))
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := drain(first); err != nil {
		t.Fatal(err)
	}
	got := userTexts(h.transcript(id))
	slices.Sort(got)
	if want := []string{"a", "b", "c", "d", "go"}; !slices.Equal(got, want) {
		t.Fatalf("user messages %q, want %q", got, want)
	}
}

func promptEvents(t *testing.T, s grpc.ServerStreamingClient[agentdv1.AgentEvent]) []*agentdv1.AgentEvent {
	t.Helper()
	evs, err := drain(s)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestBusyPolicyAcrossReplicas (PostgreSQL; skipped without a server, see
// pgtest): replica a runs the session's run; through replica b a steering
// message is queued and taken back with ClearQueue, an ENQUEUE prompt
// joins a's run and b's stream follows that run to its end, and an
// INTERRUPT prompt aborts a's next run and starts its own.
func TestBusyPolicyAcrossReplicas(t *testing.T) {
	dsn := pgtest.DSN(t)
	a := newHarnessOn(t, dsn, agent.Options{ReplicaID: "a"}, service.ServerOptions{})
	b := newHarnessOn(t, dsn, agent.Options{ReplicaID: "b"}, service.ServerOptions{})
	id := a.createSession(askConfig(t, textAnswer("first done"), textAnswer("later answer"), toolCallAnswer(t, "c3", "ask", map[string]any{})))
	first, runID := startWaiting(t, a.client, a, id, "go")

	if _, err := b.client.Steer(b.ctx(), &agentdv1.SteerRequest{SessionId: id, Content: texts("now")}); err != nil {
		t.Fatal(err)
	}
	cleared, err := b.client.ClearQueue(b.ctx(), &agentdv1.ClearQueueRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	if len(cleared.GetSteering()) != 1 || blocksText(cleared.GetSteering()[0].GetUser().GetContent()) != "now" || len(cleared.GetFollowUp()) != 0 {
		t.Fatalf("ClearQueue through replica b returned %v", cleared)
	}

	queued := busyPrompt(t, b.client, b, id, "later", agentdv1.BusyPolicy_BUSY_POLICY_ENQUEUE, "")
	seen := recvUntil(t, queued, func(ev *agentdv1.AgentEvent) bool { return queuedShows(ev, "later") })
	submitAsk(t, b.client, b, id, "c1")
	rest, err := drain(queued)
	if err != nil {
		t.Fatal(err)
	}
	evs := append(seen, rest...)
	if e := ends(evs); len(e) != 1 || e[0].GetRunId() != runID || !delivered(evs, "later") {
		t.Fatalf("replica b's stream of the prompt queued into a's run %s: %s", runID, kinds(evs))
	}
	if _, err := drain(first); err != nil {
		t.Fatal(err)
	}

	second, secondID := startWaiting(t, a.client, a, id, "again")
	interrupt := promptEvents(t, busyPrompt(t, b.client, b, id, "instead", agentdv1.BusyPolicy_BUSY_POLICY_INTERRUPT, ""))
	e := ends(interrupt)
	if len(e) != 1 || e[0].GetRunId() == secondID || e[0].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED || !delivered(interrupt, "instead") {
		t.Fatalf("replica b's interrupting prompt: %s", kinds(interrupt))
	}
	secondEvs, _ := drain(second)
	if se := ends(secondEvs); len(se) != 1 || se[0].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_ABORTED {
		t.Fatalf("a's interrupted run: %s", kinds(secondEvs))
	}
	if got := userTexts(a.transcript(id)); !slices.Equal(got, []string{"go", "later", "again", "instead"}) {
		t.Fatalf("user messages %q", got)
	}
}
