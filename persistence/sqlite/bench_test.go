package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/internal/transcriptgen"
	"github.com/agentd/agentd/persistence/sqlite"
)

// benchMessages is the transcript length the targets are set for.
const benchMessages = 10_000

const mib = 1 << 20

// resetEntries clears what Append fills in, so a transcript can be
// appended again.
func resetEntries(entries []*agentdv1.Entry) {
	for _, e := range entries {
		e.Id, e.ParentId, e.Time = "", "", nil
	}
}

// jsonlBytes is the size of the transcript as JSON lines (protojson, one
// entry per line): the reference format agentd replaces.
func jsonlBytes(b *testing.B, entries []*agentdv1.Entry) int64 {
	var n int64
	for _, e := range entries {
		j, err := protojson.Marshal(e)
		if err != nil {
			b.Fatal(err)
		}
		n += int64(len(j)) + 1
	}
	return n
}

func fileSize(b *testing.B, path string) int64 {
	var total int64
	for _, suffix := range []string{"", "-wal", "-shm"} {
		fi, err := os.Stat(path + suffix)
		if err == nil {
			total += fi.Size()
		} else if !os.IsNotExist(err) {
			b.Fatal(err)
		}
	}
	return total
}

// openRaw opens a database with the store's schema through the plain
// driver and the store's pragmas: the baseline without our layer.
func openRaw(b *testing.B, path, sync string) *sql.DB {
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_synchronous="+sync+"&_foreign_keys=1&_busy_timeout=5000&_txlock=immediate&_mutex=no")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`INSERT INTO sessions (id, create_time, update_time, config) VALUES ('raw', 0, 0, x'')`); err != nil {
		b.Fatal(err)
	}
	return db
}

// rawAppend inserts pre-encoded entries one per transaction with a prepared
// statement: the floor SQLite itself sets. Returns the time taken.
func rawAppend(b *testing.B, db *sql.DB, entries []*agentdv1.Entry) time.Duration {
	payloads := make([][]byte, len(entries))
	kinds := make([]string, len(entries))
	for i, e := range entries {
		payloads[i], _ = proto.Marshal(e)
		kinds[i], _ = persistence.EntryKind(e)
	}
	ins, err := db.Prepare(`INSERT INTO entries (key, session_pk, seq, id, parent_id, kind, create_time, payload) VALUES (4294967296 + ?1, 1, ?1, ?2, ?3, ?4, ?5, ?6)`)
	if err != nil {
		b.Fatal(err)
	}
	defer ins.Close()
	start := time.Now()
	for i, e := range entries {
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Stmt(ins).Exec(i+1, e.Id, e.ParentId, kinds[i], int64(i), payloads[i]); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// BenchmarkAppend appends a realistic transcript one entry per
// transaction (issue targets: ≤ 16 µs per append with synchronous NORMAL;
// ≤ 0.8× the JSONL bytes on disk). One op is the whole transcript.
func BenchmarkAppend(b *testing.B) {
	for _, tc := range []struct {
		name     string
		sync     sqlite.Synchronous
		syncName string
		messages int
	}{
		{"sync=normal", sqlite.SyncNormal, "NORMAL", benchMessages},
		// One fsync per commit: a shorter transcript keeps make bench short.
		{"sync=full", sqlite.SyncFull, "FULL", 500},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			entries := transcriptgen.Transcript(1, tc.messages)
			var ourDisk int64
			var mallocs uint64
			latencies := make([]time.Duration, len(entries))
			var p99, worst time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				resetEntries(entries)
				path := filepath.Join(b.TempDir(), fmt.Sprintf("bench-%d.db", i))
				s, err := sqlite.Open(ctx, path, sqlite.WithSynchronous(tc.sync))
				if err != nil {
					b.Fatal(err)
				}
				sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{})
				if err != nil {
					b.Fatal(err)
				}
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				b.StartTimer()
				for j, e := range entries {
					t0 := time.Now()
					if err := s.Append(ctx, sess.ID, e); err != nil {
						b.Fatal(err)
					}
					latencies[j] = time.Since(t0)
				}
				b.StopTimer()
				slices.Sort(latencies)
				p99 = max(p99, latencies[len(latencies)*99/100])
				worst = max(worst, latencies[len(latencies)-1])
				runtime.ReadMemStats(&m1)
				mallocs += m1.Mallocs - m0.Mallocs
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				ourDisk = fileSize(b, path)
				b.StartTimer()
			}
			b.StopTimer()
			perAppend := float64(b.Elapsed().Nanoseconds()) / float64(b.N*len(entries)) / 1e3

			rawPath := filepath.Join(b.TempDir(), "raw.db")
			raw := openRaw(b, rawPath, tc.syncName)
			rawTime := rawAppend(b, raw, entries)
			if err := raw.Close(); err != nil {
				b.Fatal(err)
			}
			rawPerAppend := float64(rawTime.Nanoseconds()) / float64(len(entries)) / 1e3
			jsonl := jsonlBytes(b, entries)

			b.ReportMetric(perAppend, "µs/append")
			b.ReportMetric(float64(mallocs)/float64(b.N*len(entries)), "allocs/append")
			b.ReportMetric(float64(p99.Nanoseconds())/1e3, "p99-µs/append")
			b.ReportMetric(float64(worst.Nanoseconds())/1e3, "max-µs/append")
			b.ReportMetric(rawPerAppend, "raw-µs/append")
			b.ReportMetric(perAppend/rawPerAppend, "x-raw")
			b.ReportMetric(float64(ourDisk)/mib, "MiB-disk")
			b.ReportMetric(float64(jsonl)/mib, "MiB-jsonl")
			b.ReportMetric(float64(ourDisk)/float64(jsonl), "disk/jsonl")
			b.ReportMetric(float64(ourDisk)/float64(fileSize(b, rawPath)), "disk/raw-disk")
		})
	}
}

