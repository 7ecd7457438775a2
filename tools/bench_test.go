package tools

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agentloop"
	"github.com/agentd/agentd/internal/benchenv"
	"github.com/agentd/agentd/tools/sandbox"
	"github.com/agentd/agentd/tools/sandbox/sandboxtest"
)

func benchFixture(b *testing.B) *Workspace {
	b.Helper()
	dir := b.TempDir()
	ws, err := New(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ws.Close() })
	var sb strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&sb, "line %d: the quick brown fox jumps over the lazy dog\n", i)
	}
	for i := range 50 {
		if err := ws.root.MkdirAll(fmt.Sprintf("d%d", i%5), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := ws.root.WriteFile(fmt.Sprintf("d%d/f%d.txt", i%5, i), []byte(sb.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return ws
}

func benchTool(b *testing.B, name string, args map[string]any, perItem float64, unit string) {
	ws := benchFixture(b)
	tool, _ := ws.Tool(name)
	s, err := structpb.NewStruct(args)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := tool.Execute(b.Context(), agentloop.Call{ID: "c", Args: s}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/perItem, "ns/"+unit)
}

// BenchmarkReadFile reads a 1000-line file (all of it fits the caps).
func BenchmarkReadFile(b *testing.B) {
	benchTool(b, ReadFile, map[string]any{"path": "d0/f0.txt"}, 1000, "line")
}

// BenchmarkGrep searches 50 files of 1000 lines for a rare pattern.
func BenchmarkGrep(b *testing.B) {
	benchTool(b, Grep, map[string]any{"pattern": "line 99[0-9]:"}, 50000, "line")
}

// BenchmarkFind globs 50 files in 5 directories.
func BenchmarkFind(b *testing.B) {
	benchTool(b, Find, map[string]any{"pattern": "**/f1*.txt"}, 55, "entry")
}

// BenchmarkUnifiedDiff diffs a 1000-line text with one changed line.
func BenchmarkUnifiedDiff(b *testing.B) {
	var sb strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&sb, "line %d\n", i)
	}
	old := sb.String()
	updated := strings.Replace(old, "line 500\n", "line five hundred\n", 1)
	b.ReportAllocs()
	for b.Loop() {
		unifiedDiff("f", old, updated, 3)
	}
}

// bashWorkspaces returns two workspaces on one directory, one whose bash
// runs in the tool sandbox and one whose bash runs unconfined; both close
// with the benchmark.
func bashWorkspaces(b *testing.B) (confined, bare *Workspace) {
	sb := sandboxtest.New(b, sandbox.Options{})
	dir := b.TempDir()
	confined, err := New(dir, Options{Sandbox: sb})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { confined.Close() })
	bare, err = New(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bare.Close() })
	return confined, bare
}

// BenchmarkBashSandbox measures what confinement adds to one bash call of
// `true`: confined and unconfined calls alternate in one run, and the
// figures are the confined call's time, the unconfined one's, their ratio
// and the milliseconds confinement adds.
func BenchmarkBashSandbox(b *testing.B) {
	confined, bare := bashWorkspaces(b)
	args, _ := structpb.NewStruct(map[string]any{"command": "true"})
	call := func(ws *Workspace) time.Duration {
		tool, _ := ws.Tool(Bash)
		start := time.Now()
		if _, err := tool.Execute(b.Context(), agentloop.Call{ID: "c", Args: args}); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var inSandbox, outside time.Duration
	for b.Loop() {
		inSandbox += call(confined)
		outside += call(bare)
	}
	n := float64(b.N)
	b.ReportMetric(float64(inSandbox.Microseconds())/n, "µs/confined")
	b.ReportMetric(float64(outside.Microseconds())/n, "µs/unconfined")
	b.ReportMetric(float64(inSandbox)/float64(outside), "confined/unconfined")
	b.ReportMetric(float64((inSandbox-outside).Microseconds())/n/1000, "ms-added")
}

// BenchmarkBashSandboxHeap measures what a confined call costs a process
// holding a large heap (AGENTD_BENCH_HEAP_MIB, 256, as a busy agentd
// does), beyond the call itself. The helper enters a new user namespace,
// which takes a real fork of the caller rather than a vfork; the fork
// write-protects every page of the heap, so the caller's next write to
// each page faults. It reports each call's time and the time to then
// write one byte in every page of the heap, after a confined call and
// after an unconfined one (a vfork, which leaves the heap as it was).
func BenchmarkBashSandboxHeap(b *testing.B) {
	confined, bare := bashWorkspaces(b)
	const page = 4096
	heap := make([][]byte, benchenv.Int(b, "HEAP_MIB", 256))
	for i := range heap {
		heap[i] = make([]byte, 1<<20)
	}
	touch := func() time.Duration {
		start := time.Now()
		for _, mib := range heap {
			for i := 0; i < len(mib); i += page {
				mib[i]++
			}
		}
		return time.Since(start)
	}
	touch()
	args, _ := structpb.NewStruct(map[string]any{"command": "true"})
	call := func(ws *Workspace) (call, after time.Duration) {
		tool, _ := ws.Tool(Bash)
		start := time.Now()
		if _, err := tool.Execute(b.Context(), agentloop.Call{ID: "c", Args: args}); err != nil {
			b.Fatal(err)
		}
		call = time.Since(start)
		return call, touch()
	}
	var inSandbox, outside, afterSandbox, afterOutside time.Duration
	for b.Loop() {
		c, a := call(confined)
		inSandbox, afterSandbox = inSandbox+c, afterSandbox+a
		c, a = call(bare)
		outside, afterOutside = outside+c, afterOutside+a
	}
	n := float64(b.N) * 1000
	b.ReportMetric(float64(len(heap)), "heap-MiB")
	b.ReportMetric(float64(inSandbox.Microseconds())/n, "ms/confined")
	b.ReportMetric(float64(afterSandbox.Microseconds())/n, "ms-writing-heap-after-confined")
	b.ReportMetric(float64(outside.Microseconds())/n, "ms/unconfined")
	b.ReportMetric(float64(afterOutside.Microseconds())/n, "ms-writing-heap-after-unconfined")
}
