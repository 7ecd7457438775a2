// Package memory is the in-memory [persistence.Store]: the reference engine
// the conformance suite (persistence/storetest) is checked against first,
// and the store of tests that need neither cgo nor files.
//
// It keeps what a real engine writes to disk, entry payloads and event
// batches, as encoded bytes, so a caller can never change a stored entry
// through a pointer it kept, and a restart (Reopen) returns exactly the
// bytes that were written. Nothing survives the process.
//
// NewShared is the in-memory [persistence.Shared], for tests of several
// replicas in one process: each replica opens its own handle (Peer) onto
// one database, and leases run on a clock the test moves (WithClock,
// ManualClock).
package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// Store is the in-memory [persistence.Store]. Safe for concurrent use.
type Store struct {
	d      *data
	closed bool // guarded by d.mu
}

var _ persistence.Store = (*Store)(nil)

// data is what a Store holds; Reopen hands it to a new Store, as a restart
// of a durable engine would find its files.
type data struct {
	mu       sync.RWMutex
	now      func() time.Time
	nextPK   int64
	sessions map[string]*session
	runs     map[string]*run
	spend    []spendRow

	// Of Shared: the controls between replicas, by id, and the watchers
	// of each topic, of every handle.
	controls    map[int64]*control
	nextControl int64
	watchers    map[string]map[*watcher]struct{}
	// The feed of changes between replicas (Shared.AppendFeed), oldest
	// first, and the seq of the last change pruned from it.
	feed       []feedRow
	feedSeq    int64
	feedPruned int64
}

// spendRow is what one stored message cost; it outlives its session.
type spendRow struct {
	sessionPK int64
	tenant    string
	time      time.Time
	spent     persistence.Spend
}

type session struct {
	pk             int64
	id, title      string
	labels         map[string]string
	config         []byte // agentd.v1.SessionConfig
	create, update time.Time
	leaf           string
	origin         persistence.Origin
	tenant         string
	entries        []storedEntry // append order
	index          map[string]int
}

type storedEntry struct {
	seq        int64
	id, parent string
	summary    bool   // a compaction summary
	answer     bool   // an assistant message
	payload    []byte // agentd.v1.Entry
}

type run struct {
	rec    persistence.Run
	events []persistence.Event
	// generation is the claim's fencing generation (Shared); 0 for a run
	// without owner.
	generation int64
}

// errClosed is returned by calls after Close.
var errClosed = errors.New("memory store: closed")

// Option changes how New and NewShared configure the store.
type Option func(*options)

type options struct {
	now func() time.Time
}

// WithClock sets the store's clock: the times it fills in (sessions,
// entries, runs) and, on a Shared store, the clock leases start, expire
// and are renewed on, the database's clock of a real engine. Default
// time.Now; tests pass a ManualClock's Now to move time by hand.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// New returns an empty store.
func New(opts ...Option) *Store {
	return &Store{d: newData(opts)}
}

// newData is an empty database configured by opts.
func newData(opts []Option) *data {
	o := options{now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	return &data{now: o.now, sessions: map[string]*session{}, runs: map[string]*run{},
		controls: map[int64]*control{}, watchers: map[string]map[*watcher]struct{}{}}
}

// Reopen closes s and returns a new store over the same data, as a restart
// of agentd over the same database would see it.
func Reopen(s *Store) *Store {
	_ = s.Close()
	return &Store{d: s.d}
}

// Close implements [persistence.Store].
func (s *Store) Close() error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.closed = true
	return nil
}

// read runs fn under the read lock unless the store is closed.
func (s *Store) read(fn func(d *data) error) error {
	s.d.mu.RLock()
	defer s.d.mu.RUnlock()
	if s.closed {
		return errClosed
	}
	return fn(s.d)
}

// write runs fn under the write lock unless the store is closed.
func (s *Store) write(fn func(d *data) error) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return errClosed
	}
	return fn(s.d)
}

// now returns the clock without its monotonic reading, so times compare
// equal after a round trip as they do through a database.
func (d *data) nowTime() time.Time { return d.now().Round(0) }

func (d *data) session(id string) (*session, error) {
	sess, ok := d.sessions[id]
	if !ok {
		return nil, persistence.SessionNotFound(id)
	}
	return sess, nil
}

