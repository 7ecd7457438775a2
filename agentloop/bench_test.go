package agentloop_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider/faux"
)

// countingSink counts events and drops them, like a sink that forwards to a
// stream and keeps nothing.
type countingSink struct{ events int }

func (c *countingSink) sink(_ context.Context, _ *agentdv1.AgentEvent) error {
	c.events++
	return nil
}

// streamRun runs one prompt whose answer streams exactly `deltas` text
// deltas (one token of four characters each), and returns the event count.
func streamRun(tb testing.TB, deltas int) int {
	p := faux.New(faux.Options{MinTokenSize: 1, MaxTokenSize: 1}, faux.Reply(faux.Message(faux.Text(strings.Repeat("abcd", deltas)))))
	s := &countingSink{}
	if _, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{}, cfgFor(p), s.sink); err != nil {
		tb.Fatal(err)
	}
	return s.events
}

// benchStream reports ns/event and allocs/delta for one streamed answer.
func benchStream(b *testing.B, deltas int) float64 {
	b.ReportAllocs()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	events, runs := 0, 0
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		events += streamRun(b, deltas)
		runs++
	}
	elapsed := time.Since(start)
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	perEvent := float64(elapsed.Nanoseconds()) / float64(events)
	b.ReportMetric(perEvent, "ns/event")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/(float64(runs)*float64(deltas)), "allocs/delta")
	return perEvent
}

// (a) One prompt streaming 10,000 text deltas.
func BenchmarkStream10kDeltas(b *testing.B) {
	benchStream(b, 10_000)
}

// (c) One prompt streaming 80,000 deltas; also measures 10k runs in the same
// process and reports the per-event ratio 80k/10k (target ≤ 1.2: linear).
func BenchmarkStream80kDeltas(b *testing.B) {
	per80 := benchStream(b, 80_000)
	// Same number of events for the 10k reference: 8 runs per 80k run.
	n := 8 * b.N
	if n < 16 {
		n = 16
	}
	streamRun(b, 10_000) // warm up
	events := 0
	start := time.Now()
	for range n {
		events += streamRun(b, 10_000)
	}
	per10 := float64(time.Since(start).Nanoseconds()) / float64(events)
	b.ReportMetric(per10, "ns/event@10k")
	b.ReportMetric(per80/per10, "ratio80k/10k")
}

// (b) 200 tool-call turns, then a final answer. The "clone" variant sets a
// TransformContext, which makes the loop deep-copy the context before every
// model call (the fail-safe), to show what that protection costs.
func BenchmarkToolTurns200(b *testing.B) {
	for _, variant := range []string{"plain", "clone"} {
		b.Run(variant, func(b *testing.B) {
			tool := newTool(b, "read_file", `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`,
				func(_ context.Context, call agentloop.Call) (agentloop.Result, error) {
					return textResult("ok " + call.Args.Fields["path"].GetStringValue()), nil
				})
			tools := toolSet(b, tool)
			responses := make([]faux.Response, 0, 201)
			for i := range 200 {
				responses = append(responses, faux.Reply(faux.Message(faux.Text("reading"), faux.ToolCall("call_"+string(rune('a'+i%26)), "read_file", map[string]any{"path": "f.txt"}))))
			}
			responses = append(responses, faux.Reply(faux.Message(faux.Text("done"))))
			b.ReportAllocs()
			events := 0
			start := time.Now()
			for b.Loop() {
				p := faux.New(faux.Options{}, responses...)
				cfg := cfgFor(p)
				if variant == "clone" {
					cfg.TransformContext = func(_ context.Context, m []*agentdv1.AgentMessage) ([]*agentdv1.AgentMessage, error) { return m, nil }
				}
				s := &countingSink{}
				if _, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{Tools: tools}, cfg, s.sink); err != nil {
					b.Fatal(err)
				}
				events += s.events
			}
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(events), "ns/event")
		})
	}
}
