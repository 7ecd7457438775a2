package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/clients/go/sessionfile"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/benchenv"
	"github.com/agentd/agentd/internal/transcriptgen"
)

// piRestoreScript times pi's SessionManager.open and buildSessionContext
// of one session file, warm (the best of three in one process), and
// reports the process's RSS while it holds the session. It runs from the
// folder pi is installed in, so its import resolves there.
const piRestoreScript = `import { SessionManager } from "@mariozechner/pi-coding-agent";
import { dirname } from "node:path";
const file = process.argv[2];
let best = Infinity, sm = null, ctx = null;
for (let i = 0; i < 3; i++) {
  sm = ctx = null;
  globalThis.gc?.();
  const t0 = performance.now();
  sm = SessionManager.open(file, dirname(file));
  ctx = sm.buildSessionContext();
  best = Math.min(best, performance.now() - t0);
}
globalThis.gc?.();
console.log(JSON.stringify({ ms: best, rss: process.memoryUsage().rss, messages: ctx.messages.length }));
`

// BenchmarkRestore measures a restart with a long session: a transcript
// of AGENTD_BENCH_RESTORE_MESSAGES messages (10,000; internal/transcriptgen)
// is imported into agentd on SQLite, then, each iteration, agentd starts
// again and answers GetContext for it. It reports the first GetContext's
// milliseconds and agentd's RSS after it, while the session was just read.
//
// It runs on two shapes of the same messages. context=compacted is the
// session a long conversation really is: no model takes 10,000 messages
// (~16 MB here), so a compaction summary follows every
// AGENTD_BENCH_RESTORE_COMPACT_EVERY messages (500, about a 200k-token
// window of these messages) and keeps the last 50 before it (~20,000
// tokens, pi's default for recent context kept); the context is the latest summary, what it kept and what
// followed. context=whole has no compaction, so the context is every
// message: a bound on the read path, not a session a model could take.
//
// With AGENTD_BENCH_PI_DIR naming a folder where pi is installed (npm
// install @mariozechner/pi-coding-agent@0.73.1 in a scratch folder; never
// a dependency of agentd), each iteration also runs pi on the same
// transcript (agentd's pi export of it): the best of three
// SessionManager.open + buildSessionContext in one node process, and that
// process's RSS holding the session; it then reports the ratios (targets
// ≤ 0.15 for the time, ≤ 0.6 for RSS). Run it with -benchtime 5x or so:
// an iteration is a restart.
func BenchmarkRestore(b *testing.B) {
	n := benchenv.Int(b, "RESTORE_MESSAGES", 10_000)
	every := benchenv.Int(b, "RESTORE_COMPACT_EVERY", 500)
	b.Run("context=compacted", func(b *testing.B) {
		entries, contextLen := restoreTranscript(n, every, 50)
		benchmarkRestore(b, n, entries, contextLen)
	})
	b.Run("context=whole", func(b *testing.B) {
		entries, contextLen := restoreTranscript(n, 0, 0)
		benchmarkRestore(b, n, entries, contextLen)
	})
}

// restoreTranscript returns n messages as a chain of entries, with a
// compaction summary after every every-th message (none when every is 0)
// that keeps the keep messages before it, and the number of messages the
// context at its leaf holds.
func restoreTranscript(n, every, keep int) ([]*agentdv1.Entry, int) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	gen := transcriptgen.New(1)
	var entries []*agentdv1.Entry
	add := func(e *agentdv1.Entry) {
		e.Id, e.Time = fmt.Sprintf("e%06d", len(entries)), timestamppb.New(at.Add(time.Duration(len(entries))*time.Second))
		if len(entries) > 0 {
			e.ParentId = entries[len(entries)-1].GetId()
		}
		entries = append(entries, e)
	}
	contextLen := 0
	for i := 1; i <= n; i++ {
		add(gen.Next())
		contextLen++
		if every > 0 && i%every == 0 && i < n {
			kept := entries[len(entries)-keep].GetId()
			add(&agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_CompactionSummary{
				CompactionSummary: &agentdv1.CompactionSummary{Summary: "The work so far, summarised.", FirstKeptEntryId: kept, TokensBefore: 200_000}}}}})
			contextLen = keep + 1 // the summary and what it kept
		}
	}
	return entries, contextLen
}