// --- sessions ---

// CreateSession implements [persistence.Store].
func (s *Store) CreateSession(_ context.Context, p persistence.CreateSessionParams) (*persistence.Session, error) {
	id, raw, err := p.Prepare()
	if err != nil {
		return nil, err
	}
	var out *persistence.Session
	err = s.write(func(d *data) error {
		if _, dup := d.sessions[id]; dup {
			return &persistence.Error{Kind: persistence.ErrConflict, SessionID: id, Detail: "a session with this id exists"}
		}
		d.nextPK++
		now := d.nowTime()
		sess := &session{pk: d.nextPK, id: id, title: p.Title, labels: maps.Clone(p.Labels), config: raw, origin: p.Origin, tenant: p.Tenant,
			create: now, update: now, index: map[string]int{}}
		if sess.labels == nil {
			sess.labels = map[string]string{}
		}
		d.sessions[id] = sess
		out, err = sess.record()
		return err
	})
	return out, err
}

// lastSeq is the seq of the session's newest entry, 0 for none.
func (sess *session) lastSeq() uint64 {
	if len(sess.entries) == 0 {
		return 0
	}
	return uint64(sess.entries[len(sess.entries)-1].seq)
}

func (sess *session) record() (*persistence.Session, error) {
	cfg := &agentdv1.SessionConfig{}
	if err := proto.Unmarshal(sess.config, cfg); err != nil {
		return nil, &persistence.Error{Kind: persistence.ErrCorrupt, SessionID: sess.id, Detail: fmt.Sprintf("config: %v", err)}
	}
	return &persistence.Session{ID: sess.id, Title: sess.title, Labels: maps.Clone(sess.labels), Config: cfg, Origin: sess.origin, Tenant: sess.tenant,
		CreateTime: sess.create, UpdateTime: sess.update, LeafEntryID: sess.leaf, LastSeq: sess.lastSeq()}, nil
}

// GetSession implements [persistence.Store].
func (s *Store) GetSession(_ context.Context, sessionID string) (*persistence.Session, error) {
	var out *persistence.Session
	err := s.read(func(d *data) error {
		sess, err := d.session(sessionID)
		if err != nil {
			return err
		}
		out, err = sess.record()
		return err
	})
	return out, err
}

// UpdateSession implements [persistence.Store].
func (s *Store) UpdateSession(_ context.Context, sessionID string, u persistence.SessionUpdate) (*persistence.Session, error) {
	var cfg []byte
	if u.Config != nil {
		var err error
		if cfg, err = proto.Marshal(u.Config); err != nil {
			return nil, &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, Detail: fmt.Sprintf("config: %v", err)}
		}
	}
	var out *persistence.Session
	err := s.write(func(d *data) error {
		sess, err := d.session(sessionID)
		if err != nil {
			return err
		}
		if u.Title != nil {
			sess.title = *u.Title
		}
		if u.SetLabels {
			sess.labels = maps.Clone(u.Labels)
			if sess.labels == nil {
				sess.labels = map[string]string{}
			}
		}
		if cfg != nil {
			sess.config = cfg
		}
		sess.update = d.nowTime()
		out, err = sess.record()
		return err
	})
	return out, err
}

// ContextPath implements [persistence.Store].
func (s *Store) ContextPath(ctx context.Context, sessionID string) ([]*agentdv1.Entry, error) {
	return s.contextPath(ctx, sessionID, false)
}

// PathSinceAnswer implements [persistence.Store].
func (s *Store) PathSinceAnswer(ctx context.Context, sessionID string) ([]*agentdv1.Entry, error) {
	return s.contextPath(ctx, sessionID, true)
}

