package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// failoverMargin is what the failover test allows past the lease for the
// surviving replica to notice the expiry (its repair loop ticks every
// quarter lease), close the run and wake its followers, on a loaded
// 2-core machine.
const failoverMargin = 5 * time.Second

// seenEvent is an event a client received, and when.
type seenEvent struct {
	ev *agentdv1.AgentEvent
	at time.Time
}

// A client streams a paced run on replica A while a second client follows
// it through replica B; A is killed mid-stream. Within the lease and a
// margin B closes the run as interrupted: the client on B gets the run's
// events in seq order, each once, exactly as a replay from seq 0 gives
// them afterwards, and then the agent_end, whose seq follows every seq
// either client saw (the only gap of the log, right before it). A new
// Prompt through B is accepted within the same bound.
func TestFailoverOfAStreamingRun(t *testing.T) {
	_, ps := startReplicas(t, 2)
	a, b := ps[0].client(), ps[1].client()
	// 1300 tokens at 100 per second: the answer streams for about 13 s,
	// far longer than the test waits before the kill.
	answer := &agentdv1.AssistantMessage{Content: texts(strings.Repeat("the default port is 3000. ", 200))}
	id := createSession(t, a, &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{
		Responses: []*agentdv1.AssistantMessage{answer}, TokensPerSecond: 100}})
	prompt, err := a.Prompt(testCtx(t), &agentdv1.PromptRequest{SessionId: id, Content: texts("port?")})
	if err != nil {
		t.Fatal(err)
	}
	first, err := prompt.Recv()
	if err != nil {
		t.Fatal(err)
	}
	runID := first.GetRunId()

	// The client on A reads its stream until the kill breaks it.
	var mu sync.Mutex
	onA := []*agentdv1.AgentEvent{first}
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		for {
			ev, err := prompt.Recv()
			if err != nil {
				return
			}
			mu.Lock()
			onA = append(onA, ev)
			mu.Unlock()
		}
	}()
	// The client on B follows the run from its start.
	follow, err := b.Attach(testCtx(t), &agentdv1.AttachRequest{SessionId: id, RunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	var onB []seenEvent
	deltas := make(chan struct{}, 1)
	bDone := make(chan error, 1)
	go func() {
		for {
			ev, err := follow.Recv()
			if err != nil {
				bDone <- err
				return
			}
			mu.Lock()
			onB = append(onB, seenEvent{ev, time.Now()})
			mu.Unlock()
			if ev.GetMessageUpdate().GetTextDelta() != nil {
				select {
				case deltas <- struct{}{}:
				default:
				}
			}
		}
	}()
	// Mid-stream: B's client has had deltas for half a second (two of
	// A's batches) before A dies.
	select {
	case <-deltas:
	case err := <-bDone:
		t.Fatalf("the stream on B ended before any delta: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no delta reached the client on B in 30 s")
	}
	time.Sleep(500 * time.Millisecond)

	bound := testLease + failoverMargin
	killed := time.Now()
	ps[0].kill()
	<-aDone

	// A new Prompt through B, tried until B no longer sees the run active.
	type accepted struct {
		after    time.Duration
		tries    int
		evs      []*agentdv1.AgentEvent
		err      error
		promptID string
	}
	promptDone := make(chan accepted, 1)
	go func() {
		var r accepted
		for {
			r.tries++
			stream, err := b.Prompt(testCtx(t), &agentdv1.PromptRequest{SessionId: id, Content: texts("still there?")})
			var ev *agentdv1.AgentEvent
			if err == nil {
				ev, err = stream.Recv()
			}
			if err == nil {
				r.after = time.Since(killed)
				r.promptID = ev.GetRunId()
				// Accepted: stop the new run, whose answer is the paced
				// one again (the interrupted answer was never stored).
				if _, err := b.Abort(testCtx(t), &agentdv1.AbortRequest{SessionId: id}); err != nil {
					r.err = fmt.Errorf("abort the new run: %w", err)
				}
				rest, err := drain(stream, nil)
				r.evs = append([]*agentdv1.AgentEvent{ev}, rest...)
				if r.err == nil {
					r.err = err
				}
				promptDone <- r
				return
			}
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "is already running run") || time.Since(killed) > bound {
				r.err, r.after = err, time.Since(killed)
				promptDone <- r
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	var endSeen time.Duration
	select {
	case err := <-bDone:
		mu.Lock()
		n := len(onB)
		if n > 0 && onB[n-1].ev.GetAgentEnd() != nil {
			endSeen = onB[n-1].at.Sub(killed)
		}
		mu.Unlock()
		if !errors.Is(err, io.EOF) {
			t.Fatalf("the stream on B after the kill: %v", err)
		}
		if endSeen == 0 {
			t.Fatalf("the stream on B ended without agent_end")
		}
	case <-time.After(bound + 30*time.Second):
		t.Fatalf("the stream on B did not end within %v of the kill", bound+30*time.Second)
	}
	mu.Lock()
	live := onB
	fromA := onA
	mu.Unlock()
	end := live[len(live)-1].ev.GetAgentEnd()
	if end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED {
		t.Fatalf("the run ended %v %q, want INTERRUPTED", end.GetOutcome(), end.GetErrorMessage())
	}
	if endSeen > bound {
		t.Fatalf("the client on B saw agent_end %v after the kill, more than the lease (%v) + %v", endSeen, testLease, failoverMargin)
	}
	if log := ps[1].log.String(); !strings.Contains(log, `msg="closed an interrupted run"`) || !strings.Contains(log, "run="+runID) {
		t.Fatalf("replica B's log does not say it closed run %s:\n%s", runID, log)
	}

	// The stored log: 1..k without a gap, then the repair's agent_end past
	// every seq that streamed on either replica.
	replay, err := drain(b.Attach(testCtx(t), &agentdv1.AttachRequest{SessionId: id, RunId: runID, AfterSeq: 0}))
	if err != nil {
		t.Fatalf("replay through B: %v", err)
	}
	if err := checkRun(replay); err != nil {
		t.Fatalf("replay: %v", err)
	}
	stored := replay[:len(replay)-1]
	for i, ev := range stored {
		if ev.GetSeq() != uint64(i)+1 {
			t.Fatalf("replay: event %d has seq %d: a gap among the stored events", i, ev.GetSeq())
		}
	}
	closing := replay[len(replay)-1]
	maxA := fromA[len(fromA)-1].GetSeq()
	if closing.GetSeq() <= maxA {
		t.Fatalf("agent_end has seq %d; the client on A saw seq %d", closing.GetSeq(), maxA)
	}
	// The client on B: strictly increasing, no duplicate, and event for
	// event the replay.
	beforeKill := 0
	for i, s := range live {
		if i > 0 && s.ev.GetSeq() <= live[i-1].ev.GetSeq() {
			t.Fatalf("the client on B got seq %d after seq %d", s.ev.GetSeq(), live[i-1].ev.GetSeq())
		}
		if s.at.Before(killed) {
			beforeKill++
		}
	}
	if len(live) != len(replay) {
		t.Fatalf("the client on B got %d events, the replay has %d", len(live), len(replay))
	}
	for i := range live {
		if !proto.Equal(live[i].ev, replay[i]) {
			t.Fatalf("event %d on B differs from the replay's:\n%v\n%v", i+1, live[i].ev, replay[i])
		}
	}
	if beforeKill == 0 || live[beforeKill-1].ev.GetAgentEnd() != nil {
		t.Fatalf("the client on B got %d events before the kill", beforeKill)
	}
	// What A streamed and B's store lost is the gap: a seq never names two
	// events.
	for _, ev := range fromA {
		if ev.GetSeq() <= uint64(len(stored)) && !proto.Equal(ev, stored[ev.GetSeq()-1]) {
			t.Fatalf("seq %d streamed on A differs from the stored one:\n%v\n%v", ev.GetSeq(), ev, stored[ev.GetSeq()-1])
		}
	}

	r := <-promptDone
	if r.err != nil {
		t.Fatalf("Prompt through B after the kill (try %d, %v after it): %v", r.tries, r.after, r.err)
	}
	if r.after > bound {
		t.Fatalf("Prompt through B was accepted %v after the kill, more than the lease (%v) + %v", r.after, testLease, failoverMargin)
	}
	if r.promptID == runID || r.evs[0].GetSeq() != 1 || r.evs[len(r.evs)-1].GetAgentEnd() == nil {
		t.Fatalf("the new Prompt's run %s: first seq %d, last event %v", r.promptID, r.evs[0].GetSeq(), r.evs[len(r.evs)-1])
	}
	users := 0
	for _, e := range transcript(t, b, id) {
		if e.GetMessage().GetUser() != nil {
			users++
		}
	}
	if users != 2 {
		t.Fatalf("the transcript holds %d prompts, want 2 (the refused tries store nothing)", users)
	}
	t.Logf("lease %v: the client on B got %d events before the kill (A streamed %d, %d stored), agent_end (seq %d) %v after the kill; "+
		"a new Prompt through B was accepted %v after the kill (try %d)",
		testLease, beforeKill, len(fromA), len(stored), closing.GetSeq(), endSeen.Round(time.Millisecond), r.after.Round(time.Millisecond), r.tries)
}
