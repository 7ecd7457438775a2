package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/internal/transcriptgen"
	"github.com/agentd/agentd/persistence/sqlite"
)

// TestSessionCacheStale changes a session behind the store's back (as a
// second process on the same file would) after the store cached it: the
// next write must notice and act on the database's state, not the cache.
func TestSessionCacheStale(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		tamper []string // ?1 = session id
		// check runs after the tamper; it gets the entries appended
		// before it.
		check func(t *testing.T, s *sqlite.Store, sessionID string, before []string)
	}{
		{
			name:   "leaf moved elsewhere",
			tamper: []string{`UPDATE sessions SET leaf_entry_id = 'c1' WHERE id = ?1`},
			check: func(t *testing.T, s *sqlite.Store, sessionID string, before []string) {
				e := transcriptgen.Transcript(8, 1)[0]
				if err := s.Append(ctx, sessionID, e); err != nil {
					t.Fatal(err)
				}
				if e.ParentId != "c1" {
					t.Fatalf("appended below %q, want the leaf set behind the store's back (c1)", e.ParentId)
				}
			},
		},
		{
			name: "entry appended by another writer",
			tamper: []string{
				`INSERT INTO entries (key, session_pk, seq, id, parent_id, kind, create_time, payload) SELECT pk * 4294967296 + 4, pk, 4, 'x4', 'c3', 'user', 0, x'' FROM sessions WHERE id = ?1`,
				`UPDATE sessions SET leaf_entry_id = 'x4', next_seq = 5 WHERE id = ?1`,
			},
			check: func(t *testing.T, s *sqlite.Store, sessionID string, before []string) {
				e := transcriptgen.Transcript(8, 1)[0]
				if err := s.Append(ctx, sessionID, e); err != nil {
					t.Fatalf("Append after a foreign append: %v", err)
				}
				if e.ParentId != "x4" {
					t.Fatalf("appended below %q, want x4", e.ParentId)
				}
			},
		},
		{
			name:   "session deleted",
			tamper: []string{`DELETE FROM sessions WHERE id = ?1`},
			check: func(t *testing.T, s *sqlite.Store, sessionID string, before []string) {
				err := s.Append(ctx, sessionID, transcriptgen.Transcript(8, 1)...)
				if !errors.Is(err, persistence.ErrNotFound) {
					t.Fatalf("Append to a session deleted behind the store's back: %v, want ErrNotFound", err)
				}
				if err := s.SetLeaf(ctx, sessionID, before[0]); !errors.Is(err, persistence.ErrNotFound) {
					t.Fatalf("SetLeaf: %v, want ErrNotFound", err)
				}
			},
		},
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
			entries := transcriptgen.Transcript(7, 3)
			var ids []string
			for i, e := range entries {
				e.Id = []string{"c1", "c2", "c3"}[i]
				ids = append(ids, e.Id)
				if err := s.Append(ctx, sess.ID, e); err != nil { // one by one: the cache is warm
					t.Fatal(err)
				}
			}
			db := rawDB(t, path)
			for _, q := range tc.tamper {
				if _, err := db.Exec(q, sess.ID); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			tc.check(t, s, sess.ID, ids)
		})
	}
}

// TestSessionCacheAfterFailure makes appends fail inside the writer and
// checks the next ones still chain onto what was really committed.
func TestSessionCacheAfterFailure(t *testing.T) {
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
	first := transcriptgen.Transcript(10, 1)[0]
	first.Id = "dup"
	if err := s.Append(ctx, sess.ID, first); err != nil {
		t.Fatal(err)
	}
	// The second entry clashes after the first of its batch was inserted.
	batch := transcriptgen.Transcript(11, 2)
	batch[1].Id = "dup"
	if err := s.Append(ctx, sess.ID, batch...); !errors.Is(err, persistence.ErrConflict) {
		t.Fatalf("Append with a duplicate id: %v, want ErrConflict", err)
	}
	next := transcriptgen.Transcript(12, 1)[0]
	if err := s.Append(ctx, sess.ID, next); err != nil {
		t.Fatal(err)
	}
	if next.ParentId != "dup" {
		t.Fatalf("appended below %q after a failed append, want dup", next.ParentId)
	}
	path, err := s.Path(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(path) != 2 || !proto.Equal(path[0], first) || !proto.Equal(path[1], next) {
		t.Fatalf("path after a failed append has %d entries, want [dup, next]", len(path))
	}
	page, err := s.Entries(ctx, sess.ID, persistence.EntriesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != 2 {
		t.Fatalf("%d entries stored, want 2: the failed batch left something behind", len(page.Entries))
	}
}
