package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

func recordsEntry(text string) *agentdv1.Entry {
	return &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{
		User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: text}}}}}}}}}
}

// openRecordsStore opens a store in a scratch folder, closed after t.
func openRecordsStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "records.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// sameSession fails unless got and want are the same record.
func sameSession(t *testing.T, when string, got, want *persistence.Session) {
	t.Helper()
	if got.ID != want.ID || got.Title != want.Title || got.LeafEntryID != want.LeafEntryID || got.LastSeq != want.LastSeq ||
		!got.CreateTime.Equal(want.CreateTime) || !got.UpdateTime.Equal(want.UpdateTime) || got.Tenant != want.Tenant ||
		got.Origin != want.Origin || !proto.Equal(got.Config, want.Config) || fmt.Sprint(got.Labels) != fmt.Sprint(want.Labels) {
		t.Fatalf("%s: GetSession returned\n%+v\nthe database holds\n%+v", when, got, want)
	}
}

// TestSessionRecordsStayTrue: after every kind of write, GetSession
// (served from the record cache once read) returns what the database
// holds, and a caller changing a returned record changes nothing stored.
func TestSessionRecordsStayTrue(t *testing.T) {
	ctx := context.Background()
	s := openRecordsStore(t)
	sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{Title: "t", Labels: map[string]string{"team": "a"},
		Config: &agentdv1.SessionConfig{SystemPrompt: "one"}})
	if err != nil {
		t.Fatal(err)
	}
	id := sess.ID
	check := func(when string) {
		t.Helper()
		for range 2 { // a miss that fills, then a hit
			got, err := s.GetSession(ctx, id)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			want, err := s.readSession(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			sameSession(t, when, got, want)
			// The caller's copy is the caller's.
			got.Config.SystemPrompt, got.Labels["team"], got.Title = "changed", "changed", "changed"
		}
	}
	check("after create")
	first, second := recordsEntry("one"), recordsEntry("two")
	steps := []struct {
		name  string
		write func() error
	}{
		{"an append", func() error { return s.Append(ctx, id, first, second) }},
		{"a branch", func() error {
			e := recordsEntry("branch")
			e.ParentId = first.GetId()
			return s.Append(ctx, id, e)
		}},
		{"a moved leaf", func() error { return s.SetLeaf(ctx, id, second.GetId()) }},
		{"a title", func() error {
			title := "new"
			_, err := s.UpdateSession(ctx, id, persistence.SessionUpdate{Title: &title})
			return err
		}},
		{"a config", func() error {
			_, err := s.UpdateSession(ctx, id, persistence.SessionUpdate{Config: &agentdv1.SessionConfig{SystemPrompt: "two"}})
			return err
		}},
		{"labels", func() error {
			_, err := s.UpdateSession(ctx, id, persistence.SessionUpdate{SetLabels: true, Labels: map[string]string{"team": "b", "x": "y"}})
			return err
		}},
		{"a redaction", func() error {
			tomb := recordsEntry("[redacted]")
			tomb.Id = first.GetId()
			return s.Redact(ctx, id, []*agentdv1.Entry{tomb}, &agentdv1.Entry{Payload: &agentdv1.Entry_RedactionNotice{RedactionNotice: &agentdv1.RedactionNotice{EntryIds: []string{first.GetId()}}}})
		}},
		{"a leaf before the first entry", func() error { return s.SetLeaf(ctx, id, "") }},
		{"a new root", func() error { return s.Append(ctx, id, recordsEntry("root")) }},
	}
	for _, st := range steps {
		if err := st.write(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		check("after " + st.name)
	}
	// Deleted, then created again under the same id by another tenant.
	if err := s.DeleteSession(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSession(ctx, id); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("GetSession of a deleted session: %v, want not found", err)
	}
	if _, err := s.CreateSession(ctx, persistence.CreateSessionParams{ID: id, Tenant: "other"}); err != nil {
		t.Fatal(err)
	}
	check("after the id was reused")
}

// TestSessionRecordsUnderConcurrentWrites: readers filling the cache
// while appends commit never leave a stale record behind (run with -race).
func TestSessionRecordsUnderConcurrentWrites(t *testing.T) {
	ctx := context.Background()
	s := openRecordsStore(t)
	sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	const appends = 300
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.GetSession(ctx, sess.ID); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for i := range appends {
		if err := s.Append(ctx, sess.ID, recordsEntry(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			title := fmt.Sprint(i)
			if _, err := s.UpdateSession(ctx, sess.ID, persistence.SessionUpdate{Title: &title}); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	got, err := s.GetSession(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.readSession(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	sameSession(t, "after concurrent appends", got, want)
	if got.LastSeq != appends {
		t.Fatalf("LastSeq %d, want %d", got.LastSeq, appends)
	}
}

// TestRecordReadBeforeACommitIsNotCached: a record read before a commit
// of its session, and offered after it, is not kept; one read after is;
// a commit that only read the session changes nothing.
func TestRecordReadBeforeACommitIsNotCached(t *testing.T) {
	c := newRecordCache()
	old := &persistence.Session{ID: "s", Config: &agentdv1.SessionConfig{}, Labels: map[string]string{}}
	gen := c.generation("s")
	c.committed(map[string]stagedSession{"s": {state: sessionCache{leaf: "e1", lastSeq: 1}, appended: 1}})
	c.fill(gen, old)
	if _, ok := c.get("s"); ok {
		t.Fatal("a record read before a commit of its session was cached")
	}
	gen = c.generation("s")
	c.committed(map[string]stagedSession{"s": {state: sessionCache{leaf: "e1", lastSeq: 1}}}) // read only
	c.fill(gen, &persistence.Session{ID: "s", LeafEntryID: "e1", LastSeq: 1, Config: &agentdv1.SessionConfig{}})
	got, ok := c.get("s")
	if !ok || got.LeafEntryID != "e1" || got.LastSeq != 1 {
		t.Fatalf("a record read after the commit: %v, %v", got, ok)
	}
	c.clear()
	if _, ok := c.get("s"); ok {
		t.Fatal("clear kept a record")
	}
}
