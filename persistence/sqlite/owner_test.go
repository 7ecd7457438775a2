package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/transcriptgen"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/sqlite"
)

// ownerEnvDB names the database TestOwnerChild opens.
const ownerEnvDB = "AGENTD_OWNER_DB"

// TestOwnerChild is the first owner in TestSecondProcessIsRefused. It opens
// the store, says so, appends one entry per line it reads, and closes the
// store at the end of its input.
func TestOwnerChild(t *testing.T) {
	path := os.Getenv(ownerEnvDB)
	if path == "" {
		t.Skip("only runs as the child of TestSecondProcessIsRefused")
	}
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := s.CreateSession(ctx, persistence.CreateSessionParams{ID: "owned"})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("open")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if err := s.Append(ctx, sess.ID, transcriptgen.Transcript(1, 1)...); err != nil {
			t.Fatal(err)
		}
		fmt.Println("appended")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// A database has one owner: while one process has the store open, another
// cannot open it, and is told which process has it, without waiting for
// the busy timeout. The owner keeps working, and once it closes the store
// the file opens again.
func TestSecondProcessIsRefused(t *testing.T) {
	if os.Getenv(ownerEnvDB) != "" {
		t.Skip("this is the child")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "owned.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestOwnerChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), ownerEnvDB+"="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	waitFor := func(want string) {
		t.Helper()
		for lines.Scan() {
			if lines.Text() == want {
				return
			}
		}
		t.Fatalf("child ended before %q; stderr:\n%s", want, stderr.String())
	}
	waitFor("open")

	// A minute of busy timeout would show as a hang: the refusal must not
	// wait for it.
	_, err = sqlite.Open(ctx, path, sqlite.WithBusyTimeout(60e9))
	if !errors.Is(err, sqlite.ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	for _, want := range []string{path, fmt.Sprintf("process %d", cmd.Process.Pid), "--db"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("second Open error %q does not name %q", err, want)
		}
	}

	// The owner is unharmed.
	if _, err := io.WriteString(stdin, "append\n"); err != nil {
		t.Fatal(err)
	}
	waitFor("appended")
	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("owner: %v; stderr:\n%s", err, stderr.String())
	}
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("Open after the owner closed: %v", err)
	}
	defer s.Close()
	if path, err := s.Path(ctx, "owned"); err != nil || len(path) != 1 {
		t.Fatalf("the owner's append: %d entries, %v", len(path), err)
	}
}
