// Package benchenv reads the sizes of agentd's speed benchmarks and the
// GOMAXPROCS they run with from AGENTD_BENCH_* environment variables, so
// the run that checks the speed targets on a small machine can be repeated
// at a larger scale on a bigger one without editing the benchmarks. Every
// setting has a default, the size the targets were set for; a value that
// does not parse fails the benchmark rather than silently measuring the
// default. Only benchmarks import it.
package benchenv

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Prefix starts the name of every setting: Int(b, "SESSIONS", 1000) reads
// AGENTD_BENCH_SESSIONS.
const Prefix = "AGENTD_BENCH_"

// ProcsEnv sets GOMAXPROCS for a benchmark and for the processes it starts
// (see [Procs] and [SetProcs]).
const ProcsEnv = Prefix + "PROCS"

// Int returns the positive integer in Prefix+name, or def when it is unset
// or empty.
func Int(tb testing.TB, name string, def int) int {
	tb.Helper()
	n, err := parseInt(os.Getenv(Prefix+name), def)
	if err != nil {
		tb.Fatalf("%s%s: %v", Prefix, name, err)
	}
	return n
}

// Ints returns the comma-separated positive integers in Prefix+name (as
// "10000,100000"), or def when it is unset or empty.
func Ints(tb testing.TB, name string, def ...int) []int {
	tb.Helper()
	ns, err := parseInts(os.Getenv(Prefix+name), def)
	if err != nil {
		tb.Fatalf("%s%s: %v", Prefix, name, err)
	}
	return ns
}

// Duration returns the duration in Prefix+name (as "1s" or "250ms"; 0 is
// allowed), or def when it is unset or empty.
func Duration(tb testing.TB, name string, def time.Duration) time.Duration {
	tb.Helper()
	d, err := parseDuration(os.Getenv(Prefix+name), def)
	if err != nil {
		tb.Fatalf("%s%s: %v", Prefix, name, err)
	}
	return d
}

// Procs sets GOMAXPROCS to ProcsEnv's value for the benchmark, restoring
// the previous value when it ends, and reports the GOMAXPROCS the
// benchmark ran with as the "procs" metric (also when ProcsEnv is unset,
// so every figure says what it was measured with). Call it in the
// benchmark that reports the figures, not in a parent of sub-benchmarks,
// whose metrics are not printed.
func Procs(b *testing.B) int {
	b.Helper()
	prev := runtime.GOMAXPROCS(0)
	n, err := SetProcs()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		// Reported at the end: b.ResetTimer and b.Loop drop the metrics
		// reported before them.
		b.ReportMetric(float64(n), "procs")
		runtime.GOMAXPROCS(prev)
	})
	return n
}

// SetProcs sets GOMAXPROCS to ProcsEnv's value when it is set, and returns
// the GOMAXPROCS now in effect. A benchmark's helper processes (servers
// and load generators started from the test binary) call it, so they run
// with the same setting as the benchmark: they inherit the environment,
// not the parent's runtime.GOMAXPROCS.
func SetProcs() (int, error) {
	n, err := parseInt(os.Getenv(ProcsEnv), 0)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", ProcsEnv, err)
	}
	if n > 0 {
		runtime.GOMAXPROCS(n)
	}
	return runtime.GOMAXPROCS(0), nil
}

func parseInt(s string, def int) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return def, nil
	}
	// Underscores as in Go literals ("100_000"): sizes are easier to read.
	n, err := strconv.Atoi(strings.ReplaceAll(s, "_", ""))
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", s)
	}
	if n <= 0 {
		return 0, fmt.Errorf("%d is not positive", n)
	}
	return n, nil
}

func parseInts(s string, def []int) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return def, nil
	}
	var ns []int
	for _, f := range strings.Split(s, ",") {
		n, err := parseInt(f, 0)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, fmt.Errorf("%q has an empty element", s)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

func parseDuration(s string, def time.Duration) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration: %w", s, err)
	}
	if d < 0 {
		return 0, fmt.Errorf("%v is negative", d)
	}
	return d, nil
}

// RSS returns the resident set size in bytes of process pid (0: this
// process), as Linux reports it in /proc/PID/status.
func RSS(tb testing.TB, pid int) uint64 {
	tb.Helper()
	file := "/proc/self/status"
	if pid != 0 {
		file = fmt.Sprintf("/proc/%d/status", pid)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				tb.Fatalf("VmRSS %q in %s: %v", rest, file, err)
			}
			return kib << 10
		}
	}
	tb.Fatalf("no VmRSS in %s", file)
	return 0
}
