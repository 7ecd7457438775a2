package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// Bounds of the change feed watches read (WatchSession, WatchSessions,
// WatchPendingInteractions).
const (
	// DefaultWatchHistory is how many recent changes the agent keeps for
	// watchers that resume from a cursor.
	DefaultWatchHistory = 4096
	// DefaultWatchBuffer is how many changes one watcher may fall behind
	// before it is told to resync.
	DefaultWatchBuffer = 1024
)

// ChangeKind says what a Change reports.
type ChangeKind int

// The kinds of changes.
const (
	// ChangeCreated: a session was created (Session is set).
	ChangeCreated ChangeKind = iota + 1
	// ChangeUpdated: a session's title, labels, configuration or leaf
	// changed (Session is the session after it).
	ChangeUpdated
	// ChangeRunStarted: a run started (RunID).
	ChangeRunStarted
	// ChangeEvent: an event of a run (Event, RunID).
	ChangeEvent
	// ChangeRunEnded: a run ended (RunID, Outcome).
	ChangeRunEnded
	// ChangeAppended: entries were appended outside a run (Entries).
	ChangeAppended
	// ChangeLabel: an entry's label changed (EntryID, Label).
	ChangeLabel
	// ChangeDeleted: a session was deleted.
	ChangeDeleted
	// ChangePendingAdded: a request started to wait (Pending).
	ChangePendingAdded
	// ChangePendingRemoved: a request stopped waiting (Pending).
	ChangePendingRemoved
)

// Change is one entry of the agent's change feed. It is shared by every
// watcher: nobody modifies it once published.
type Change struct {
	// epoch and seq name the change's place in the feed (see Cursor).
	epoch string
	// Time is when the agent recorded it.
	Time time.Time
	// Kind says which of the fields below are set.
	Kind ChangeKind
	// Tenant and SessionID say whose session changed.
	Tenant, SessionID string
	// Labels are the session's labels as last known, for label filters;
	// nil when the change does not know them.
	Labels map[string]string
	// Session is the session after the change (created, updated).
	Session *persistence.Session
	// RunID is the run that started, ended or produced Event.
	RunID string
	// Event is a run's event, as its log holds it.
	Event *agentdv1.AgentEvent
	// Outcome is how a run ended.
	Outcome agentdv1.RunOutcome
	// Entries were appended.
	Entries []*agentdv1.Entry
	// EntryID and Label are a label change's.
	EntryID, Label string
	// Pending is the request that started or stopped waiting.
	Pending *agentdv1.PendingInteraction

	seq uint64
	// remote: another replica made the change (watchfeed.go); it is not
	// forwarded to the others again.
	remote bool
}

// ResyncError ends a watch whose watcher missed changes: read the state
// again, then watch from Cursor.
type ResyncError struct {
	// Cursor to watch from after reading the state again.
	Cursor string
	// Reason says why, for the client.
	Reason string
}

func (e *ResyncError) Error() string { return "watch must resync: " + e.Reason }

// WatchOptions say what a watch reads.
type WatchOptions struct {
	// Cursor resumes after a change; empty watches from now.
	Cursor string
	// Field names the cursor in refusals ("cursor").
	Field string
	// Match selects the changes the watcher gets. It runs while the feed
	// is locked: it must be quick and must not call the agent.
	Match func(*Change) bool
	// SessionID, when set, limits the watch to that session's changes
	// (Match still chooses among them). The feed then hands the watcher
	// only that session's changes: a watch of one session costs nothing
	// when others change.
	SessionID string
	// Started is called once the changes after Cursor were sent, with the
	// cursor of the last change the watcher has seen.
	Started func(cursor string) error
}

