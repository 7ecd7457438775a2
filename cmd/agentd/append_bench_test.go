package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/clients/go/sessionfile"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/benchenv"
	"github.com/agentd/agentd/internal/transcriptgen"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/sqlite"
)

// piAppendScript appends the messages of a pi session file, one
// SessionManager.appendMessage each, to a new session of pi's in a
// scratch folder, and reports the microseconds per append and the size of
// the file pi wrote. It runs from the folder pi is installed in, so its
// import resolves there.
const piAppendScript = `import { SessionManager } from "@mariozechner/pi-coding-agent";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
const messages = readFileSync(process.argv[2], "utf8").split("\n").filter(Boolean)
  .map((l) => JSON.parse(l)).filter((e) => e.type === "message").map((e) => e.message);
const dir = mkdtempSync(join(tmpdir(), "agentd-pi-append-"));
const sm = SessionManager.create(dir, dir);
const t0 = performance.now();
for (const m of messages) sm.appendMessage(m);
const us = (performance.now() - t0) * 1000 / messages.length;
console.log(JSON.stringify({ us, bytes: statSync(sm.getSessionFile()).size, messages: messages.length }));
rmSync(dir, { recursive: true });
`

// BenchmarkAppendVsPi appends a transcript of AGENTD_BENCH_APPEND_MESSAGES
// messages (10,000) with real text (transcriptgen.GoSourceCorpus) to a new
// SQLite store, one Append per message as a run stores them, and, with
// AGENTD_BENCH_PI_DIR naming a folder where pi is installed, the same
// messages to a new pi session, one SessionManager.appendMessage each,
// alternating in each iteration. It reports both times per append and
// their ratio (append-vs-pi, target ≤ 1.5), and the bytes each keeps on
// disk and their ratio (disk-vs-pi, target ≤ 0.6).
func BenchmarkAppendVsPi(b *testing.B) {
	benchenv.Procs(b)
	n := benchenv.Int(b, "APPEND_MESSAGES", 10_000)
	corpus, err := transcriptgen.GoSourceCorpus()
	if err != nil {
		b.Skip(err)
	}
	gen := transcriptgen.New(1).WithCorpus(corpus)
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	entries := make([]*agentdv1.Entry, n)
	recs := []*agentdv1.SessionRecord{{Record: &agentdv1.SessionRecord_Header{Header: &agentdv1.SessionHeader{EntryCount: int64(n)}}}}
	for i := range entries {
		// The chain pi's file holds; the store is given each message
		// without ids, as a run gives it.
		e := gen.Next()
		e.Id, e.Time = fmt.Sprintf("e%06d", i), timestamppb.New(at.Add(time.Duration(i)*time.Second))
		if i > 0 {
			e.ParentId = entries[i-1].GetId()
		}
		entries[i] = e
		recs = append(recs, &agentdv1.SessionRecord{Record: &agentdv1.SessionRecord_Entry{Entry: e}})
	}
	dir := b.TempDir()
	piFile := filepath.Join(dir, "session.jsonl")
	var buf bytes.Buffer
	if err := sessionfile.WritePi(&buf, recs); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(piFile, buf.Bytes(), 0o600); err != nil {
		b.Fatal(err)
	}
	var script string
	if piDir := os.Getenv(benchenv.Prefix + "PI_DIR"); piDir != "" {
		script = filepath.Join(piDir, fmt.Sprintf("agentd-append-bench-%d.mjs", os.Getpid()))
		if err := os.WriteFile(script, []byte(piAppendScript), 0o600); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.Remove(script) })
	}

	var agentdUs, agentdMiB, piUs, piMiB []float64
	round := 0
	for b.Loop() {
		us, mib := appendToStore(b, filepath.Join(dir, fmt.Sprintf("agentd-%d.db", round)), entries)
		agentdUs, agentdMiB = append(agentdUs, us), append(agentdMiB, mib)
		if script != "" {
			us, mib := runPiAppend(b, script, piFile, n)
			piUs, piMiB = append(piUs, us), append(piMiB, mib)
		}
		round++
	}
	b.ReportMetric(float64(n), "messages")
	b.ReportMetric(median(agentdUs), "µs/append")
	b.ReportMetric(median(agentdMiB), "MiB-disk")
	if script != "" {
		b.ReportMetric(median(piUs), "pi-µs/append")
		b.ReportMetric(median(piMiB), "pi-MiB-disk")
		b.ReportMetric(median(agentdUs)/median(piUs), "append-vs-pi")
		b.ReportMetric(median(agentdMiB)/median(piMiB), "disk-vs-pi")
	}
}

// appendToStore appends entries one by one to a new session of a new
// store at path and returns the microseconds per append and the MiB the
// database holds once closed.
func appendToStore(b *testing.B, path string, entries []*agentdv1.Entry) (usPerAppend, mib float64) {
	b.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{})
	if err != nil {
		b.Fatal(err)
	}
	fresh := make([]*agentdv1.Entry, len(entries))
	for i, e := range entries {
		fresh[i] = proto.CloneOf(e)
		fresh[i].Id, fresh[i].ParentId, fresh[i].Time = "", "", nil
	}
	start := time.Now()
	for _, e := range fresh {
		if err := s.Append(ctx, sess.ID, e); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return float64(elapsed.Nanoseconds()) / 1e3 / float64(len(entries)), float64(info.Size()) / (1 << 20)
}

// runPiAppend runs piAppendScript on file and returns its microseconds
// per append and the MiB of the file pi wrote.
func runPiAppend(b *testing.B, script, file string, messages int) (usPerAppend, mib float64) {
	b.Helper()
	var res struct {
		Us       float64
		Bytes    float64
		Messages int
	}
	runPi(b, &res, nil, script, file)
	if res.Messages != messages {
		b.Fatalf("pi appended %d messages, want %d", res.Messages, messages)
	}
	return res.Us, res.Bytes / (1 << 20)
}
