package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
pkg: github.com/agentd/agentd/service
BenchmarkPromptStream/deltas=10000-2         	      13	  84765022 ns/op	         5.251 agentd-cpu-µs/event	         2.147 cpu-ratio-vs-bare	         2.000 procs	         0.6134 ratio-vs-bare
BenchmarkPromptStream/deltas=10000-2         	      12	  84765022 ns/op	         5.251 agentd-cpu-µs/event	         1.100 cpu-ratio-vs-bare	         2.000 procs	         0.9500 ratio-vs-bare
BenchmarkPromptStream/deltas=10000-2         	      12	  84765022 ns/op	         5.251 agentd-cpu-µs/event	         1.200 cpu-ratio-vs-bare	         2.000 procs	         0.9100 ratio-vs-bare
BenchmarkConcurrentSessions/engine=sqlite/paced-8         	       1	 581699590 ns/op	        91.78 first-event-p99-ms	        25.81 message-end-p99-ms	         8.000 procs	         1.197 rss-after/baseline	      1000 sessions
--- BENCH: BenchmarkConcurrentSessions/engine=sqlite/paced-2
    bench_test.go:669: *agentdv1.AgentEvent_AgentEnd: n=100 p50=2.6 p99=24.1 max=24.1
BenchmarkConcurrentSessions/engine=sqlite/unpaced-2                 	       1	 449230390 ns/op	       161.1 first-event-p99-ms	       122.2 message-end-p99-ms	         1.6 rss-after/baseline	         0.1970 events/s-vs-bare	 702.5 offered/delivered
pkg: github.com/agentd/agentd/cmd/agentd
BenchmarkRestore/context=compacted-2 	 5 	 24662193 ns/op 	 551.0 context-messages 	 24.02 first-GetContext-ms 	 10000 messages 	 264.2 pi-open+build-ms 	 223.5 pi-rss-MiB 	 2.000 procs 	 0.09090 restore-vs-pi 	 72.92 rss-MiB 	 0.3263 rss-vs-pi
BenchmarkRestore/context=whole-2 	 5 	 294232995 ns/op 	 10000 context-messages 	 300.4 first-GetContext-ms 	 10000 messages 	 240.3 pi-open+build-ms 	 243.8 pi-rss-MiB 	 2.000 procs 	 1.250 restore-vs-pi 	 131.6 rss-MiB 	 0.5399 rss-vs-pi
pkg: github.com/agentd/agentd/service
BenchmarkSessionLength/op=append-messages/messages=10-2         	       1	  17467303 ns/op	        10.00 messages	         1.000 x-vs-shortest	       909.7 µs-median
BenchmarkSessionLength/op=append-messages/messages=100000-2     	       1	  13679671 ns/op	    100000 messages	         1.406 x-vs-shortest	       764.7 µs-median
BenchmarkCompactedConversation-2   	       1	 976276279 ns/op	        81.00 compactions	         2.215 first50-ms-median	         1.550 last50-ms-median	         0.6998 last50/first50	         2.000 procs	       500.0 turns
pkg: github.com/agentd/agentd/cmd/agentd
BenchmarkAppendVsPi-2   	       3	2897047672 ns/op	        13.85 MiB-disk	         2.649 append-vs-pi	         0.8709 disk-vs-pi	     10000 messages	        15.91 pi-MiB-disk	        26.88 pi-µs/append	         2.000 procs	        71.21 µs/append
pkg: github.com/agentd/agentd/persistence/sqlite
BenchmarkAppend/sync=normal/text=realistic-2         	       1	 707860974 ns/op	        1.87 x-raw	     10000 messages
BenchmarkColdStart/db=empty-2         	      10	 135197849 ns/op	        88.24 binary-MiB	        40.31 init-ms	       131.8 ms-to-SERVING	         0 sessions
PASS
`

func TestTableJudgesEachFigureAgainstItsTarget(t *testing.T) {
	results, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 11 {
		t.Fatalf("parsed %d benchmarks, want 11 (runs of one name merged): %+v", len(results), results)
	}
	rows, missing := evaluate(targets(), results)
	type key struct{ bench, label string }
	got := map[key]row{}
	for _, r := range rows {
		got[key{r.bench, r.label}] = r
	}
	tests := []struct {
		bench, label, value, meets, procs string
	}{
		// Median of 0.6134, 0.95, 0.91.
		{"PromptStream/deltas=10000", "stream events/s vs bare gRPC", "0.91 (median of 3)", "yes", "2"},
		{"PromptStream/deltas=10000", "CPU per event vs bare gRPC", "1.20 (median of 3)", "yes", "2"},
		{"ConcurrentSessions/engine=sqlite/paced", "prompt to first event p99 (ms)", "91.8", "NO", "8"},
		{"ConcurrentSessions/engine=sqlite/paced", "message_end delivery p99 (ms)", "25.8", "yes", "8"},
		{"ConcurrentSessions/engine=sqlite/paced", "RSS after load / baseline", "1.20", "yes", "8"},
		{"ConcurrentSessions/engine=sqlite/unpaced", "RSS after load / baseline", "1.60", "NO", "?"},
		{"ConcurrentSessions/engine=sqlite/unpaced", "events/s vs bare gRPC to the same clients", "0.20", "—", "?"},
		{"ConcurrentSessions/engine=sqlite/unpaced", "events/s offered / delivered (above 1: saturated)", "702", "—", "?"},
		{"Restore/context=compacted", "first GetContext vs pi open+build", "0.09", "yes", "2"},
		{"Restore/context=compacted", "RSS holding the session vs pi", "0.33", "yes", "2"},
		{"Restore/context=whole", "first GetContext vs pi open+build", "1.25", "NO", "2"},
		{"Restore/context=whole", "RSS holding the session vs pi", "0.54", "yes", "2"},
		{"SessionLength/op=append-messages/messages=10", "one step vs the same step in the shortest session", "1.00", "yes", "?"},
		{"SessionLength/op=append-messages/messages=100000", "one step vs the same step in the shortest session", "1.41", "NO", "?"},
		{"CompactedConversation", "compacted conversation: last 50 turns vs first 50 (median)", "0.70", "yes", "2"},
		{"AppendVsPi", "one store append vs pi's appendMessage", "2.65", "NO", "2"},
		{"AppendVsPi", "bytes on disk vs pi's session file", "0.87", "NO", "2"},
		{"Append/sync=normal/text=realistic", "one store append vs raw SQLite doing the same work", "1.87", "NO", "?"},
		{"ColdStart/db=empty", "process start to health SERVING (ms)", "132", "NO", "?"},
		{"ColdStart/db=empty", "package initialization before main (ms)", "40.3", "—", "?"},
	}
	for _, tc := range tests {
		r, ok := got[key{tc.bench, tc.label}]
		if !ok {
			t.Errorf("no row for %s %q; rows %+v", tc.bench, tc.label, rows)
			continue
		}
		if r.value != tc.value || r.meets != tc.meets || r.procs != tc.procs {
			t.Errorf("%s %q = value %q meets %q procs %q; want %q %q %q", tc.bench, tc.label, r.value, r.meets, r.procs, tc.value, tc.meets, tc.procs)
		}
	}
	if r := got[key{"ConcurrentSessions/engine=sqlite/paced", "RSS after load / baseline"}]; r.scale != "1000 sessions" {
		t.Errorf("paced scale = %q, want the sessions it ran", r.scale)
	}
	// The unpaced run saturates the machine by design: its latencies are
	// not held to the paced targets.
	if _, ok := got[key{"ConcurrentSessions/engine=sqlite/unpaced", "message_end delivery p99 (ms)"}]; ok {
		t.Error("the unpaced run's latency was judged against the paced target")
	}
	// Nothing of the context benchmarks was in the input, and they have no
	// target: they are not counted missing.
	if missing != 0 {
		t.Errorf("missing = %d, want 0", missing)
	}
}

func TestTableCountsTargetsWithoutFigures(t *testing.T) {
	results, err := parse(strings.NewReader("BenchmarkPromptStream/deltas=10000-2 \t 13 \t 84765022 ns/op \t 0.95 ratio-vs-bare\n"))
	if err != nil {
		t.Fatal(err)
	}
	rows, missing := evaluate(targets(), results)
	// CPU ratio, first event, message_end, RSS, the two restore ratios,
	// the session-length and the compacted conversation's ratios, the
	// three append figures and the cold start have no figure.
	if missing != 12 {
		t.Errorf("missing = %d, want 12; rows %+v", missing, rows)
	}
	for _, r := range rows {
		if r.label == "CPU per event vs bare gRPC" && r.value != "not measured" {
			t.Errorf("CPU row = %+v, want not measured", r)
		}
	}
}

func TestParseRejectsAFigureThatIsNotANumber(t *testing.T) {
	if _, err := parse(strings.NewReader("BenchmarkX-2 \t 1 \t 5 ns/op \t fast ratio\n")); err == nil {
		t.Error("parse accepted a non-numeric figure")
	}
}
