// Command benchtable reads `go test -bench` output on stdin and prints
// agentd's speed figures next to their targets and whether each is met;
// `make bench` runs it after the key benchmarks. A figure reported more
// than once (-count) is the median of its runs. It exits 1 when a target's
// figure is missing from the input, so a benchmark that failed or was not
// run cannot pass as met; targets that are not met are reported, not
// failed, since the figures depend on the machine.
//
// Usage:
//
//	go test -run '^$' -bench 'BenchmarkPromptStream$' ./service | go run ./internal/benchtable
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// target is one figure the table shows: the metric unit of the benchmarks
// whose names match bench, and the bound it should keep (none when op is
// empty: shown for reference).
type target struct {
	bench *regexp.Regexp
	unit  string
	label string
	op    string // "≥", "≤" or "" (no target)
	limit float64
}

// targets are the goals of the speed issue, in the order the table shows
// them.
func targets() []target {
	stream := regexp.MustCompile(`^BenchmarkPromptStream/`)
	paced := regexp.MustCompile(`^BenchmarkConcurrentSessions/engine=\w+/paced`)
	sessions := regexp.MustCompile(`^BenchmarkConcurrentSessions/`)
	restore := regexp.MustCompile(`^BenchmarkRestore/`)
	list := []target{
		{stream, "ratio-vs-bare", "stream events/s vs bare gRPC", "≥", 0.9},
		{stream, "cpu-ratio-vs-bare", "CPU per event vs bare gRPC", "≤", 1.3},
		{paced, "first-event-p99-ms", "prompt to first event p99 (ms)", "≤", 50},
		{paced, "message-end-p99-ms", "message_end delivery p99 (ms)", "≤", 50},
		{sessions, "rss-after/baseline", "RSS after load / baseline", "≤", 1.5},
		{sessions, "agentd-cpu-µs/event", "agentd CPU per event delivered (µs)", "", 0},
		{sessions, "cpu-busy-fraction", "machine CPU busy during the load (agentd + clients)", "", 0},
		{sessions, "offered/delivered", "events/s offered / delivered (above 1: saturated)", "", 0},
		{sessions, "events/s-vs-bare", "events/s vs bare gRPC to the same clients", "", 0},
		{sessions, "cpu/event-vs-bare", "CPU per event vs bare gRPC", "", 0},
		{sessions, "rss-KiB/idle-session", "RSS per idle open session (KiB)", "", 0},
		{sessions, "heap-KiB/idle-session", "live heap per idle open session (KiB)", "", 0},
		{regexp.MustCompile(`^BenchmarkContextPipeline/`), "x-plain", "context build vs plain pipeline", "", 0},
		{regexp.MustCompile(`^BenchmarkContextPathCompacted$`), "ms/context-path", "context restore after restart (ms)", "", 0},
		{restore, "first-GetContext-ms", "first GetContext after restart (ms)", "", 0},
		{restore, "restore-vs-pi", "first GetContext vs pi open+build", "≤", 0.15},
		{restore, "rss-vs-pi", "RSS holding the session vs pi", "≤", 0.6},
		{regexp.MustCompile(`^BenchmarkSessionLength/`), "x-vs-shortest", "one step vs the same step in the shortest session", "≤", 1.2},
		{regexp.MustCompile(`^BenchmarkCompactedConversation$`), "last50/first50", "compacted conversation: last 50 turns vs first 50 (median)", "≤", 1.3},
		{regexp.MustCompile(`^BenchmarkAppendVsPi$`), "append-vs-pi", "one store append vs pi's appendMessage", "≤", 1.5},
		{regexp.MustCompile(`^BenchmarkAppendVsPi$`), "disk-vs-pi", "bytes on disk vs pi's session file", "≤", 0.6},
		{regexp.MustCompile(`^BenchmarkAppend/`), "x-raw", "one store append vs raw SQLite doing the same work", "≤", 1.5},
		{regexp.MustCompile(`^BenchmarkColdStart/`), "ms-to-SERVING", "process start to health SERVING (ms)", "≤", 40},
		{regexp.MustCompile(`^BenchmarkColdStart/`), "init-ms", "package initialization before main (ms)", "", 0},
	}
	// Replica scaling (cmd/agentd BenchmarkReplicas, PostgreSQL) has no
	// target: the figures per replica count are shown side by side.
	replicas := regexp.MustCompile(`^BenchmarkReplicas$`)
	for n := 1; n <= 3; n++ {
		list = append(list,
			target{replicas, fmt.Sprintf("events/s-%dreplica", n), fmt.Sprintf("%d replica(s): events/s", n), "", 0},
			target{replicas, fmt.Sprintf("first-event-p99-ms-%dreplica", n), fmt.Sprintf("%d replica(s): first event p99 (ms)", n), "", 0})
	}
	return list
}

