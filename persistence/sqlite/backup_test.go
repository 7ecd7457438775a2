package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/internal/transcriptgen"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/sqlite"
)

// A backup taken while the owner appends holds every entry committed
// before it began, opens as a database of its own, and Restore puts it in
// place of another database, but never of one an owner serves.
func TestBackupWhileWritingAndRestore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "agentd.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{ID: "busy"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, sess.ID, transcriptgen.Transcript(1, 50)...); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := uint64(2); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.Append(ctx, sess.ID, transcriptgen.Transcript(i, 5)...); err != nil {
				t.Error(err)
				return
			}
		}
	})
	out := filepath.Join(dir, "backup.db")
	err = sqlite.Backup(ctx, path, out)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlite.Backup(ctx, path, out); err == nil {
		t.Fatal("a backup overwrote an existing file")
	}

	// The copy is a database of its own.
	restoredPath := filepath.Join(t.TempDir(), "agentd.db")
	if err := sqlite.Restore(ctx, out, path); !errors.Is(err, sqlite.ErrLocked) {
		t.Fatalf("restore over a served database: %v", err)
	}
	if err := sqlite.Restore(ctx, out, restoredPath); err != nil {
		t.Fatal(err)
	}
	restored, err := sqlite.Open(ctx, restoredPath)
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Close()
	backedUp, err := restored.Path(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	live, err := s.Path(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(backedUp) < 50 || len(backedUp) > len(live) {
		t.Fatalf("the backup holds %d entries; before it began there were 50, at the end %d", len(backedUp), len(live))
	}
	for i, e := range backedUp {
		if !proto.Equal(e, live[i]) {
			t.Fatalf("entry %d of the backup is %s, the database's %s", i, e.GetId(), live[i].GetId())
		}
	}
}
