package main

import (
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// agentd backup under a load of concurrent prompts, then agentd restore
// into a new place and an agentd serving it: every message a client saw
// end before the backup began is there, equal to its message_end, and
// every message there is one some client saw end.
func TestBackupUnderLoadAndRestore(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "agentd.db")
	p := startProc(t, db)
	c := p.client()
	type seen struct {
		msg *agentdv1.AgentMessage
		at  time.Time
	}
	var mu sync.Mutex
	ends := map[string]seen{}
	var sessions []string
	answer := &agentdv1.AssistantMessage{Content: texts("A streamed answer of some length, to keep the run going while the backup runs.")}
	var wg sync.WaitGroup
	for i := range 8 {
		id := createSession(t, c, &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{TokensPerSecond: 60,
			Responses: []*agentdv1.AssistantMessage{answer, answer, answer}}})
		sessions = append(sessions, id)
		wg.Go(func() {
			for j := range 3 {
				stream, err := c.Prompt(testCtx(t), &agentdv1.PromptRequest{SessionId: id, Content: texts("prompt " + strconv.Itoa(i) + "/" + strconv.Itoa(j))})
				if err != nil {
					t.Error(err)
					return
				}
				for {
					ev, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						t.Error(err)
						return
					}
					if end := ev.GetMessageEnd(); end != nil {
						mu.Lock()
						ends[end.GetEntryId()] = seen{msg: end.GetMessage(), at: time.Now()}
						mu.Unlock()
					}
				}
			}
		})
	}
	time.Sleep(700 * time.Millisecond)
	out := filepath.Join(dir, "backup.db")
	began := time.Now()
	if b, err := exec.Command(agentdBinary(t), "backup", "--db", db, "--to", out).CombinedOutput(); err != nil {
		t.Fatalf("agentd backup: %v\n%s", err, b)
	}
	wg.Wait()

	restoredDB := filepath.Join(t.TempDir(), "agentd.db")
	if b, err := exec.Command(agentdBinary(t), "restore", "--from", out, "--db", db).CombinedOutput(); err == nil {
		t.Fatalf("agentd restore over the database an agentd serves succeeded:\n%s", b)
	}
	if b, err := exec.Command(agentdBinary(t), "restore", "--from", out, "--db", restoredDB).CombinedOutput(); err != nil {
		t.Fatalf("agentd restore: %v\n%s", err, b)
	}
	r := startProc(t, restoredDB).client()
	restored := map[string]*agentdv1.AgentMessage{}
	for _, id := range sessions {
		resp, err := r.GetTranscript(testCtx(t), &agentdv1.GetTranscriptRequest{SessionId: id, PageSize: 1000})
		if err != nil {
			t.Fatalf("the restored database lacks session %s: %v", id, err)
		}
		for _, e := range resp.GetEntries() {
			restored[e.GetId()] = e.GetMessage()
		}
	}
	mu.Lock()
	defer mu.Unlock()
	before := 0
	for id, s := range ends {
		got, ok := restored[id]
		if s.at.Before(began) {
			before++
			if !ok {
				t.Fatalf("entry %s, committed before the backup began, is not in it", id)
			}
		}
		if ok && !proto.Equal(got, s.msg) {
			t.Fatalf("entry %s differs in the backup", id)
		}
	}
	for id := range restored {
		if _, ok := ends[id]; !ok {
			t.Fatalf("the backup holds entry %s that no client saw", id)
		}
	}
	t.Logf("entries seen before the backup began: %d, in the backup: %d, in all: %d", before, len(restored), len(ends))
	if before == 0 || len(ends) != 8*3*2 {
		t.Fatal("no entry was committed before the backup began: the load did not overlap it")
	}
}
