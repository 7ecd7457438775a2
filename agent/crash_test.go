package agent_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/memory"
)

// crashingStore is a store whose event batches stop reaching the disk once
// crashed is set, as when agentd is killed between two batches: what the
// run streams from then on is never stored.
type crashingStore struct {
	*memory.Store
	crashed atomic.Bool
}

func (s *crashingStore) AppendEvents(ctx context.Context, runID string, events []persistence.Event) error {
	if s.crashed.Load() {
		return errors.New("killed")
	}
	return s.Store.AppendEvents(ctx, runID, events)
}

// A run killed while it streams loses the events of its last batch; the
// agent that repairs it ends its log after every seq a client may have
// seen, so a client attaching after the last event it got still gets the
// run's end (and a replay never shows another event under a seq it saw).
func TestAttachAfterACrashGetsTheEndOfTheRun(t *testing.T) {
	mem := memory.New()
	disk := &crashingStore{Store: mem}
	working := make(chan struct{})
	wait := testkit.ReadOnlyTool{FuncTool: agentloop.FuncTool{
		Def: &agentdv1.Tool{Name: "wait", Description: "Work until stopped.", Parameters: mustStruct(t, map[string]any{"type": "object"})},
		Fn: func(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
			// The run's messages are stored; from here on, its events stream
			// but never reach the store.
			disk.crashed.Store(true)
			for i := range 5 { // more than the repair writes
				call.Update(texts(fmt.Sprint("working ", i)), nil)
			}
			close(working)
			<-ctx.Done()
			return agentloop.Result{}, ctx.Err()
		},
	}}
	opts := agent.Options{Tools: []agentloop.Tool{wait}}
	crashed, err := agent.New(context.Background(), disk, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// What is left of the killed process: its writes all fail.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = crashed.Close(ctx)
	})
	h := &harness{t: t, store: mem, opts: opts, a: crashed}
	cfg := script(toolCall(t, "c1", "wait", map[string]any{}), text("done"))
	cfg.Tools = []*agentdv1.Tool{{Name: "wait"}}
	id := h.session(cfg)
	live := h.startRun(agent.StartRequest{SessionID: id, Prompt: user("go")}, true)
	updates := 0
	seen := live.until(func(ev *agentdv1.AgentEvent) bool {
		if ev.GetToolExecutionUpdate() != nil {
			updates++
		}
		return updates == 5
	})
	<-working
	highest := seen[len(seen)-1].GetSeq()

	// agentd is killed; the next one repairs the run.
	h.store = memory.Reopen(mem)
	h.start()
	t.Cleanup(h.stop)

	evs, err := h.attach(id, live.runID, highest, agent.FollowOptions{}).drain()
	if err != nil || len(evs) == 0 {
		t.Fatalf("Attach(after_seq %d) after the repair: %s, %v; want agent_end", highest, allKinds(evs), err)
	}
	end := evs[len(evs)-1]
	if end.GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED || end.GetSeq() <= highest {
		t.Fatalf("Attach(after_seq %d) ends with %s seq %d; want agent_end INTERRUPTED after seq %d", highest, allKinds(evs[len(evs)-1:]), end.GetSeq(), highest)
	}
	for _, ev := range evs {
		if ev.GetSeq() <= highest {
			t.Fatalf("Attach(after_seq %d) sent seq %d (%s)", highest, ev.GetSeq(), allKinds([]*agentdv1.AgentEvent{ev}))
		}
	}

	// A replay from the start agrees with what the client saw under every
	// seq both hold, and ends with the same agent_end.
	replay, err := h.attach(id, live.runID, 0, agent.FollowOptions{}).drain()
	if err != nil {
		t.Fatal(err)
	}
	bySeq := map[uint64]*agentdv1.AgentEvent{}
	for _, ev := range seen {
		bySeq[ev.GetSeq()] = ev
	}
	last := uint64(0)
	for _, ev := range replay {
		if ev.GetSeq() <= last {
			t.Fatalf("replay: seq %d after seq %d", ev.GetSeq(), last)
		}
		last = ev.GetSeq()
		if s := bySeq[ev.GetSeq()]; s != nil && allKinds([]*agentdv1.AgentEvent{s}) != allKinds([]*agentdv1.AgentEvent{ev}) {
			t.Fatalf("replay: seq %d is %s; the client saw %s under it", ev.GetSeq(), allKinds([]*agentdv1.AgentEvent{ev}), allKinds([]*agentdv1.AgentEvent{s}))
		}
	}
	if last != end.GetSeq() || replay[len(replay)-1].GetAgentEnd() == nil {
		t.Fatalf("replay ends with %s seq %d; want the agent_end of seq %d", allKinds(replay[len(replay)-1:]), last, end.GetSeq())
	}

	// Attach at the end sends nothing more; past it (a seq no stored event
	// has), the run's agent_end all the same.
	for _, tc := range []struct {
		after   uint64
		wantEnd bool
	}{
		{end.GetSeq(), false},
		{end.GetSeq() + 10, true},
	} {
		evs, err := h.attach(id, live.runID, tc.after, agent.FollowOptions{}).drain()
		if err != nil {
			t.Fatalf("Attach(after_seq %d): %v", tc.after, err)
		}
		if got := len(evs) == 1 && evs[0].GetAgentEnd() != nil && evs[0].GetSeq() == end.GetSeq(); got != tc.wantEnd || (!tc.wantEnd && len(evs) > 0) {
			t.Fatalf("Attach(after_seq %d) = %s; want agent_end: %v", tc.after, allKinds(evs), tc.wantEnd)
		}
	}
}

// reservationCounter counts the reservations a run's log writes beyond
// the one its start recorded.
type reservationCounter struct {
	*memory.Store
	reserves atomic.Int32
}

func (s *reservationCounter) ReserveEvents(ctx context.Context, runID string, through uint64) error {
	s.reserves.Add(1)
	return s.Store.ReserveEvents(ctx, runID, through)
}

// A run streams its first events under the reservation its start
// recorded: no write of its own stands between a prompt and its first
// event, and a short run never reserves again, while the store still
// knows every seq it may have streamed.
func TestRunStreamsUnderTheReservationOfItsStart(t *testing.T) {
	counted := &reservationCounter{Store: memory.New()}
	a, err := agent.New(context.Background(), counted, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	h := &harness{t: t, store: counted.Store, a: a}
	id := h.session(script(text("hello there")))
	runID, evs := h.prompt(id, "hi")
	if len(evs) < 3 {
		t.Fatalf("the run streamed %d events", len(evs))
	}
	if n := counted.reserves.Load(); n != 0 {
		t.Fatalf("a %d-event run reserved seqs %d times; want none beyond its start's", len(evs), n)
	}
	run, err := counted.GetRun(context.Background(), runID)
	if err != nil || run.ReservedSeq != persistence.StartReservedSeq || run.LastSeq != uint64(len(evs)) {
		t.Fatalf("stored run = %+v, %v; want ReservedSeq %d, LastSeq %d", run, err, persistence.StartReservedSeq, len(evs))
	}
}
