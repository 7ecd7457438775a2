package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/transcriptgen"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/sqlite"
)

// Environment of the crash child; see TestCrashChild.
const (
	crashEnvDB      = "AGENTD_CRASH_DB"
	crashEnvSession = "AGENTD_CRASH_SESSION"
	crashEnvFirst   = "AGENTD_CRASH_FIRST_BATCH"
	crashEnvSync    = "AGENTD_CRASH_SYNC"
)

// crashBatch is batch k of the crash transcript: 1 to 3 entries (like an
// assistant message and its tool results) with ids the parent can predict.
func crashBatch(k int) []*agentdv1.Entry {
	g := transcriptgen.New(uint64(k))
	batch := make([]*agentdv1.Entry, k%3+1)
	for j := range batch {
		batch[j] = g.Next()
		batch[j].Id = fmt.Sprintf("b%06d-%d", k, j)
	}
	return batch
}

// TestCrashChild is the process the crash test kills. It does nothing
// unless started by TestCrashConsistency: it appends batches forever and
// reports each batch on stdout only after Append returned.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashEnvDB)
	if path == "" {
		t.Skip("only runs as the child of TestCrashConsistency")
	}
	ctx := context.Background()
	sync := sqlite.SyncNormal
	if os.Getenv(crashEnvSync) == "full" {
		sync = sqlite.SyncFull
	}
	s, err := sqlite.Open(ctx, path, sqlite.WithSynchronous(sync))
	if err != nil {
		t.Fatal(err)
	}
	sessionID := os.Getenv(crashEnvSession)
	first, err := strconv.Atoi(os.Getenv(crashEnvFirst))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StartRun(ctx, sessionID, fmt.Sprintf("run-from-%d", first), nil); err != nil {
		t.Fatal(err)
	}
	fmt.Println("started")
	for k := first; k < first+1_000_000; k++ {
		if err := s.Append(ctx, sessionID, crashBatch(k)...); err != nil {
			t.Fatal(err)
		}
		// Unbuffered: the line is in the pipe before the next append.
		fmt.Printf("committed %d\n", k)
	}
	t.Fatal("the parent should have killed this process long ago")
}

// TestCrashConsistency SIGKILLs a child process in the middle of appending,
// twice, and proves after each reopen that every batch the child reported
// is intact, no batch is partial, and the interrupted run is found.
func TestCrashConsistency(t *testing.T) {
	if os.Getenv(crashEnvDB) != "" {
		t.Skip("this is the child")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "crash.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{Title: "crash"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	next := 0 // first batch the next child writes
	for round, tc := range []struct {
		sync      string
		killAfter int // reported batches before the kill
	}{{"normal", 300}, {"full", 40}, {"normal", 777}} {
		reported := runAndKill(t, path, sess.ID, next, tc.sync, tc.killAfter)
		if reported < next+tc.killAfter {
			t.Fatalf("round %d: child reported batches up to %d, want at least %d", round, reported, next+tc.killAfter)
		}

		s, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatalf("round %d: reopen after kill: %v", round, err)
		}
		var check string
		if err := sqlite.InspectWriter(ctx, s, func(q func(string, any) error) error { return q("PRAGMA integrity_check", &check) }); err != nil || check != "ok" {
			t.Fatalf("round %d: integrity_check = %q, %v", round, check, err)
		}
		interrupted, err := s.CloseInterruptedRuns(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(interrupted) != 1 || interrupted[0].ID != fmt.Sprintf("run-from-%d", next) {
			t.Fatalf("round %d: interrupted runs %+v, want run-from-%d", round, interrupted, next)
		}
		stored := verifyBatches(t, s, sess.ID, reported)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d (%s): killed after batch %d was reported; %d batches stored", round, tc.sync, reported-1, stored)
		next = stored
	}
}

// runAndKill starts the child, kills it after it reported killAfter
// batches, and returns how many batches (counted from 0) it reported in
// total, including lines still in the pipe.
func runAndKill(t *testing.T, path, sessionID string, first int, sync string, killAfter int) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnvDB+"="+path, crashEnvSession+"="+sessionID,
		crashEnvFirst+"="+strconv.Itoa(first), crashEnvSync+"="+sync)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	reported, seen, killed := first, 0, false
	for sc.Scan() {
		line := sc.Text()
		var k int
		if _, err := fmt.Sscanf(line, "committed %d", &k); err != nil {
			continue // "started", test framework output
		}
		if k != reported {
			t.Fatalf("child reported batch %d, want %d", k, reported)
		}
		reported++
		seen++
		if seen == killAfter && !killed {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !killed || !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child was not killed by SIGKILL (killed=%v, wait: %v); stderr:\n%s", killed, err, stderr.String())
	}
	return reported
}

// verifyBatches checks the stored transcript is exactly batches 0..n-1 for
// some n ≥ reported (at most one batch may have committed without being
// reported), each complete and byte-identical to what was written, chained
// in order with the leaf on the last entry. It returns n.
func verifyBatches(t *testing.T, s *sqlite.Store, sessionID string, reported int) int {
	t.Helper()
	ctx := context.Background()
	var all []*agentdv1.Entry
	token := ""
	for {
		page, err := s.Entries(ctx, sessionID, persistence.EntriesRequest{PageSize: persistence.MaxPageSize, PageToken: token})
		if err != nil {
			t.Fatalf("Entries after crash: %v", err)
		}
		all = append(all, page.Entries...)
		if token = page.NextPageToken; token == "" {
			break
		}
	}
	path, err := s.Path(ctx, sessionID)
	if err != nil {
		t.Fatalf("Path after crash: %v", err)
	}
	if len(path) != len(all) {
		t.Fatalf("path has %d entries, the session %d", len(path), len(all))
	}
	i, k := 0, 0
	for ; i < len(all); k++ {
		want := crashBatch(k)
		if i+len(want) > len(all) {
			t.Fatalf("batch %d is partial: %d of %d entries stored", k, len(all)-i, len(want))
		}
		for j, w := range want {
			got := all[i+j]
			wantParent := ""
			if i+j > 0 {
				wantParent = all[i+j-1].Id
			}
			if got.Id != w.Id || got.ParentId != wantParent || !proto.Equal(got.GetMessage(), w.GetMessage()) || got.RunId != w.RunId {
				t.Fatalf("entry %d (batch %d #%d) differs from what was written: id %q parent %q", i+j, k, j, got.Id, got.ParentId)
			}
			if !proto.Equal(got, path[i+j]) {
				t.Fatalf("entry %d differs between Entries and Path", i+j)
			}
		}
		i += len(want)
	}
	if k < reported || k > reported+1 {
		t.Fatalf("%d batches stored, child reported %d committed", k, reported)
	}
	sess, err := s.GetSession(ctx, sessionID)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) > 0 && sess.LeafEntryID != all[len(all)-1].Id {
		t.Fatalf("leaf %q, want the last entry %q", sess.LeafEntryID, all[len(all)-1].Id)
	}
	return k
}
