package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/transcriptgen"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/sqlite"
)

// outsideReader opens the database the way a program in another language
// would: SQLite's own driver, read-only, through the normal locking.
func outsideReader(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func countEntries(t *testing.T, q interface {
	QueryRow(string, ...any) *sql.Row
}) int {
	t.Helper()
	var n int
	if err := q.QueryRow("SELECT count(*) FROM entries").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Outside readers read consistent snapshots while the store writes, a
// long read never blocks an append, and once it ends the WAL it held large
// is emptied again.
func TestOutsideReadersBesideTheWriter(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agentd.db")
	const limit = 256 << 10
	s, err := sqlite.Open(ctx, path, sqlite.WithWALSizeLimit(limit))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{ID: "read-me"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, sess.ID, transcriptgen.Transcript(1, 10)...); err != nil {
		t.Fatal(err)
	}
	reader := outsideReader(t, path)
	if n := countEntries(t, reader); n != 10 {
		t.Fatalf("an outside reader sees %d entries, want 10", n)
	}

	// A read transaction pins its snapshot while the store goes on.
	long, err := reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := countEntries(t, long); n != 10 {
		t.Fatalf("snapshot %d", n)
	}
	appended := 10
	wal := func() int64 {
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	for wal() < 4*limit {
		batch := transcriptgen.Transcript(uint64(appended), 20)
		if err := s.Append(ctx, sess.ID, batch...); err != nil {
			t.Fatalf("append while an outside read is open: %v", err)
		}
		appended += len(batch)
	}
	if n := countEntries(t, long); n != 10 {
		t.Fatalf("the long read's snapshot moved to %d entries", n)
	}
	if n := countEntries(t, reader); n != appended {
		t.Fatalf("a new read sees %d entries, want %d", n, appended)
	}
	if err := long.Rollback(); err != nil {
		t.Fatal(err)
	}
	// With the read over, a checkpoint empties the WAL (the store runs one
	// at least every few seconds).
	deadline := time.Now().Add(30 * time.Second)
	for wal() > limit {
		if time.Now().After(deadline) {
			t.Fatalf("the WAL stays at %d bytes after the read ended (limit %d)", wal(), limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got, err := s.Path(ctx, sess.ID); err != nil || len(got) != appended {
		t.Fatalf("the store's transcript: %d entries, %v", len(got), err)
	}
}

// A second store on the file in the same process is refused like a
// second agentd, naming this process; outside readers are not.
func TestSecondOwnerInProcessIsRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agentd.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = sqlite.Open(ctx, path)
	if !errors.Is(err, sqlite.ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", os.Getpid())) {
		t.Fatalf("a second owner: %v", err)
	}
	if n := countEntries(t, outsideReader(t, path)); n != 0 {
		t.Fatalf("entries %d", n)
	}
	for _, f := range sqlite.Files(path) {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
}
