package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agentd/agentd/internal/benchenv"
	"github.com/agentd/agentd/internal/transcriptgen"
	"github.com/agentd/agentd/persistence/sqlite"
)

// BenchmarkColdStart starts the agentd binary and times it from the
// process's start to health SERVING (target ≤ 40 ms), on a new empty
// database each time (db=empty) and on one holding
// AGENTD_BENCH_START_SESSIONS sessions (10,000; db=sessions). It also
// reports the package initialization the binary does before main, as
// GODEBUG=inittrace=1 adds it up (init-ms), and the binary's size.
func BenchmarkColdStart(b *testing.B) {
	bin := agentdBinary(b)
	sessions := benchenv.Int(b, "START_SESSIONS", 10_000)
	full := filepath.Join(b.TempDir(), "sessions.db")
	st, err := sqlite.Open(context.Background(), full)
	if err != nil {
		b.Fatal(err)
	}
	if err := transcriptgen.FillSessions(context.Background(), st, sessions); err != nil {
		b.Fatal(err)
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	info, err := os.Stat(bin)
	if err != nil {
		b.Fatal(err)
	}
	initMs := initTime(b, bin)
	for _, tc := range []struct {
		name string
		db   func(i int) string
		n    int
	}{
		{"empty", func(i int) string { return filepath.Join(b.TempDir(), fmt.Sprintf("empty-%d.db", i)) }, 0},
		{"sessions", func(int) string { return full }, sessions},
	} {
		b.Run("db="+tc.name, func(b *testing.B) {
			benchenv.Procs(b)
			var total time.Duration
			i := 0
			for b.Loop() {
				total += timeToServing(b, bin, tc.db(i))
				i++
			}
			b.ReportMetric(float64(total.Microseconds())/1e3/float64(b.N), "ms-to-SERVING")
			b.ReportMetric(initMs, "init-ms")
			b.ReportMetric(float64(info.Size())/(1<<20), "binary-MiB")
			b.ReportMetric(float64(tc.n), "sessions")
		})
	}
}

// timeToServing starts bin on db and returns how long it took from the
// process's start until its health check answered SERVING; the process is
// stopped before it returns.
func timeToServing(b *testing.B, bin, db string) time.Duration {
	b.Helper()
	addr := freeAddr(b)
	cmd := exec.Command(bin, "--listen", addr, "--db", db)
	if procs := os.Getenv(benchenv.ProcsEnv); procs != "" {
		cmd.Env = append(os.Environ(), "GOMAXPROCS="+procs)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	// agentd binds its port before opening the store: once a connection is
	// accepted, the health check below waits on that connection for the
	// server to answer, with no reconnection delay.
	deadline := start.Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("agentd did not listen on %s: %v", addr, err)
		}
		time.Sleep(200 * time.Microsecond)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		b.Fatalf("health: %v %v", resp, err)
	}
	return time.Since(start)
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(b *testing.B) string {
	b.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// initTime runs `bin --version` with GODEBUG=inittrace=1 and returns the
// milliseconds its packages' initialization took, summed.
func initTime(b *testing.B, bin string) float64 {
	b.Helper()
	cmd := exec.Command(bin, "--version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("%s --version: %v\n%s", bin, err, out)
	}
	total := 0.0
	lines := bufio.NewScanner(strings.NewReader(string(out)))
	for lines.Scan() {
		// init <package> @<start> ms, <clock> ms clock, ...
		f := strings.Fields(lines.Text())
		if len(f) < 7 || f[0] != "init" || f[6] != "clock," {
			continue
		}
		ms, err := strconv.ParseFloat(f[4], 64)
		if err != nil {
			b.Fatalf("inittrace line %q: %v", lines.Text(), err)
		}
		total += ms
	}
	if total == 0 {
		b.Fatalf("no inittrace lines in:\n%s", out)
	}
	return total
}
