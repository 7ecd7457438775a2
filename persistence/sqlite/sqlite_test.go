package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // the raw driver, for tampering with files behind the store's back
	"go.uber.org/goleak"

	"github.com/agentd/agentd/internal/transcriptgen"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/sqlite"
	"github.com/agentd/agentd/persistence/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// harness opens stores in temporary directories and remembers each store's
// file, so Reopen and CorruptPayload can find it.
type harness struct {
	mu    sync.Mutex
	paths map[persistence.Store]string
}

func (h *harness) open(t *testing.T, path string) persistence.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	h.mu.Lock()
	h.paths[s] = path
	h.mu.Unlock()
	return s
}

func (h *harness) path(s persistence.Store) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.paths[s]
}

func TestConformance(t *testing.T) {
	h := &harness{paths: map[persistence.Store]string{}}
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T) persistence.Store {
			return h.open(t, filepath.Join(t.TempDir(), "agentd.db"))
		},
		Reopen: func(t *testing.T, s persistence.Store) persistence.Store {
			path := h.path(s)
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return h.open(t, path)
		},
		CorruptPayload: func(t *testing.T, s persistence.Store, sessionID, entryID string, payload []byte) {
			db := rawDB(t, h.path(s))
			// The suite's bytes are a plain protobuf: store them as such.
			res, err := db.Exec(`UPDATE entries SET payload = ?, encoding = 0 WHERE id = ? AND session_pk = (SELECT pk FROM sessions WHERE id = ?)`, payload, entryID, sessionID)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("corrupted %d rows, want 1", n)
			}
		},
	})
}

// rawDB opens the file with the plain driver, outside the store.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=5000&vfs=unix-excl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func newDB(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agentd.db")
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// immutable makes path unwritable even for root (chattr +i), or with
// chmod for other users, and undoes it at cleanup.
func immutable(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		mode := fi.Mode().Perm()
		if err := os.Chmod(path, mode&^0o222); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(path, mode) })
		return
	}
	if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		t.Skipf("running as root and cannot make %s immutable: %v %s", path, err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", path).Run() })
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		setup    func(t *testing.T) string // returns the path to open
		opts     []sqlite.Option
		is       error
		contains []string
	}{
		{
			name: "newer schema version",
			setup: func(t *testing.T) string {
				path := newDB(t)
				if _, err := rawDB(t, path).Exec("PRAGMA user_version = 99"); err != nil {
					t.Fatal(err)
				}
				return path
			},
			contains: []string{fmt.Sprintf("schema version 99 is newer than this agentd supports (%d); upgrade agentd", sqlite.SchemaVersion())},
		},
		{
			name: "locked by another process",
			setup: func(t *testing.T) string {
				path := newDB(t)
				conn, err := rawDB(t, path).Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.ExecContext(ctx, "ROLLBACK"); conn.Close() })
				return path
			},
			opts:     []sqlite.Option{sqlite.WithBusyTimeout(50 * time.Millisecond)},
			is:       sqlite.ErrLocked,
			contains: []string{"locked by another process", "waited 50ms"},
		},
		{
			name: "read-only file",
			setup: func(t *testing.T) string {
				path := newDB(t)
				immutable(t, path)
				return path
			},
			is:       sqlite.ErrReadOnly,
			contains: []string{"not writable", "write access to the file and its directory"},
		},
		{
			name: "read-only directory",
			setup: func(t *testing.T) string {
				dir := t.TempDir()
				immutable(t, dir)
				return filepath.Join(dir, "agentd.db")
			},
			is:       sqlite.ErrReadOnly,
			contains: []string{"writable"},
		},
		{
			name:     "missing directory",
			setup:    func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope", "agentd.db") },
			contains: []string{"nope: stat", "no such file or directory"},
		},
		{
			name:     "path is a directory",
			setup:    func(t *testing.T) string { return t.TempDir() },
			contains: []string{"is a directory"},
		},
		{
			name: "not a database",
			setup: func(t *testing.T) string {
				path := filepath.Join(t.TempDir(), "agentd.db")
				if err := os.WriteFile(path, []byte(strings.Repeat("this is not sqlite\n", 400)), 0o644); err != nil {
					t.Fatal(err)
				}
				return path
			},
			contains: []string{"not an SQLite database"},
		},
		{
			name: "another application's database",
			setup: func(t *testing.T) string {
				path := filepath.Join(t.TempDir(), "other.db")
				if _, err := rawDB(t, path).Exec("CREATE TABLE notes (x)"); err != nil {
					t.Fatal(err)
				}
				return path
			},
			contains: []string{"holds 1 tables but no agentd schema version"},
		},
		{
			name:     "empty path",
			setup:    func(t *testing.T) string { return "" },
			contains: []string{"give the path of a database file"},
		},
		{
			name:     "in-memory",
			setup:    func(t *testing.T) string { return ":memory:" },
			contains: []string{"give the path of a database file"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.setup(t)
			s, err := sqlite.Open(ctx, path, tc.opts...)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%s) succeeded, want an error", path)
			}
			t.Logf("Open error: %v", err)
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("Open: %v, want %v", err, tc.is)
			}
			for _, c := range tc.contains {
				if !strings.Contains(err.Error(), c) {
					t.Fatalf("Open error %q does not mention %q", err, c)
				}
			}
			if path != "" && !strings.Contains(err.Error(), path) {
				t.Fatalf("Open error %q does not name the file %s", err, path)
			}
		})
	}
}

