package agent

import (
	"testing"
	"time"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// BenchmarkWatchRunEvent is the watch hub's share of every streamed
// event: publishing a message_update with nobody watching, as a run does
// for each delta (the ring must keep it for cursors that resume later).
func BenchmarkWatchRunEvent(b *testing.B) {
	h := newWatchHub(0, 0, time.Now)
	r := &Run{sessionID: "s1", tenant: "acme", id: "run-1", labels: map[string]string{"app": "x"}}
	ev := &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_MessageUpdate{MessageUpdate: &agentdv1.MessageUpdate{
		Delta: &agentdv1.MessageUpdate_TextDelta{TextDelta: &agentdv1.TextDelta{Delta: "port 3000, "}}}}}
	b.ReportAllocs()
	for b.Loop() {
		h.runEvent(r, ev)
	}
}
