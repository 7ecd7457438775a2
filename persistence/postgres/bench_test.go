package postgres_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/transcriptgen"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/postgres"
	"github.com/agentd/agentd/persistence/postgres/pgtest"
	"github.com/agentd/agentd/persistence/sqlite"
)

// benchMessages is the length of the transcript BenchmarkAppendPerMessage
// appends.
const benchMessages = 2000

// BenchmarkAppendPerMessage appends the same generated transcript one
// message per transaction, as a run commits at each message_end, to a
// SQLite file and to a PostgreSQL database on loopback in the same run,
// and reports the latency of one append (p50, p99) and the PostgreSQL to
// SQLite ratio of the medians.
func BenchmarkAppendPerMessage(b *testing.B) {
	ctx := context.Background()
	engines := []struct {
		name string
		open func(b *testing.B) persistence.Store
	}{
		{"sqlite", func(b *testing.B) persistence.Store {
			s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "agentd.db"))
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"postgres", func(b *testing.B) persistence.Store {
			s, err := postgres.Open(ctx, pgtest.DSN(b))
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	}
	p50 := map[string]time.Duration{}
	for _, e := range engines {
		b.Run("engine="+e.name, func(b *testing.B) {
			var lat []time.Duration
			for range b.N {
				b.StopTimer()
				s := e.open(b)
				sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{})
				if err != nil {
					b.Fatal(err)
				}
				entries := transcriptgen.Transcript(1, benchMessages)
				b.StartTimer()
				for _, entry := range entries {
					start := time.Now()
					if err := s.Append(ctx, sess.ID, entry); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(start))
				}
				b.StopTimer()
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			slices.Sort(lat)
			p50[e.name] = lat[len(lat)/2]
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs/append")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs/append")
			b.ReportMetric(float64(len(lat))/float64(b.N), "appends/op")
		})
	}
	if p50["sqlite"] > 0 && p50["postgres"] > 0 {
		b.Logf("append p50: postgres/sqlite = %.1f×", float64(p50["postgres"])/float64(p50["sqlite"]))
	}
}