func (s *Store) contextPath(ctx context.Context, sessionID string, sinceAnswer bool) ([]*agentdv1.Entry, error) {
	var out []*agentdv1.Entry
	err := s.read(func(d *data) error {
		sess, err := d.session(sessionID)
		if err != nil {
			return err
		}
		out = []*agentdv1.Entry{}
		if sess.leaf == "" {
			return nil
		}
		leaf, ok := sess.index[sess.leaf]
		if !ok {
			return persistence.EntryNotFound(sessionID, sess.leaf)
		}
		// Decode only the path from the leaf to the context's start.
		nodes := make([]persistence.PathNode, len(sess.entries))
		for i, st := range sess.entries {
			nodes[i] = persistence.PathNode{Seq: st.seq, ID: st.id, Parent: st.parent, Summary: st.summary, Answer: st.answer}
		}
		path, err := persistence.WalkToRoot(ctx, sessionID, nodes, leaf, persistence.WalkOptions{
			ContextOnly: true,
			SinceAnswer: sinceAnswer,
			FirstKept: func(_ context.Context, id string) (string, error) {
				e, err := sess.decode(sess.entries[sess.index[id]])
				return e.GetMessage().GetCompactionSummary().GetFirstKeptEntryId(), err
			},
		})
		if err != nil {
			return err
		}
		for _, at := range path {
			e, err := sess.decode(sess.entries[at])
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// ListSessions implements [persistence.Store]. Page tokens carry the pk of
// the last session returned, as in the SQLite engine.
func (s *Store) ListSessions(_ context.Context, req persistence.ListSessionsRequest) (*persistence.SessionPage, error) {
	size, before, err := req.Cursor()
	if err != nil {
		return nil, err
	}
	page := &persistence.SessionPage{}
	err = s.read(func(d *data) error {
		var match []*session
		for _, sess := range d.sessions {
			if sess.pk < before && matches(sess.labels, req.LabelFilter) && (req.OriginSessionID == "" || sess.origin.SessionID == req.OriginSessionID) &&
				(req.AllTenants || sess.tenant == req.Tenant) {
				match = append(match, sess)
			}
		}
		slices.SortFunc(match, func(a, b *session) int { return cmp.Compare(b.pk, a.pk) })
		if len(match) > size {
			match = match[:size]
			page.NextPageToken = req.NextPageToken(match[size-1].pk)
		}
		for _, sess := range match {
			rec, err := sess.record()
			if err != nil {
				return err
			}
			page.Sessions = append(page.Sessions, rec)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return page, nil
}

func matches(labels, filter map[string]string) bool {
	for k, v := range filter {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// SessionSpend implements [persistence.Store].
func (s *Store) SessionSpend(_ context.Context, sessionID string) (persistence.Spend, error) {
	var out persistence.Spend
	err := s.read(func(d *data) error {
		sess, err := d.session(sessionID)
		if err != nil {
			return err
		}
		for _, r := range d.spend {
			if r.sessionPK == sess.pk {
				out = out.Add(r.spent)
			}
		}
		return nil
	})
	return out, err
}

// TenantSpend implements [persistence.Store].
func (s *Store) TenantSpend(_ context.Context, tenant string, since time.Time) (persistence.Spend, error) {
	var out persistence.Spend
	err := s.read(func(d *data) error {
		for _, r := range d.spend {
			if r.tenant == tenant && !r.time.Before(since) {
				out = out.Add(r.spent)
			}
		}
		return nil
	})
	return out, err
}

// DeleteSession implements [persistence.Store].
func (s *Store) DeleteSession(_ context.Context, sessionID string) error {
	return s.write(func(d *data) error {
		if _, err := d.session(sessionID); err != nil {
			return err
		}
		delete(d.sessions, sessionID)
		for id, r := range d.runs {
			if r.rec.SessionID == sessionID {
				delete(d.runs, id)
			}
		}
		for id, c := range d.controls {
			if _, ok := d.runs[c.runID]; !ok {
				delete(d.controls, id)
			}
		}
		return nil
	})
}

// --- entries ---

// Append implements [persistence.Store].
func (s *Store) Append(_ context.Context, sessionID string, entries ...*agentdv1.Entry) error {
	if _, err := persistence.CheckAppend(sessionID, entries); err != nil {
		return err
	}
	return s.write(func(d *data) error {
		sess, err := d.session(sessionID)
		if err != nil {
			return err
		}
		return d.append(sess, entries)
	})
}

// append is Append on a session found under the write lock.
func (d *data) append(sess *session, entries []*agentdv1.Entry) error {
	sessionID := sess.id
	parent := sess.leaf
	if p := entries[0].GetParentId(); p != "" {
		if _, ok := sess.index[p]; !ok {
			return persistence.ParentNotInSession(sessionID, p)
		}
		parent = p
	}
	// Work on copies, so a failure leaves the caller's entries as they
	// were; fill the caller's in only once everything is stored.
	filled := make([]*agentdv1.Entry, len(entries))
	for i, e := range entries {
		filled[i] = proto.CloneOf(e)
	}
	leaf, err := persistence.LinkBatch(sessionID, filled, parent, d.nowTime())
	if err != nil {
		return err
	}
	batch := map[string]bool{}
	for _, c := range filled {
		if _, dup := sess.index[c.Id]; dup || batch[c.Id] {
			return &persistence.Error{Kind: persistence.ErrConflict, SessionID: sessionID, EntryID: c.Id, Detail: "an entry with this id exists in the session"}
		}
		batch[c.Id] = true
	}
	stored := make([]storedEntry, len(filled))
	for i, c := range filled {
		raw, err := proto.Marshal(c)
		if err != nil {
			return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, EntryID: c.Id, Detail: fmt.Sprintf("encode: %v", err)}
		}
		stored[i] = storedEntry{seq: int64(len(sess.entries) + i + 1), id: c.Id, parent: c.ParentId, payload: raw,
			summary: c.GetMessage().GetCompactionSummary() != nil, answer: c.GetMessage().GetAssistant() != nil}
	}
	for _, st := range stored {
		sess.index[st.id] = len(sess.entries)
		sess.entries = append(sess.entries, st)
	}
	sess.leaf = leaf
	sess.update = d.nowTime()
	for _, c := range filled {
		if spent, ok := persistence.EntrySpend(c); ok {
			d.spend = append(d.spend, spendRow{sessionPK: sess.pk, tenant: sess.tenant, time: sess.update, spent: spent})
		}
	}
	for i, e := range entries {
		e.Id, e.ParentId, e.Time = filled[i].Id, filled[i].ParentId, filled[i].Time
	}
	return nil
}

// Redact implements [persistence.Store].
func (s *Store) Redact(_ context.Context, sessionID string, replacements []*agentdv1.Entry, notice *agentdv1.Entry) error {
	if _, err := persistence.CheckRedact(sessionID, replacements, notice); err != nil {
		return err
	}
	return s.write(func(d *data) error {
		sess, err := d.session(sessionID)
		if err != nil {
			return err
		}
		payloads := make([][]byte, len(replacements))
		for i, r := range replacements {
			at, ok := sess.index[r.GetId()]
			if !ok {
				return persistence.EntryNotFound(sessionID, r.GetId())
			}
			stored, err := sess.decode(sess.entries[at])
			if err != nil {
				return err
			}
			out, err := persistence.Replaced(sessionID, stored, r)
			if err != nil {
				return err
			}
			if payloads[i], err = proto.Marshal(out); err != nil {
				return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, EntryID: r.GetId(), Detail: fmt.Sprintf("encode: %v", err)}
			}
		}
		if err := d.append(sess, []*agentdv1.Entry{notice}); err != nil {
			return err
		}
		for i, r := range replacements {
			sess.entries[sess.index[r.GetId()]].payload = payloads[i]
		}
		for _, run := range d.runs {
			if run.rec.SessionID == sessionID {
				run.events, run.rec.EventsPruned = nil, true
			}
		}
		return nil
	})
}

// SetLeaf implements [persistence.Store].
func (s *Store) SetLeaf(_ context.Context, sessionID, entryID string) error {
	return s.write(func(d *data) error {
		sess, err := d.session(sessionID)
		if err != nil {
			return err
		}
		return d.setLeaf(sess, entryID)
	})
}

// setLeaf is SetLeaf on a session found under the write lock.
func (d *data) setLeaf(sess *session, entryID string) error {
	if _, ok := sess.index[entryID]; !ok && entryID != "" {
		return persistence.EntryNotFound(sess.id, entryID)
	}
	sess.leaf = entryID
	sess.update = d.nowTime()
	return nil
}

func (sess *session) decode(st storedEntry) (*agentdv1.Entry, error) {
	e, err := persistence.DecodeEntry(sess.id, st.seq, st.id, st.payload)
	if err != nil {
		return nil, err
	}
	if e.GetParentId() != st.parent {
		return nil, &persistence.CorruptEntryError{SessionID: sess.id, EntryID: st.id, Seq: st.seq,
			Err: fmt.Errorf("payload names parent %q, the row %q", e.GetParentId(), st.parent)}
	}
	return e, nil
}

// GetEntry implements [persistence.Store].
func (s *Store) GetEntry(_ context.Context, sessionID, entryID string) (*agentdv1.Entry, error) {
	var out *agentdv1.Entry
	err := s.read(func(d *data) error {
		sess, err := d.session(sessionID)
		if err != nil {
			return err
		}
		i, ok := sess.index[entryID]
		if !ok {
			return persistence.EntryNotFound(sessionID, entryID)
		}
		out, err = sess.decode(sess.entries[i])
		return err
	})
	return out, err
}

// Path implements [persistence.Store].
func (s *Store) Path(_ context.Context, sessionID string) ([]*agentdv1.Entry, error) {
	return s.path(sessionID, "")
}

// PathTo implements [persistence.Store].
func (s *Store) PathTo(_ context.Context, sessionID, entryID string) ([]*agentdv1.Entry, error) {
	if entryID == "" {
		return nil, &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, Detail: "entry id is empty"}
	}
	return s.path(sessionID, entryID)
}

func (s *Store) path(sessionID, to string) ([]*agentdv1.Entry, error) {
	var out []*agentdv1.Entry
	err := s.read(func(d *data) error {
		sess, err := d.session(sessionID)
		if err != nil {
			return err
		}
		if to == "" {
			to = sess.leaf
		}
		out = []*agentdv1.Entry{}
		if to == "" {
			return nil
		}
		at, ok := sess.index[to]
		if !ok {
			return persistence.EntryNotFound(sessionID, to)
		}
		for {
			e, err := sess.decode(sess.entries[at])
			if err != nil {
				return err
			}
			out = append(out, e)
			if e.GetParentId() == "" {
				break
			}
			// Parents are written before their children; anything else
			// is damage, and refusing it rules out cycles.
			next, ok := sess.index[e.GetParentId()]
			if !ok || next >= at {
				return persistence.BrokenParent(sessionID, e.GetId(), sess.entries[at].seq, e.GetParentId())
			}
			at = next
		}
		slices.Reverse(out)
		return nil
	})
	return out, err
}

// Entries implements [persistence.Store]. Page tokens carry the seq of the
// last entry returned.
func (s *Store) Entries(_ context.Context, sessionID string, req persistence.EntriesRequest) (*persistence.EntryPage, error) {
	size, after, err := req.Cursor(sessionID)
	if err != nil {
		return nil, err
	}
	page := &persistence.EntryPage{}
	err = s.read(func(d *data) error {
		sess, err := d.session(sessionID)
		if err != nil {
			return err
		}
		rest := sess.entries[min(int(after), len(sess.entries)):]
		if len(rest) > size {
			rest = rest[:size]
			page.NextPageToken = req.NextPageToken(sessionID, rest[size-1].seq)
		}
		for _, st := range rest {
			e, err := sess.decode(st)
			if err != nil {
				return err
			}
			page.Entries = append(page.Entries, e)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return page, nil
}

// Tree implements [persistence.Store].
func (s *Store) Tree(ctx context.Context, sessionID string, req persistence.EntriesRequest) (*persistence.TreePage, error) {
	page, err := s.Entries(ctx, sessionID, req)
	if err != nil {
		return nil, err
	}
	out := &persistence.TreePage{NextPageToken: page.NextPageToken}
	for _, e := range page.Entries {
		kind, err := persistence.EntryKind(e)
		if err != nil {
			return nil, err
		}
		out.Nodes = append(out.Nodes, persistence.TreeNode{ID: e.GetId(), ParentID: e.GetParentId(), Kind: kind,
			Preview: persistence.Preview(e), Time: e.GetTime().AsTime()})
	}
	return out, nil
}

// Labels implements [persistence.Store].
func (s *Store) Labels(_ context.Context, sessionID string) (map[string]string, error) {
	var labels []*agentdv1.Entry
	err := s.read(func(d *data) error {
		sess, err := d.session(sessionID)
		if err != nil {
			return err
		}
		for _, st := range sess.entries {
			e, err := sess.decode(st)
			if err != nil {
				return err
			}
			if e.GetLabel() != nil {
				labels = append(labels, e)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return persistence.Labels(labels), nil
}

// --- runs ---

// StartRun implements [persistence.Store].
func (s *Store) StartRun(_ context.Context, sessionID, runID string, req *agentdv1.RunRequest) error {
	if err := checkRunID(sessionID, runID); err != nil {
		return err
	}
	return s.write(func(d *data) error {
		if _, err := d.session(sessionID); err != nil {
			return err
		}
		if _, dup := d.runs[runID]; dup {
			return &persistence.Error{Kind: persistence.ErrConflict, RunID: runID, Detail: "a run with this id exists"}
		}
		d.runs[runID] = &run{rec: persistence.Run{ID: runID, SessionID: sessionID, StartTime: d.nowTime(), Request: storedRequest(req), ReservedSeq: persistence.StartReservedSeq}}
		return nil
	})
}

// EndRun implements [persistence.Store].
func (s *Store) EndRun(_ context.Context, runID string, end persistence.RunEnd) error {
	if err := end.Check(runID); err != nil {
		return err
	}
	return s.write(func(d *data) error {
		r, ok := d.runs[runID]
		if !ok {
			return persistence.RunNotFound(runID)
		}
		// Ending a claimed run without its fence takes the claim away.
		return d.endRun(r, end, r.rec.Owner != "")
	})
}

// SetRunPrompt implements [persistence.Store].
func (s *Store) SetRunPrompt(_ context.Context, runID, entryID string) error {
	return s.write(func(d *data) error {
		r, ok := d.runs[runID]
		if !ok {
			return persistence.RunNotFound(runID)
		}
		d.setRunPrompt(r, entryID)
		return nil
	})
}

// setRunPrompt records the prompt entry of run r, found under the write
// lock. The request is replaced, not changed: readers hold copies of it.
func (d *data) setRunPrompt(r *run, entryID string) {
	req := proto.CloneOf(r.rec.Request)
	if req == nil {
		req = &agentdv1.RunRequest{}
	}
	req.PromptEntryId = entryID
	r.rec.Request = req
}

// storedRequest is the copy of a run's request the store keeps, as the
// other engines store it: without a prompt entry id (SetRunPrompt sets
// it).
func storedRequest(req *agentdv1.RunRequest) *agentdv1.RunRequest {
	if req == nil {
		return nil
	}
	req = proto.CloneOf(req)
	req.PromptEntryId = ""
	return req
}

// ListRuns implements [persistence.Store].
func (s *Store) ListRuns(_ context.Context, req persistence.ListRunsRequest) (*persistence.RunPage, error) {
	size, cursor, err := req.Cursor()
	if err != nil {
		return nil, err
	}
	var page *persistence.RunPage
	err = s.read(func(d *data) error {
		if _, err := d.session(req.SessionID); err != nil {
			return err
		}
		var all []*persistence.Run
		for _, r := range d.runs {
			if r.rec.SessionID == req.SessionID && req.Matches(&r.rec) && cursor.Before(r.rec.StartTime, r.rec.ID) {
				rec := r.rec
				all = append(all, &rec)
			}
		}
		sortRuns(all)
		slices.Reverse(all)
		page = req.Page(all, size)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return page, nil
}

// endRun ends run r, found under the write lock, and with bump moves its
// generation, which fences its owner out.
func (d *data) endRun(r *run, end persistence.RunEnd, bump bool) error {
	if r.rec.Ended() {
		return &persistence.Error{Kind: persistence.ErrConflict, RunID: r.rec.ID, Detail: "run already ended"}
	}
	r.rec.EndTime, r.rec.Outcome, r.rec.ErrorMessage = d.nowTime(), end.Outcome, end.ErrorMessage
	r.rec.Usage, r.rec.StructuredOutput = proto.CloneOf(end.Usage), proto.CloneOf(end.StructuredOutput)
	if bump {
		r.generation++
	}
	return nil
}

// GetRun implements [persistence.Store].
func (s *Store) GetRun(_ context.Context, runID string) (*persistence.Run, error) {
	var out *persistence.Run
	err := s.read(func(d *data) error {
		r, ok := d.runs[runID]
		if !ok {
			return persistence.RunNotFound(runID)
		}
		rec := r.rec
		out = &rec
		return nil
	})
	return out, err
}

// CloseInterruptedRuns implements [persistence.Store] for runs without
// owner. Claimed runs (Shared) are left alone: other replicas may be
// running them, and CloseExpiredRuns closes those whose lease expired.
func (s *Store) CloseInterruptedRuns(context.Context) ([]*persistence.Run, error) {
	var out []*persistence.Run
	err := s.write(func(d *data) error {
		now := d.nowTime()
		for _, r := range d.runs {
			if r.rec.Ended() || r.rec.Owner != "" {
				continue
			}
			r.rec.EndTime, r.rec.Outcome = now, agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED
			rec := r.rec
			out = append(out, &rec)
		}
		return nil
	})
	sortRuns(out)
	return out, err
}

// sortRuns orders runs oldest first (by start, then id).
func sortRuns(runs []*persistence.Run) {
	slices.SortFunc(runs, func(a, b *persistence.Run) int {
		return cmp.Or(a.StartTime.Compare(b.StartTime), cmp.Compare(a.ID, b.ID))
	})
}

// --- event log ---

// AppendEvents implements [persistence.Store].
func (s *Store) AppendEvents(_ context.Context, runID string, events []persistence.Event) error {
	if len(events) == 0 {
		return &persistence.Error{Kind: persistence.ErrInvalid, RunID: runID, Detail: "no events to append"}
	}
	return s.write(func(d *data) error {
		r, ok := d.runs[runID]
		if !ok {
			return persistence.RunNotFound(runID)
		}
		return d.appendEvents(r, events)
	})
}

// appendEvents is AppendEvents on a run found under the write lock. It
// wakes the watchers of the run's events (Shared.Watch).
func (d *data) appendEvents(r *run, events []persistence.Event) error {
	if err := persistence.CheckReservedEventBatch(r.rec.ID, r.rec.LastSeq, r.rec.ReservedSeq, r.rec.Ended(), events); err != nil {
		return err
	}
	for _, ev := range events {
		r.events = append(r.events, persistence.Event{Seq: ev.Seq, Data: slices.Clone(ev.Data)})
	}
	r.rec.LastSeq = events[len(events)-1].Seq
	d.wake(persistence.EventsTopic(r.rec.ID))
	return nil
}

// ReserveEvents implements [persistence.Store].
func (s *Store) ReserveEvents(_ context.Context, runID string, through uint64) error {
	return s.write(func(d *data) error {
		r, ok := d.runs[runID]
		if !ok {
			return persistence.RunNotFound(runID)
		}
		r.rec.ReservedSeq = max(r.rec.ReservedSeq, through)
		return nil
	})
}

// Events implements [persistence.Store].
func (s *Store) Events(_ context.Context, runID string, after uint64, limit int) ([]persistence.Event, error) {
	if limit <= 0 {
		return nil, &persistence.Error{Kind: persistence.ErrInvalid, RunID: runID, Detail: fmt.Sprintf("limit %d is not positive", limit)}
	}
	var out []persistence.Event
	err := s.read(func(d *data) error {
		r, ok := d.runs[runID]
		if !ok {
			return persistence.RunNotFound(runID)
		}
		i, _ := slices.BinarySearchFunc(r.events, after+1, func(ev persistence.Event, seq uint64) int { return cmp.Compare(ev.Seq, seq) })
		for _, ev := range r.events[i:min(len(r.events), i+limit)] {
			out = append(out, persistence.Event{Seq: ev.Seq, Data: slices.Clone(ev.Data)})
		}
		return nil
	})
	return out, err
}

// PruneEvents implements [persistence.Store]. It also deletes the controls
// between replicas nobody needs any more (see controlRetention).
func (s *Store) PruneEvents(_ context.Context, endedBefore time.Time) (int, error) {
	n := 0
	err := s.write(func(d *data) error {
		for _, r := range d.runs {
			if r.rec.Ended() && r.rec.EndTime.Before(endedBefore) && !r.rec.EventsPruned {
				r.events, r.rec.EventsPruned = nil, true
				n++
			}
		}
		d.pruneControls()
		return nil
	})
	return n, err
}
