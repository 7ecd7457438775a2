package agent

import (
	"container/list"
	"context"
	"sync"

	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// DefaultContextCacheBytes is Options.ContextCacheBytes when it is 0.
const DefaultContextCacheBytes = 32 << 20

// contextCache keeps, for the sessions whose runs ended most recently, the
// context path the run ended with (what the store's ContextPath would
// return), so the session's next prompt neither reads nor decodes its
// conversation again: without it every prompt of a long conversation
// costs in proportion to its length (docs/ARCHITECTURE.md, "Context
// cache"). An entry is used only while the session's identity, leaf and
// LastSeq are what they were when the run ended: any change to the tree
// (an append by anyone, a redaction's notice, a moved leaf, a deleted and
// recreated session) makes it a miss, on this replica or another. The
// entries are shared by the runs that use them and never modified.
type contextCache struct {
	limit int // bytes, as pathSize counts them
	// report is told the bytes held after each change.
	report func(bytes int)

	mu    sync.Mutex
	bytes int
	byID  map[string]*list.Element // of *cachedContext
	order list.List                // most recently used first
}

// contextKey is what a cached path is valid for.
type contextKey struct {
	tenant string
	// created tells a session from a later one of the same id.
	created int64
	leaf    string
	lastSeq uint64
}

// keyOf is the key of the session as read.
func keyOf(sess *persistence.Session) contextKey {
	return contextKey{tenant: sess.Tenant, created: sess.CreateTime.UnixNano(), leaf: sess.LeafEntryID, lastSeq: sess.LastSeq}
}

type cachedContext struct {
	sessionID string
	key       contextKey
	path      []*agentdv1.Entry
	size      int
	// tokens are the estimates of path's messages
	// (contextview.Builder.SizesOf).
	tokens map[*agentdv1.AgentMessage]int64
}

// newContextCache returns a cache of at most limit bytes (0:
// DefaultContextCacheBytes) that reports what it holds to report; nil (no
// cache) when limit is negative.
func newContextCache(limit int, report func(bytes int)) *contextCache {
	if limit < 0 {
		return nil
	}
	if limit == 0 {
		limit = DefaultContextCacheBytes
	}
	return &contextCache{limit: limit, report: report, byID: map[string]*list.Element{}}
}

// take removes the session's cached context and returns it when it was
// cached for key: the run that takes it owns it (its token map grows as
// the run goes on) and puts its own back when it ends.
func (c *contextCache) take(sessionID string, key contextKey) (*cachedContext, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[sessionID]
	if !ok {
		return nil, false
	}
	cc := el.Value.(*cachedContext)
	c.removeLocked(el)
	c.report(c.bytes)
	if cc.key != key {
		return nil, false
	}
	cc.path = cc.path[:len(cc.path):len(cc.path)]
	return cc, true
}

// keeps says whether the cache keeps a path of size bytes: not one
// smaller than 1/256 of the cache (128 KiB of the default, about a
// hundred small entries, reads back in well under a millisecond: many
// short sessions would fill the cache for little), nor one larger than
// half of it (one long conversation must not evict every other).
func (c *contextCache) keeps(size int) bool {
	return c != nil && size >= c.limit/256 && size <= c.limit/2
}

// put caches path for key, replacing what the session had, and drops the
// least recently used sessions beyond the limit; a path the cache does not
// keep only drops what the session had.
func (c *contextCache) put(sessionID string, key contextKey, path []*agentdv1.Entry, size int, tokens map[*agentdv1.AgentMessage]int64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked(sessionID)
	if !c.keeps(size) {
		c.report(c.bytes)
		return
	}
	c.byID[sessionID] = c.order.PushFront(&cachedContext{sessionID: sessionID, key: key, path: path, size: size, tokens: tokens})
	c.bytes += size
	for c.bytes > c.limit {
		c.removeLocked(c.order.Back())
	}
	c.report(c.bytes)
}

// drop forgets the session's path.
func (c *contextCache) drop(sessionID string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.forgetLocked(sessionID) {
		c.report(c.bytes)
	}
}

// forgetLocked removes the session's path, if the cache holds one.
func (c *contextCache) forgetLocked(sessionID string) bool {
	el, ok := c.byID[sessionID]
	if ok {
		c.removeLocked(el)
	}
	return ok
}

func (c *contextCache) removeLocked(el *list.Element) {
	cc := c.order.Remove(el).(*cachedContext)
	delete(c.byID, cc.sessionID)
	c.bytes -= cc.size
}

// entryOverhead is what an entry is counted beyond its encoded size: the
// Go objects it decodes to (messages, oneof wrappers, string headers,
// argument maps). Estimated from agentd's RSS after 1,000 sessions of ten
// tool turns with their paths cached: their small entries took about
// twice their encoded size, about 1 KiB more; long texts take about
// their length.
const entryOverhead = 1 << 10

// pathSize is what a path counts against the cache: about the memory its
// decoded entries take.
func pathSize(path []*agentdv1.Entry) int {
	n := 0
	for _, e := range path {
		n += proto.Size(e) + entryOverhead
	}
	return n
}

// runTranscript follows what a run appends to its session, so that when it
// ends its context path is known without reading it back: the path the
// run started from, then every entry it stored, each of which must hang
// below the one before. Anything else (a failed append, a moved leaf, an
// entry on another branch) makes the run's path unknown, and nothing is
// cached.
type runTranscript struct {
	mu       sync.Mutex
	key      contextKey // the session when the run read base
	base     []*agentdv1.Entry
	baseSize int // -1 until measured
	// tokens are the estimates known of base's messages, for the run's
	// context view; nil when base was read from the store.
	tokens   map[*agentdv1.AgentMessage]int64
	appended []*agentdv1.Entry
	broken   bool
}

// stored notes entries the run stored (filled in by Append).
func (t *runTranscript) stored(entries []*agentdv1.Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range entries {
		if e.GetParentId() != t.leafLocked() {
			t.broken = true
		}
		t.appended = append(t.appended, e)
	}
}

// breaks notes a write whose effect on the path is not followed.
func (t *runTranscript) breaks() {
	t.mu.Lock()
	t.broken = true
	t.mu.Unlock()
}

func (t *runTranscript) leafLocked() string {
	if n := len(t.appended); n > 0 {
		return t.appended[n-1].GetId()
	}
	if n := len(t.base); n > 0 {
		return t.base[n-1].GetId()
	}
	return ""
}

// result is the run's context path and the key it is valid for; false
// when it is not known.
func (t *runTranscript) result() (contextKey, []*agentdv1.Entry, int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.broken {
		return contextKey{}, nil, 0, false
	}
	key := t.key
	key.leaf = t.leafLocked()
	key.lastSeq += uint64(len(t.appended))
	path := append(t.base[:len(t.base):len(t.base)], t.appended...)
	if start := persistence.ContextStart(path); start > 0 {
		// The run compacted: its context now starts at the new summary.
		path = path[start:]
		return key, path, pathSize(path), true
	}
	size := t.baseSize
	if size < 0 {
		size = pathSize(t.base)
	}
	return key, path, size + pathSize(t.appended), true
}

// recordingWriter is a run's writer that tells its transcript what the
// run stored in its session.
type recordingWriter struct {
	persistence.RunWriter
	sessionID  string
	transcript *runTranscript
}

// Append is Store.Append, noted.
func (w recordingWriter) Append(ctx context.Context, sessionID string, entries ...*agentdv1.Entry) error {
	err := w.RunWriter.Append(ctx, sessionID, entries...)
	if sessionID != w.sessionID {
		return err
	}
	if err != nil {
		// Even a failed write may have landed (a lost commit reply).
		w.transcript.breaks()
		return err
	}
	w.transcript.stored(entries)
	return nil
}

// SetLeaf is Store.SetLeaf; the run's path is no longer followed.
func (w recordingWriter) SetLeaf(ctx context.Context, sessionID, entryID string) error {
	if sessionID == w.sessionID {
		w.transcript.breaks()
	}
	return w.RunWriter.SetLeaf(ctx, sessionID, entryID)
}

// runContextPath is the context path a run starts from (see
// contextPathTo): none for a session whose leaf is before any entry (a new
// one, or a new root), the cached one when the session is as the last run
// here left it, the store's otherwise. It reads the session again, now
// that the run holds it: the record the caller read may predate an append
// that finished since.
func (a *Agent) runContextPath(ctx context.Context, r *Run, parentEntryID string, fromRoot bool) ([]*agentdv1.Entry, error) {
	// Read before the path: an append in between then only makes the
	// key older than the path, which misses later, never hits wrongly.
	sess, err := a.store.GetSession(ctx, r.sessionID)
	if err != nil {
		return nil, err
	}
	t := &runTranscript{key: keyOf(sess), baseSize: -1}
	if a.contexts != nil {
		r.transcript = t
	}
	switch {
	case fromRoot, parentEntryID == "" && sess.LeafEntryID == "":
		t.baseSize = 0
	case parentEntryID == "":
		if cc, ok := a.contexts.take(r.sessionID, t.key); ok {
			t.base, t.baseSize, t.tokens = cc.path, cc.size, cc.tokens
			break
		}
		fallthrough
	default:
		if t.base, err = a.contextPathTo(ctx, r.sessionID, parentEntryID); err != nil {
			return nil, err
		}
	}
	return t.base, nil
}

// followAppends makes the run's writer note what it stores, from now on.
func (a *Agent) followAppends(r *Run) {
	if r.transcript == nil {
		return
	}
	// The lease loop reads the writers of listed runs under a.mu.
	a.mu.Lock()
	r.writer = recordingWriter{RunWriter: r.writer, sessionID: r.sessionID, transcript: r.transcript}
	a.mu.Unlock()
}

// cacheContext keeps the context path of a run that ended for the
// session's next prompt.
func (a *Agent) cacheContext(r *Run) {
	if r.transcript == nil || r.fenced.Load() {
		return
	}
	if key, path, size, ok := r.transcript.result(); ok {
		var tokens map[*agentdv1.AgentMessage]int64
		// Most paths are too short to keep: no map for those.
		if rc := r.context; rc != nil && a.contexts.keeps(size) {
			rc.mu.Lock()
			tokens = rc.view.SizesOf(path)
			rc.mu.Unlock()
		}
		a.contexts.put(r.sessionID, key, path, size, tokens)
		return
	}
	a.contexts.drop(r.sessionID)
}

// transcriptTokens are the token estimates the run's cached path came
// with; nil without.
func (r *Run) transcriptTokens() map[*agentdv1.AgentMessage]int64 {
	if r.transcript == nil {
		return nil
	}
	return r.transcript.tokens
}