// watchHub is the agent's change feed: a bounded window of recent changes
// for resuming, a bounded buffer per watcher, and the requests waiting for
// a client. Cursors carry the hub's epoch, random per process, so a cursor
// of another process (a restart, another replica) is recognized and
// answered with a resync, never misread.
type watchHub struct {
	epoch   string
	history int
	buffer  int
	now     func() time.Time

	// forward, set on a shared store only, hands each change this
	// process made (but its runs' events) to the feed the other replicas
	// read (watchfeed.go). It runs under mu and must not block.
	forward func(*Change)

	mu    sync.Mutex
	seq   uint64 // of the last change published
	floor uint64 // cursors before it missed changes of other replicas
	// ring holds copies of the last changes, circular (len(ring) ==
	// history once full): values, so that a run's event, published with
	// nobody watching, costs no allocation.
	ring []Change
	// anySession holds the watchers of every session's changes,
	// bySession those of one session's.
	anySession map[*watcher]struct{}
	bySession  map[string]map[*watcher]struct{}
	pending    map[string]*Change // ChangePendingAdded changes, by pendingKey
}

// watcher is one watch's buffer: the changes matched and not yet sent, at
// most the hub's buffer. It grows as changes come, so an idle watch holds
// none.
type watcher struct {
	match   func(*Change) bool
	session string // "" for every session's changes
	queue   []*Change
	// sending is how many changes the watch took from queue and is
	// sending: they count against the buffer until it takes more.
	sending int
	// ready gets a token when queue gets a change or the watch ends.
	ready chan struct{}
	// ended says the hub dropped the watcher; resync says why.
	ended  bool
	resync *ResyncError
}

func newWatchHub(history, buffer int, now func() time.Time) *watchHub {
	if history <= 0 {
		history = DefaultWatchHistory
	}
	if buffer <= 0 {
		buffer = DefaultWatchBuffer
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &watchHub{epoch: hex.EncodeToString(b[:]), history: history, buffer: buffer, now: now,
		anySession: map[*watcher]struct{}{}, bySession: map[string]map[*watcher]struct{}{}, pending: map[string]*Change{}}
}

func (h *watchHub) cursor(seq uint64) string { return formatCursor(h.epoch, seq) }

// Cursor names the change's place in the feed: pass it to a watch to
// resume after it. It is made when asked for, since most changes (a run's
// events) are published with nobody watching.
func (c *Change) Cursor() string { return formatCursor(c.epoch, c.seq) }

func formatCursor(epoch string, seq uint64) string { return epoch + "." + strconv.FormatUint(seq, 10) }

// publish appends c to the feed and hands it to the watchers it matches.
// A watcher whose buffer is full is dropped with a resync: a slow watcher
// costs at most its buffer.
func (h *watchHub) publish(c *Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.publishLocked(c)
}

func (h *watchHub) publishLocked(c *Change) {
	h.stampLocked(c)
	if h.forward != nil && !c.remote && c.Kind != ChangeEvent {
		h.forward(c)
	}
	h.keepLocked(c)
	h.deliverLocked(c)
}

// publishEventLocked publishes a run's event change. It takes c by value
// and copies it to the heap only when someone watches: most events are
// published with nobody watching. Events are never forwarded (another
// replica's client follows the run through the store).
func (h *watchHub) publishEventLocked(c Change) {
	h.stampLocked(&c)
	h.keepLocked(&c)
	if len(h.anySession) > 0 || len(h.bySession[c.SessionID]) > 0 {
		shared := new(Change)
		*shared = c
		h.deliverLocked(shared)
	}
}

// stampLocked gives c the next place in the feed, and a time if it has
// none.
func (h *watchHub) stampLocked(c *Change) {
	h.seq++
	c.seq, c.epoch = h.seq, h.epoch
	if c.Time.IsZero() {
		c.Time = h.now()
	}
}

// keepLocked copies c to the ring, for watchers that resume.
func (h *watchHub) keepLocked(c *Change) {
	if len(h.ring) < h.history {
		h.ring = append(h.ring, *c)
	} else {
		h.ring[(c.seq-1)%uint64(h.history)] = *c
	}
}

// deliverLocked hands c to the watchers it matches.
func (h *watchHub) deliverLocked(c *Change) {
	for w := range h.anySession {
		h.offerLocked(w, c)
	}
	for w := range h.bySession[c.SessionID] {
		h.offerLocked(w, c)
	}
}

// offerLocked queues c for w if it matches; a watcher whose buffer is full
// is dropped with a resync.
func (h *watchHub) offerLocked(w *watcher, c *Change) {
	if !w.match(c) {
		return
	}
	if len(w.queue)+w.sending >= h.buffer {
		h.endLocked(w, &ResyncError{Cursor: h.cursor(c.seq - 1), Reason: "watcher too slow"})
		return
	}
	w.queue = append(w.queue, c)
	w.wake()
}

// addLocked starts delivering changes to w.
func (h *watchHub) addLocked(w *watcher) {
	if w.session == "" {
		h.anySession[w] = struct{}{}
		return
	}
	set := h.bySession[w.session]
	if set == nil {
		set = map[*watcher]struct{}{}
		h.bySession[w.session] = set
	}
	set[w] = struct{}{}
}

// dropLocked stops delivering changes to w.
func (h *watchHub) dropLocked(w *watcher) {
	if w.session == "" {
		delete(h.anySession, w)
		return
	}
	if set := h.bySession[w.session]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(h.bySession, w.session)
		}
	}
}