// BenchmarkLoadPath loads and rebuilds the root→leaf path of a 10,000
// message session (issue targets: ≤ 55 ms per load, ≤ 28 MiB held).
func BenchmarkLoadPath(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "load.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{})
	if err != nil {
		b.Fatal(err)
	}
	entries := transcriptgen.Transcript(1, benchMessages)
	for _, e := range entries {
		if err := s.Append(ctx, sess.ID, e); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	entries = nil
	if s, err = sqlite.Open(ctx, path); err != nil {
		b.Fatal(err)
	}
	defer s.Close()

	held := func(load func() []*agentdv1.Entry) (uint64, []*agentdv1.Entry) {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		got := load()
		runtime.GC()
		runtime.ReadMemStats(&m1)
		return m1.HeapAlloc - min(m0.HeapAlloc, m1.HeapAlloc), got
	}
	ours := func() []*agentdv1.Entry {
		p, err := s.Path(ctx, sess.ID)
		if err != nil {
			b.Fatal(err)
		}
		if len(p) != benchMessages {
			b.Fatalf("path has %d entries, want %d", len(p), benchMessages)
		}
		return p
	}
	ourHeld, keep := held(ours)
	runtime.KeepAlive(keep)
	keep = nil

	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ours()
	}
	b.StopTimer()
	msPerLoad := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / 1e6

	// Baseline: the same rows read in seq order with the plain driver and
	// decoded, without session lookup, tree walk or checks.
	raw, err := sql.Open("sqlite3", "file:"+path+"?_query_only=1&_mutex=no")
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	rawLoad := func() []*agentdv1.Entry {
		rows, err := raw.Query(`SELECT payload FROM entries WHERE key > 4294967296 AND key < 2 * 4294967296 ORDER BY key`)
		if err != nil {
			b.Fatal(err)
		}
		defer rows.Close()
		out := make([]*agentdv1.Entry, 0, benchMessages)
		var payload sql.RawBytes
		for rows.Next() {
			if err := rows.Scan(&payload); err != nil {
				b.Fatal(err)
			}
			e := &agentdv1.Entry{}
			if err := proto.Unmarshal(payload, e); err != nil {
				b.Fatal(err)
			}
			out = append(out, e)
		}
		return out
	}
	rawHeld, keep := held(rawLoad)
	runtime.KeepAlive(keep)
	const rawRuns = 5
	start := time.Now()
	for range rawRuns {
		rawLoad()
	}
	rawMs := float64(time.Since(start).Nanoseconds()) / rawRuns / 1e6

	b.ReportMetric(msPerLoad, "ms/load")
	b.ReportMetric(rawMs, "raw-ms/load")
	b.ReportMetric(msPerLoad/rawMs, "x-raw")
	b.ReportMetric(float64(ourHeld)/mib, "MiB-held")
	b.ReportMetric(float64(rawHeld)/mib, "raw-MiB-held")
}

// BenchmarkOpen measures start-up (Open, CloseInterruptedRuns, Close) on a
// database with 10,000 sessions, which must not scan them.
func BenchmarkOpen(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "open.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10_000 {
		sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{Labels: map[string]string{"n": fmt.Sprint(i % 10)}})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Append(ctx, sess.ID, transcriptgen.Transcript(uint64(i), 2)...); err != nil {
			b.Fatal(err)
		}
		if err := s.StartRun(ctx, sess.ID, fmt.Sprint("run-", i)); err != nil {
			b.Fatal(err)
		}
		if err := s.EndRun(ctx, fmt.Sprint("run-", i), agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED, ""); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := sqlite.Open(ctx, path)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.CloseInterruptedRuns(ctx); err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/open")
}
