package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/persistence"
)

// fillWriterCache appends n entries of about 4 KiB (compression off, so
// each takes its pages) to a new session of s, which leaves their pages in
// the writer's page cache, and returns the session.
func fillWriterCache(t *testing.T, s *Store, n int) string {
	t.Helper()
	ctx := context.Background()
	sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("page cache ", 400)
	for i := range n {
		if err := s.Append(ctx, sess.ID, recordsEntry(text+string(rune('a'+i%26)))); err != nil {
			t.Fatal(err)
		}
	}
	return sess.ID
}

func TestIdleWriterReturnsItsPageCache(t *testing.T) {
	if cHeapInUse() < 0 {
		t.Skip("the C library does not report its heap's use here")
	}
	// An hour: the background loop stays out of the way, and the test
	// calls what it would call.
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "memory.db"), WithPayloadCompression(false),
		func(o *options) { o.memoryIdle = time.Hour })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	id := fillWriterCache(t, s, 2000) // ~8 MiB of pages, under writerCacheKiB
	filled := cHeapInUse()

	// A write in progress holds the leader token: nothing is released.
	s.writer.leader <- struct{}{}
	if s.releaseIdleMemory() {
		t.Error("released the page cache while a write was running")
	}
	<-s.writer.leader

	if !s.releaseIdleMemory() {
		t.Fatal("an idle writer did not release its page cache")
	}
	released := cHeapInUse()
	if freed := filled - released; freed < 4<<20 {
		t.Errorf("releasing freed %d KiB of the C heap (%d KiB in use before), want at least 4 MiB of the ~8 MiB cached", freed>>10, filled>>10)
	}
	// The store works on: the next append reads its pages back.
	if err := s.Append(context.Background(), id, recordsEntry("after the release")); err != nil {
		t.Fatal(err)
	}
	path, err := s.Path(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(path) != 2001 {
		t.Errorf("the path holds %d entries after the release, want 2001", len(path))
	}
}

func TestCheckpointLoopReleasesOnceIdle(t *testing.T) {
	if cHeapInUse() < 0 {
		t.Skip("the C library does not report its heap's use here")
	}
	const idle = 100 * time.Millisecond
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "memory.db"), WithPayloadCompression(false),
		func(o *options) { o.memoryIdle = idle })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// The appends take longer than an idle interval; once they end, the
	// loop finds the writer idle and releases its cache by itself.
	fillWriterCache(t, s, 1500)
	filled := cHeapInUse()
	deadline := time.Now().Add(20 * idle)
	for time.Now().Before(deadline) && filled-cHeapInUse() < 3<<20 {
		time.Sleep(idle / 4)
	}
	if freed := filled - cHeapInUse(); freed < 3<<20 {
		t.Fatalf("%v after the last commit the C heap holds %d KiB, %d KiB less than when the writes ended; the idle writer's page cache was not released",
			20*idle, cHeapInUse()>>10, freed>>10)
	}
}