func TestSchemaVersionError(t *testing.T) {
	path := newDB(t)
	if _, err := rawDB(t, path).Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	_, err := sqlite.Open(context.Background(), path)
	var sv *sqlite.SchemaVersionError
	if !errors.As(err, &sv) || sv.Found != 99 || sv.Supported != sqlite.SchemaVersion() || sv.Supported != 11 {
		t.Fatalf("Open: %v, want *SchemaVersionError{Found: 99, Supported: 11}", err)
	}
}

func TestOpenConfiguresDatabase(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		opts     []sqlite.Option
		wantSync int // PRAGMA synchronous: 1 NORMAL, 2 FULL
	}{
		{"default", nil, 1},
		{"full", []sqlite.Option{sqlite.WithSynchronous(sqlite.SyncFull)}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agentd.db")
			s, err := sqlite.Open(ctx, path, append(tc.opts, sqlite.WithReaderPoolSize(2))...)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var sync, fk, version, pageSize int
			var mode string
			if err := sqlite.InspectWriter(ctx, s, func(q func(string, any) error) error {
				for _, p := range []struct {
					pragma string
					dst    any
				}{{"synchronous", &sync}, {"foreign_keys", &fk}, {"journal_mode", &mode}, {"user_version", &version}, {"page_size", &pageSize}} {
					if err := q("PRAGMA "+p.pragma, p.dst); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if sync != tc.wantSync || fk != 1 || mode != "wal" || version != sqlite.SchemaVersion() || pageSize != 4096 {
				t.Fatalf("synchronous=%d foreign_keys=%d journal_mode=%s user_version=%d page_size=%d", sync, fk, mode, version, pageSize)
			}
		})
	}
}

// TestTreeDamage covers damage the engine-neutral suite cannot cause
// through a payload: rows of the tree itself missing or pointing the wrong
// way. Path must name the broken entry instead of returning a shortened
// transcript.
func TestTreeDamage(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		tamper    string
		wantEntry string
	}{
		{"parent row deleted", `DELETE FROM entries WHERE id = 'e2'`, "e3"},
		{"parent points forward", `UPDATE entries SET parent_id = 'e3' WHERE id = 'e2'`, "e2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agentd.db")
			s, err := sqlite.Open(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{})
			if err != nil {
				t.Fatal(err)
			}
			entries := transcriptgen.Transcript(9, 3)
			for i, e := range entries {
				e.Id = fmt.Sprintf("e%d", i+1)
			}
			if err := s.Append(ctx, sess.ID, entries...); err != nil {
				t.Fatal(err)
			}
			if _, err := rawDB(t, path).Exec(tc.tamper); err != nil {
				t.Fatal(err)
			}
			_, err = s.Path(ctx, sess.ID)
			var ce *persistence.CorruptEntryError
			if !errors.As(err, &ce) || ce.SessionID != sess.ID || ce.EntryID != tc.wantEntry {
				t.Fatalf("Path: %v, want a *CorruptEntryError for entry %s", err, tc.wantEntry)
			}
		})
	}
}

func TestCloseTwice(t *testing.T) {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agentd.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.GetSession(context.Background(), "x"); err == nil {
		t.Fatal("GetSession after Close succeeded")
	}
}

// Writes that share a commit do not share a failure: when one write of a
// batch fails, the others commit without it.
func TestFailingWritesInASharedCommit(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agentd.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	const writers = 64
	var wg sync.WaitGroup
	errs := make([]error, writers)
	start := make(chan struct{})
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			e := transcriptgen.Transcript(uint64(i), 1)[0]
			switch i % 3 {
			case 0:
				errs[i] = s.Append(ctx, "no-such-session", e)
			case 1:
				e.Id = "taken" // only the first of these may succeed
				errs[i] = s.Append(ctx, sess.ID, e)
			default:
				errs[i] = s.Append(ctx, sess.ID, e)
			}
		}()
	}
	close(start)
	wg.Wait()
	var ok, taken int
	for i, err := range errs {
		switch i % 3 {
		case 0:
			if !errors.Is(err, persistence.ErrNotFound) {
				t.Fatalf("append %d to a missing session: %v", i, err)
			}
		case 1:
			if err == nil {
				taken++
			} else if !errors.Is(err, persistence.ErrConflict) {
				t.Fatalf("append %d of a taken id: %v", i, err)
			}
		default:
			if err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
			ok++
		}
	}
	path, err := s.Path(ctx, sess.ID)
	if err != nil || taken != 1 || len(path) != ok+1 {
		t.Fatalf("%d entries stored (%v), want %d; the taken id went in %d times", len(path), err, ok+1, taken)
	}
}