// benchmarkRestore imports entries once, then restarts agentd each
// iteration and times its first GetContext (contextLen messages).
func benchmarkRestore(b *testing.B, n int, entries []*agentdv1.Entry, contextLen int) {
	ctx := context.Background()
	benchenv.Procs(b)
	var env []string // agentd runs with the benchmark's GOMAXPROCS
	if procs := os.Getenv(benchenv.ProcsEnv); procs != "" {
		env = []string{"GOMAXPROCS=" + procs}
	}
	piDir := os.Getenv(benchenv.Prefix + "PI_DIR")
	dir := b.TempDir()
	db := filepath.Join(dir, "agentd.db")
	setup := startProcEnv(b, env, db)
	id := importTranscript(b, setup.client(), entries)
	piFile := filepath.Join(dir, "session.jsonl")
	if f, err := os.Create(piFile); err != nil {
		b.Fatal(err)
	} else if err := sessionfile.Export(ctx, setup.client(), id, sessionfile.Pi, f); err != nil {
		b.Fatal(err)
	} else if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	if err := setup.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		b.Fatal(err)
	}
	if err := setup.waitExit(30 * time.Second); err != nil {
		b.Fatalf("agentd's shutdown: %v", err)
	}
	var script string
	if piDir != "" {
		script = filepath.Join(piDir, fmt.Sprintf("agentd-restore-bench-%d.mjs", os.Getpid()))
		if err := os.WriteFile(script, []byte(piRestoreScript), 0o600); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.Remove(script) })
	}

	var agentdMs, agentdRSS, piMs, piRSS []float64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		p := startProcEnv(b, env, db)
		c := p.client()
		b.StartTimer()
		start := time.Now()
		resp, err := c.GetContext(ctx, &agentdv1.GetContextRequest{SessionId: id})
		elapsed := time.Since(start)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if got := len(resp.GetContext().GetMessages()); got != contextLen {
			b.Fatalf("GetContext holds %d messages, want %d", got, contextLen)
		}
		agentdMs = append(agentdMs, float64(elapsed.Microseconds())/1000)
		agentdRSS = append(agentdRSS, float64(benchenv.RSS(b, p.cmd.Process.Pid))/(1<<20))
		p.kill()
		if script != "" {
			ms, rss := runPiRestore(b, script, piFile, contextLen)
			piMs, piRSS = append(piMs, ms), append(piRSS, rss)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(n), "messages")
	b.ReportMetric(float64(contextLen), "context-messages")
	b.ReportMetric(median(agentdMs), "first-GetContext-ms")
	b.ReportMetric(median(agentdRSS), "rss-MiB")
	if script != "" {
		b.ReportMetric(median(piMs), "pi-open+build-ms")
		b.ReportMetric(median(piRSS), "pi-rss-MiB")
		b.ReportMetric(median(agentdMs)/median(piMs), "restore-vs-pi")
		b.ReportMetric(median(agentdRSS)/median(piRSS), "rss-vs-pi")
	}
}

// importTranscript imports entries, a chain from the first, as a new
// session and returns its id.
func importTranscript(b *testing.B, c agentdv1.AgentServiceClient, entries []*agentdv1.Entry) string {
	b.Helper()
	stream, err := c.ImportSession(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	header := &agentdv1.SessionHeader{LeafEntryId: entries[len(entries)-1].GetId(), EntryCount: int64(len(entries))}
	if err := stream.Send(&agentdv1.ImportSessionRequest{Record: &agentdv1.SessionRecord{Record: &agentdv1.SessionRecord_Header{Header: header}}}); err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		if err := stream.Send(&agentdv1.ImportSessionRequest{Record: &agentdv1.SessionRecord{Record: &agentdv1.SessionRecord_Entry{Entry: e}}}); err != nil {
			break // CloseAndRecv says why
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		b.Fatal(err)
	}
	return resp.GetSession().GetId()
}

// runPiRestore runs piRestoreScript on file and returns its milliseconds
// and RSS in MiB.
func runPiRestore(b *testing.B, script, file string, messages int) (ms, rssMiB float64) {
	b.Helper()
	var res struct {
		Ms       float64
		RSS      float64
		Messages int
	}
	runPi(b, &res, []string{"--expose-gc"}, script, file)
	if res.Messages != messages {
		b.Fatalf("pi's context holds %d messages, want %d", res.Messages, messages)
	}
	return res.Ms, res.RSS / (1 << 20)
}

// runPi runs script, in the folder pi is installed in (so that its import
// resolves there), with node and its flags, and decodes the JSON it prints
// into out.
func runPi(b *testing.B, out any, nodeFlags []string, script string, args ...string) {
	b.Helper()
	cmd := exec.Command("node", append(append(nodeFlags, script), args...)...)
	cmd.Dir = filepath.Dir(script)
	printed, err := cmd.Output()
	if err != nil {
		b.Fatalf("pi: %v\n%s", err, printed)
	}
	if err := json.Unmarshal(printed, out); err != nil {
		b.Fatalf("pi printed %q: %v", printed, err)
	}
}

// median of xs (not empty).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