// result is one benchmark's figures, the runs of a name merged.
type result struct {
	name    string
	metrics map[string][]float64
}

// parse reads the benchmark lines of go test output, in the order their
// names first appear; names lose their -GOMAXPROCS suffix (the benchmarks
// report the GOMAXPROCS they ran with as "procs").
func parse(r io.Reader) ([]*result, error) {
	suffix := regexp.MustCompile(`-\d+$`)
	byName := map[string]*result{}
	var out []*result
	lines := bufio.NewScanner(r)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		// Name, iterations, then value-unit pairs.
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := suffix.ReplaceAllString(f[0], "")
		res := byName[name]
		if res == nil {
			res = &result{name: name, metrics: map[string][]float64{}}
			byName[name] = res
			out = append(out, res)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is not a number", f[0], f[i])
			}
			res.metrics[f[i+1]] = append(res.metrics[f[i+1]], v)
		}
	}
	return out, lines.Err()
}

func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// row is one line of the table.
type row struct {
	bench, label, value, target, meets, procs, scale string
}

// evaluate checks every target against the results, one row per matching
// benchmark, and reports how many targets had no figure at all.
func evaluate(ts []target, results []*result) (rows []row, missing int) {
	// The metrics in which benchmarks report the size they ran at (set by
	// AGENTD_BENCH_* variables), shown beside their figures.
	scaleUnits := []string{"sessions", "deltas/prompt", "messages", "turns"}
	for _, t := range ts {
		found := false
		for _, r := range results {
			vs, ok := r.metrics[t.unit]
			if !t.bench.MatchString(r.name) || !ok {
				continue
			}
			found = true
			v := median(vs)
			rw := row{bench: strings.TrimPrefix(r.name, "Benchmark"), label: t.label, value: format(v), target: "—", meets: "—", procs: "?"}
			if len(vs) > 1 {
				rw.value += fmt.Sprintf(" (median of %d)", len(vs))
			}
			if p, ok := r.metrics["procs"]; ok {
				rw.procs = strconv.FormatFloat(median(p), 'f', -1, 64)
			}
			for _, u := range scaleUnits {
				if n, ok := r.metrics[u]; ok {
					rw.scale = strconv.FormatFloat(median(n), 'f', -1, 64) + " " + u
					break
				}
			}
			if t.op != "" {
				rw.target = t.op + " " + format(t.limit)
				met := v >= t.limit
				if t.op == "≤" {
					met = v <= t.limit
				}
				rw.meets = map[bool]string{true: "yes", false: "NO"}[met]
			}
			rows = append(rows, rw)
		}
		if !found && t.op != "" {
			missing++
			rows = append(rows, row{bench: t.bench.String(), label: t.label, value: "not measured", target: t.op + " " + format(t.limit), meets: "?", procs: "?"})
		}
	}
	return rows, missing
}

func format(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func main() {
	results, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(2)
	}
	rows, missing := evaluate(targets(), results)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "benchmark\tfigure\tvalue\ttarget\tmeets\tprocs\tscale")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.bench, r.label, r.value, r.target, r.meets, r.procs, r.scale)
	}
	_ = w.Flush()
	if missing > 0 {
		fmt.Fprintf(os.Stderr, "benchtable: %d targets without a figure in the input\n", missing)
		os.Exit(1)
	}
}
