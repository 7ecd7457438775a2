package agent

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/agent/contextview"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/memory"
	"github.com/agentd/agentd/provider/faux"
)

// pathCountingStore counts the reads that load a session's path.
type pathCountingStore struct {
	persistence.Store
	pathReads atomic.Int32
}

func (s *pathCountingStore) ContextPath(ctx context.Context, sessionID string) ([]*agentdv1.Entry, error) {
	s.pathReads.Add(1)
	return s.Store.ContextPath(ctx, sessionID)
}

func (s *pathCountingStore) PathTo(ctx context.Context, sessionID, entryID string) ([]*agentdv1.Entry, error) {
	s.pathReads.Add(1)
	return s.Store.PathTo(ctx, sessionID, entryID)
}

func (s *pathCountingStore) Path(ctx context.Context, sessionID string) ([]*agentdv1.Entry, error) {
	s.pathReads.Add(1)
	return s.Store.Path(ctx, sessionID)
}

func userText(s string) *agentdv1.AgentMessage {
	return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{faux.Text(s)}}}}
}

// cacheFixture is an agent over a memory store whose path reads are
// counted.
type cacheFixture struct {
	t     *testing.T
	mem   *memory.Store
	store *pathCountingStore
	a     *Agent
}

func newCacheFixture(t *testing.T) *cacheFixture {
	t.Helper()
	f := &cacheFixture{t: t, mem: memory.New()}
	f.store = &pathCountingStore{Store: f.mem}
	// A small cache keeps short paths too (1/256 of it: 1 KiB).
	a, err := New(context.Background(), f.store, Options{ContextCacheBytes: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	f.a = a
	t.Cleanup(func() {
		if err := a.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

// prompt runs a prompt to its end and returns how many path reads it did.
func (f *cacheFixture) prompt(sessionID, text string) int {
	f.t.Helper()
	before := f.store.pathReads.Load()
	ctx := context.Background()
	runID, err := f.a.Start(ctx, StartRequest{SessionID: sessionID, Prompt: userText(text)})
	if err != nil {
		f.t.Fatalf("Start: %v", err)
	}
	if err := f.a.Follow(ctx, sessionID, runID, 0, FollowOptions{}, func(Event) error { return nil }); err != nil {
		f.t.Fatalf("Follow: %v", err)
	}
	return int(f.store.pathReads.Load() - before)
}

// checkCached fails unless the cache holds, for the session as it is now,
// exactly the path the store reads.
func (f *cacheFixture) checkCached(sessionID, when string) {
	f.t.Helper()
	ctx := context.Background()
	sess, err := f.mem.GetSession(ctx, sessionID)
	if err != nil {
		f.t.Fatal(err)
	}
	cc, ok := f.a.contexts.take(sessionID, keyOf(sess))
	if ok {
		defer f.a.contexts.put(sessionID, cc.key, cc.path, cc.size, cc.tokens)
	}
	if !ok {
		f.t.Fatalf("%s: nothing cached for the session as it is (leaf %q, last seq %d)", when, sess.LeafEntryID, sess.LastSeq)
	}
	stored, err := f.mem.ContextPath(ctx, sessionID)
	if err != nil {
		f.t.Fatal(err)
	}
	if len(cc.path) != len(stored) {
		f.t.Fatalf("%s: cached path has %d entries, the store's %d", when, len(cc.path), len(stored))
	}
	for i := range stored {
		if !proto.Equal(cc.path[i], stored[i]) {
			f.t.Fatalf("%s: entry %d differs:\ncached %v\nstored %v", when, i, cc.path[i], stored[i])
		}
	}
	if want := pathSize(stored); cc.size != want {
		f.t.Fatalf("%s: cached size %d, the path's %d", when, cc.size, want)
	}
	// The token estimates come along, each the message's.
	last := cc.path[len(cc.path)-1].GetMessage()
	if _, ok := cc.tokens[last]; last != nil && !ok {
		f.t.Fatalf("%s: no token estimate cached for the last message", when)
	}
	for m, n := range cc.tokens {
		if n != contextview.Tokens(m) {
			f.t.Fatalf("%s: cached estimate %d, the message's %d", when, n, contextview.Tokens(m))
		}
	}
}

// TestContextCacheHoldsWhatTheStoreWouldRead: across many prompts, with
// automatic compactions inside runs, the path a run leaves in the cache is
// entry for entry what the store's ContextPath returns, and the next
// prompt starts from it without reading the session's path. Every change
// to the tree made between runs, by the agent or straight in the store (as
// another replica would), makes the next prompt read the path again.
func TestContextCacheHoldsWhatTheStoreWouldRead(t *testing.T) {
	f := newCacheFixture(t)
	ctx := context.Background()
	var responses []*agentdv1.AssistantMessage
	for i := range 200 {
		responses = append(responses, faux.Message(faux.Text(fmt.Sprintf("answer %d: %s", i, strings.Repeat("words ", 200)))))
	}
	sess, err := f.store.CreateSession(ctx, persistence.CreateSessionParams{Config: &agentdv1.SessionConfig{
		Compaction: &agentdv1.CompactionSettings{ReserveTokens: 1000, KeepRecentTokens: 1500},
		// No faux Summaries: their script is indexed by reading the path.
		Faux: &agentdv1.FauxScript{Responses: responses, ContextWindow: 6000},
	}})
	if err != nil {
		t.Fatal(err)
	}
	id := sess.ID
	if reads := f.prompt(id, "first"); reads != 0 {
		t.Fatalf("the first prompt read the path %d times; a new session has none to read", reads)
	}
	f.checkCached(id, "after the first prompt")
	for i := range 25 {
		if reads := f.prompt(id, fmt.Sprintf("prompt %d: %s", i, strings.Repeat("more ", 150))); reads != 0 {
			t.Fatalf("prompt %d read the path %d times; it should start from the cache", i, reads)
		}
		f.checkCached(id, fmt.Sprintf("after prompt %d", i))
	}
	all, err := f.mem.Path(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if persistence.ContextStart(all) == 0 {
		t.Fatal("no run compacted; the test must cover a path that changes start")
	}

	changes := []struct {
		name   string
		change func(t *testing.T)
	}{
		{"AppendMessages", func(t *testing.T) {
			if _, err := f.a.AppendMessages(ctx, id, []*agentdv1.AgentMessage{userText("appended by a client")}); err != nil {
				t.Fatal(err)
			}
		}},
		{"an append by another writer", func(t *testing.T) {
			if err := f.mem.Append(ctx, id, &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: userText("from another replica")}}); err != nil {
				t.Fatal(err)
			}
		}},
		{"a redaction", func(t *testing.T) {
			path, err := f.mem.ContextPath(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.a.RedactEntries(ctx, id, Redaction{EntryIDs: []string{path[len(path)-2].GetId()}, Reason: "test"}); err != nil {
				t.Fatal(err)
			}
		}},
		{"a redaction, the leaf then moved back where it was", func(t *testing.T) {
			// The leaf is the one cached again: only LastSeq tells.
			path, err := f.mem.ContextPath(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			leaf := path[len(path)-1].GetId()
			if _, err := f.a.RedactEntries(ctx, id, Redaction{EntryIDs: []string{path[len(path)-2].GetId()}, Reason: "test"}); err != nil {
				t.Fatal(err)
			}
			if err := f.mem.SetLeaf(ctx, id, leaf); err != nil {
				t.Fatal(err)
			}
		}},
		{"a leaf moved back", func(t *testing.T) {
			path, err := f.mem.ContextPath(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.mem.SetLeaf(ctx, id, path[len(path)-3].GetId()); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			c.change(t)
			if reads := f.prompt(id, "after "+c.name); reads == 0 {
				t.Fatalf("the prompt after %s started from the cache", c.name)
			}
			f.checkCached(id, "after "+c.name)
		})
	}
}

// TestContextCacheTellsSessionsOfOneIDApart: a session deleted behind the
// agent's back (by another replica) and created again under its id, by
// another tenant, never starts from the old session's cached path.
func TestContextCacheTellsSessionsOfOneIDApart(t *testing.T) {
	f := newCacheFixture(t)
	ctx := context.Background()
	cfg := &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}}
	if _, err := f.mem.CreateSession(ctx, persistence.CreateSessionParams{ID: "reused", Tenant: "acme", Config: cfg}); err != nil {
		t.Fatal(err)
	}
	f.prompt("reused", "acme's secret")
	old, err := f.mem.Path(ctx, "reused")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.mem.DeleteSession(ctx, "reused"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.mem.CreateSession(ctx, persistence.CreateSessionParams{ID: "reused", Tenant: "globex", Config: cfg}); err != nil {
		t.Fatal(err)
	}
	// The new session even has entries of the old ids, so its leaf and
	// LastSeq are the old session's: only tenant and creation tell.
	var copies []*agentdv1.Entry
	for _, e := range old {
		copies = append(copies, &agentdv1.Entry{Id: e.GetId(), Payload: &agentdv1.Entry_Message{Message: userText("globex's own")}})
	}
	if err := f.mem.Append(ctx, "reused", copies...); err != nil {
		t.Fatal(err)
	}
	if reads := f.prompt("reused", "hello"); reads != 1 {
		t.Fatalf("the new session's prompt read its path %d times, want 1", reads)
	}
	path, err := f.mem.Path(ctx, "reused")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range path {
		if strings.Contains(e.String(), "secret") {
			t.Fatalf("the new session holds the old one's content: %v", e)
		}
	}
	f.checkCached("reused", "after the new session's prompt")
}

// TestContextCacheStaysWithinItsLimit: the least recently used sessions go
// first, a path under 1/256 or over half of the cache is not kept, a run
// takes its session's context (so none other shares it), and a stale key
// is a miss that frees the entry.
func TestContextCacheStaysWithinItsLimit(t *testing.T) {
	const u = 1 << 20 // one path
	var reported int
	c := newContextCache(9*u/2, func(n int) { reported = n })
	key := func(seq uint64) contextKey { return contextKey{leaf: "l", lastSeq: seq} }
	for i := range 4 {
		c.put(fmt.Sprint(i), key(1), nil, u, nil)
	}
	if c.bytes != 4*u || reported != c.bytes {
		t.Fatalf("%d bytes held (%d reported), want %d", c.bytes, reported, 4*u)
	}
	// A run of session 0 takes its context and puts its own back.
	cc, ok := c.take("0", key(1))
	if !ok {
		t.Fatal("session 0 missing")
	}
	if _, again := c.take("0", key(1)); again || reported != 3*u {
		t.Fatalf("a taken context is still there (again %v, %d bytes reported)", again, reported)
	}
	c.put("0", key(2), cc.path, u, nil)
	c.put("4", key(1), nil, u, nil)
	if _, ok := c.take("1", key(1)); ok {
		t.Fatal("session 1, the least recently used, was kept past the limit")
	}
	if _, ok := c.take("0", key(2)); !ok {
		t.Fatal("session 0, used recently, was dropped")
	}
	if c.bytes > c.limit || reported != c.bytes {
		t.Fatalf("%d bytes held (%d reported), limit %d", c.bytes, reported, c.limit)
	}
	for _, size := range []int{c.limit/2 + 1, c.limit/256 - 1} {
		c.put("odd", key(1), nil, size, nil)
		if _, ok := c.take("odd", key(1)); ok {
			t.Fatalf("a path of %d bytes was kept in a cache of %d", size, c.limit)
		}
	}
	held := c.bytes
	if _, ok := c.take("2", key(2)); ok {
		t.Fatal("a stale key hit")
	}
	if c.bytes != held-u || reported != c.bytes || len(c.byID) != c.order.Len() {
		t.Fatalf("a stale entry was not freed: %d bytes, %d ids, %d in order", c.bytes, len(c.byID), c.order.Len())
	}
	if newContextCache(-1, nil) != nil {
		t.Fatal("a negative limit keeps a cache")
	}
}

// TestRunTranscriptFollowsOnlyAnUnbrokenChain: a run's path is known only
// while each entry it stores hangs below the one before; a branch, a failed
// append or a moved leaf makes it unknown, and writes to other sessions do
// not count.
func TestRunTranscriptFollowsOnlyAnUnbrokenChain(t *testing.T) {
	ctx := context.Background()
	entry := func(text string) *agentdv1.Entry {
		return &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: userText(text)}}
	}
	start := func(t *testing.T) (*memory.Store, string, recordingWriter) {
		mem := memory.New()
		sess, err := mem.CreateSession(ctx, persistence.CreateSessionParams{})
		if err != nil {
			t.Fatal(err)
		}
		if err := mem.Append(ctx, sess.ID, entry("a"), entry("b")); err != nil {
			t.Fatal(err)
		}
		if sess, err = mem.GetSession(ctx, sess.ID); err != nil {
			t.Fatal(err)
		}
		base, err := mem.ContextPath(ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		return mem, sess.ID, recordingWriter{RunWriter: mem, sessionID: sess.ID, transcript: &runTranscript{key: keyOf(sess), base: base, baseSize: -1}}
	}
	t.Run("a chain", func(t *testing.T) {
		mem, id, w := start(t)
		other, err := mem.CreateSession(ctx, persistence.CreateSessionParams{})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Append(ctx, id, entry("c")); err != nil {
			t.Fatal(err)
		}
		if err := w.Append(ctx, other.ID, entry("elsewhere")); err != nil {
			t.Fatal(err)
		}
		if err := w.Append(ctx, id, entry("d"), entry("e")); err != nil {
			t.Fatal(err)
		}
		key, path, size, ok := w.transcript.result()
		sess, err := mem.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := mem.ContextPath(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if !ok || key != keyOf(sess) || len(path) != len(stored) || size != pathSize(stored) {
			t.Fatalf("result %v %v (%d entries, %d bytes); the store has %v (%d entries, %d bytes)", ok, key, len(path), size, keyOf(sess), len(stored), pathSize(stored))
		}
	})
	breaks := []struct {
		name  string
		write func(mem *memory.Store, id string, w recordingWriter) error
	}{
		{"a branch", func(mem *memory.Store, id string, w recordingWriter) error {
			e := entry("branch")
			e.ParentId = w.transcript.base[0].GetId()
			return w.Append(ctx, id, e)
		}},
		{"a failed append", func(mem *memory.Store, id string, w recordingWriter) error {
			e := entry("orphan")
			e.ParentId = "no-such-entry"
			if err := w.Append(ctx, id, e); err == nil {
				return fmt.Errorf("an append below a missing parent succeeded")
			}
			return nil
		}},
		{"a moved leaf", func(mem *memory.Store, id string, w recordingWriter) error {
			return w.SetLeaf(ctx, id, w.transcript.base[0].GetId())
		}},
	}
	for _, b := range breaks {
		t.Run(b.name, func(t *testing.T) {
			mem, id, w := start(t)
			if err := b.write(mem, id, w); err != nil {
				t.Fatal(err)
			}
			if _, _, _, ok := w.transcript.result(); ok {
				t.Fatalf("after %s the run's path still counts as known", b.name)
			}
		})
	}
}
