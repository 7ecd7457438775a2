package agent

import (
	"fmt"
	"testing"
	"time"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// A watch of one session is not asked about other sessions' changes: with
// thousands of sessions open, a run's event costs the hub only its own
// session's watchers, and nothing at all to copy when none watches it.
func TestWatchOfOneSessionIsNotAskedAboutOthers(t *testing.T) {
	h := newWatchHub(0, 0, time.Now)
	asked := 0
	for i := range 10_000 {
		h.addLocked(&watcher{session: fmt.Sprint("idle-", i), ready: make(chan struct{}, 1),
			match: func(*Change) bool { asked++; return true }})
	}
	own := &watcher{session: "s1", ready: make(chan struct{}, 1), match: func(c *Change) bool { return c.SessionID == "s1" }}
	h.addLocked(own)
	r := &Run{sessionID: "s1", tenant: "acme", id: "run-1"}
	other := &Run{sessionID: "s2", tenant: "acme", id: "run-2"}
	ev := &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_MessageUpdate{MessageUpdate: &agentdv1.MessageUpdate{
		Delta: &agentdv1.MessageUpdate_TextDelta{TextDelta: &agentdv1.TextDelta{Delta: "hi"}}}}}

	h.runEvent(r, ev)
	if asked != 0 {
		t.Fatalf("the watchers of other sessions were asked %d times about one event of s1", asked)
	}
	if len(own.queue) != 1 || own.queue[0].Event != ev {
		t.Fatalf("the watcher of s1 holds %d changes; want the event", len(own.queue))
	}
	if allocs := testing.AllocsPerRun(100, func() { h.runEvent(other, ev) }); allocs != 0 {
		t.Fatalf("an event of an unwatched session allocated %.1f times; want none", allocs)
	}
	if asked != 0 || len(own.queue) != 1 {
		t.Fatalf("events of s2 reached the watchers: %d asked, s1's holds %d", asked, len(own.queue))
	}
	// A watcher of every session still sees them all.
	all := &watcher{ready: make(chan struct{}, 1), match: func(*Change) bool { return true }}
	h.addLocked(all)
	h.runEvent(other, ev)
	if len(all.queue) != 1 {
		t.Fatalf("the watcher of every session holds %d changes; want 1", len(all.queue))
	}
	h.dropLocked(own)
	if _, ok := h.bySession["s1"]; ok {
		t.Fatal("the session's watcher set outlived its last watcher")
	}
}