// endLocked drops w and ends its watch with resync once it has sent what
// it holds.
func (h *watchHub) endLocked(w *watcher, resync *ResyncError) {
	h.dropLocked(w)
	w.ended, w.resync = true, resync
	w.wake()
}

// wake tells the watch that its watcher changed; it never blocks.
func (w *watcher) wake() {
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// oldestLocked is the seq of the oldest change the ring holds (seq+1 when
// it holds none).
func (h *watchHub) oldestLocked() uint64 {
	return h.seq - uint64(len(h.ring)) + 1
}

// parseCursor returns the seq a cursor names, or a resync when it cannot
// be resumed from.
func (h *watchHub) parseCursorLocked(field, cursor string) (uint64, error) {
	if cursor == "" {
		return h.seq, nil
	}
	epoch, n, ok := strings.Cut(cursor, ".")
	seq, err := strconv.ParseUint(n, 10, 64)
	if !ok || err != nil || epoch == "" {
		return 0, invalid(field, "%q is not a cursor agentd issued; pass a cursor from a watch event, or none to watch from now", truncate(cursor, 40))
	}
	if epoch != h.epoch {
		return 0, &ResyncError{Cursor: h.cursor(h.seq), Reason: "cursor of another agentd process"}
	}
	if seq > h.seq {
		return 0, invalid(field, "%q is ahead of every change agentd issued; pass a cursor from a watch event", truncate(cursor, 40))
	}
	if seq+1 < h.oldestLocked() || seq < h.floor {
		return 0, &ResyncError{Cursor: h.cursor(h.seq), Reason: "cursor expired"}
	}
	return seq, nil
}

// Watch sends the changes opts.Match selects, in feed order and each
// once: first those after opts.Cursor still held, then live ones, until
// ctx ends (its error), send fails (its error), or the watcher must
// resync (a *ResyncError). A malformed cursor is refused with a
// *FieldError.
func (a *Agent) Watch(ctx context.Context, opts WatchOptions, send func(*Change) error) error {
	h := a.watch
	h.mu.Lock()
	after, err := h.parseCursorLocked(opts.Field, opts.Cursor)
	if err != nil {
		h.mu.Unlock()
		return err
	}
	var backlog []*Change
	for s := after + 1; s <= h.seq; s++ {
		// Match reads the ring's entry in place; only a match is copied.
		if kept := &h.ring[(s-1)%uint64(h.history)]; opts.Match(kept) {
			c := *kept
			backlog = append(backlog, &c)
		}
	}
	w := &watcher{match: opts.Match, session: opts.SessionID, ready: make(chan struct{}, 1)}
	h.addLocked(w)
	head := h.seq
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.dropLocked(w)
		h.mu.Unlock()
	}()
	for _, c := range backlog {
		if err := send(c); err != nil {
			return err
		}
	}
	if opts.Started != nil {
		if err := opts.Started(h.cursor(head)); err != nil {
			return err
		}
	}
	var batch []*Change
	for {
		h.mu.Lock()
		// The queue and the batch last sent swap places, so a busy watch
		// reuses two slices and an idle one keeps what it had.
		batch, w.queue = w.queue, batch[:0]
		w.sending = len(batch)
		ended, resync := w.ended, w.resync
		h.mu.Unlock()
		for i, c := range batch {
			if err := send(c); err != nil {
				return err
			}
			batch[i] = nil // sent: the watch no longer keeps it
		}
		if len(batch) > 0 {
			continue
		}
		if ended {
			return resync
		}
		select {
		case <-w.ready:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// PendingInteractions returns the requests waiting for a client that
// match selects (oldest first), and the cursor to watch from so that no
// later change is missed.
func (a *Agent) PendingInteractions(match func(*Change) bool) ([]*agentdv1.PendingInteraction, string) {
	h := a.watch
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*Change
	for _, c := range h.pending {
		if match(c) {
			out = append(out, c)
		}
	}
	// Oldest first: the feed's order.
	sortChanges(out)
	list := make([]*agentdv1.PendingInteraction, len(out))
	for i, c := range out {
		list[i] = c.Pending
	}
	return list, h.cursor(h.seq)
}

func sortChanges(cs []*Change) {
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && cs[j].seq < cs[j-1].seq; j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
}

func pendingKey(runID string, kind agentdv1.PendingInteractionKind, id string) string {
	return fmt.Sprintf("%s\x00%d\x00%s", runID, kind, id)
}

// runEvent publishes an event of run r, with the run's start and end and
// the requests it makes wait.
func (h *watchHub) runEvent(r *Run, ev *agentdv1.AgentEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	base := Change{Tenant: r.tenant, SessionID: r.sessionID, Labels: r.labels, RunID: r.id}
	if ev.GetAgentStart() != nil {
		c := base
		c.Kind = ChangeRunStarted
		h.publishLocked(&c)
	}
	c := base
	c.Kind, c.Event = ChangeEvent, ev
	if t := ev.GetTime(); t != nil {
		c.Time = t.AsTime() // when the run produced it; saves reading the clock
	}
	h.publishEventLocked(c)
	if p := pendingOf(r, ev); p != nil {
		added := base
		added.Kind, added.Pending = ChangePendingAdded, p
		h.publishLocked(&added)
		h.pending[pendingKey(r.id, p.GetKind(), p.GetId())] = &added
	}
	if end := ev.GetAgentEnd(); end != nil {
		h.endRunLocked(base, end.GetOutcome())
	}
}

// endRunLocked publishes the end of the run base names, after the removal
// of what still waits of it: nothing of an ended run waits any more.
func (h *watchHub) endRunLocked(base Change, outcome agentdv1.RunOutcome) {
	var left []*Change
	for k, p := range h.pending {
		if p.RunID == base.RunID {
			left = append(left, p)
			delete(h.pending, k)
		}
	}
	sortChanges(left)
	for _, p := range left {
		h.removeLocked(p)
	}
	c := base
	c.Kind, c.Outcome = ChangeRunEnded, outcome
	h.publishLocked(&c)
}

// settled reports that a request of run r no longer waits.
func (h *watchHub) settled(r *Run, id string, kind waitKind) {
	k := pendingKey(r.id, kind.interaction(), id)
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.pending[k]; p != nil {
		delete(h.pending, k)
		h.removeLocked(p)
	}
}

func (h *watchHub) removeLocked(added *Change) {
	c := *added
	c.Kind, c.Time = ChangePendingRemoved, time.Time{}
	h.publishLocked(&c)
}

// interaction is the wire kind of what a call waits for.
func (k waitKind) interaction() agentdv1.PendingInteractionKind {
	switch k {
	case waitApproval:
		return agentdv1.PendingInteractionKind_PENDING_INTERACTION_KIND_APPROVAL
	case waitContext:
		return agentdv1.PendingInteractionKind_PENDING_INTERACTION_KIND_CONTEXT
	case waitHook:
		return agentdv1.PendingInteractionKind_PENDING_INTERACTION_KIND_HOOK
	}
	return agentdv1.PendingInteractionKind_PENDING_INTERACTION_KIND_CLIENT_TOOL
}

// requestOf returns what ev asks a client for, if it makes anything wait
// for one: the kind, the id the answer names and the deadline.
func requestOf(ev *agentdv1.AgentEvent) (kind agentdv1.PendingInteractionKind, id string, deadline *timestamppb.Timestamp, ok bool) {
	switch e := ev.GetEvent().(type) {
	case *agentdv1.AgentEvent_ApprovalRequested:
		return agentdv1.PendingInteractionKind_PENDING_INTERACTION_KIND_APPROVAL, e.ApprovalRequested.GetToolCallId(), e.ApprovalRequested.GetDeadline(), true
	case *agentdv1.AgentEvent_ToolCallRequested:
		return agentdv1.PendingInteractionKind_PENDING_INTERACTION_KIND_CLIENT_TOOL, e.ToolCallRequested.GetToolCallId(), e.ToolCallRequested.GetDeadline(), true
	case *agentdv1.AgentEvent_HookRequested:
		return agentdv1.PendingInteractionKind_PENDING_INTERACTION_KIND_HOOK, e.HookRequested.GetRequestId(), e.HookRequested.GetDeadline(), true
	case *agentdv1.AgentEvent_ContextRequested:
		return agentdv1.PendingInteractionKind_PENDING_INTERACTION_KIND_CONTEXT, e.ContextRequested.GetRequestId(), e.ContextRequested.GetDeadline(), true
	}
	return 0, "", nil, false
}

// pendingOf is the pending interaction ev makes, or nil. Most events make
// nothing wait: it allocates only for those that do (this runs for every
// streamed event).
func pendingOf(r *Run, ev *agentdv1.AgentEvent) *agentdv1.PendingInteraction {
	kind, id, deadline, ok := requestOf(ev)
	if !ok {
		return nil
	}
	return &agentdv1.PendingInteraction{SessionId: r.sessionID, RunId: r.id, Request: ev, Kind: kind, Id: id, Deadline: deadline}
}

// sessionChanged publishes a change of a session, reading the session
// after it from the store; a session that cannot be read is not reported
// (the change itself succeeded, and a watcher resyncs on its next one).
func (a *Agent) sessionChanged(ctx context.Context, sessionID string, kind ChangeKind, extra func(*Change)) {
	sess, err := a.store.GetSession(context.WithoutCancel(ctx), sessionID)
	if err != nil {
		a.opts.Logger.WarnContext(ctx, "could not read a changed session for its watchers", "session", sessionID, "err", err)
		return
	}
	a.publishSession(sess, kind, extra)
}

// publishSession publishes a change of sess (the session after it).
func (a *Agent) publishSession(sess *persistence.Session, kind ChangeKind, extra func(*Change)) {
	c := &Change{Kind: kind, Tenant: sess.Tenant, SessionID: sess.ID, Labels: sess.Labels, Session: sess}
	if extra != nil {
		extra(c)
	}
	a.watch.publish(c)
}

// created publishes a session made whole (a fork, an import) and passes
// GetSession's results on.
func (a *Agent) created(sess *persistence.Session, err error) (*persistence.Session, error) {
	if err == nil {
		a.publishSession(sess, ChangeCreated, nil)
	}
	return sess, err
}
