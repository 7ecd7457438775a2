package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/replicapb"
	"github.com/agentd/agentd/persistence"
)

// The change feed across replicas (docs/ARCHITECTURE.md, "Watching
// sessions"). On a shared store each replica appends the changes it
// publishes, but its runs' events, to the store's feed
// (Shared.AppendFeed), and reads the others' back on each wake-up of
// persistence.FeedTopic into its own hub: session changes as they are,
// with the session read from the store; a run's start starts a follower
// of the run's event log (followStored, as Attach follows another
// replica's run), whose events the hub publishes; the run's end is
// published once that follower has sent agent_end.
const (
	// feedPage is how many changes of the feed are read at a time.
	feedPage = 256
	// feedQueueLimit bounds the changes a replica holds for the feed
	// while the store does not take them; beyond it they are dropped and
	// the other replicas' watchers told to resync.
	feedQueueLimit = 4096
	// feedRetention is how long the feed keeps a change: a replica that
	// cannot read the store for longer resyncs its watchers.
	feedRetention = 10 * time.Minute
	// feedPruneEvery is how often a replica prunes the feed.
	feedPruneEvery = time.Minute
)

// feedWriter queues the changes this replica made for the feed.
type feedWriter struct {
	mu      sync.Mutex
	queue   []*Change
	lost    bool // changes were dropped: the next write says so
	dropped int  // how many times the queue was dropped
	kick    chan struct{}
}

// add queues c; it runs under the hub's lock, so it never blocks.
func (w *feedWriter) add(c *Change) {
	w.mu.Lock()
	if len(w.queue) >= feedQueueLimit {
		w.queue, w.lost = nil, true
		w.dropped++
	} else {
		w.queue = append(w.queue, c)
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// startFeed connects the hub to the store's feed: this replica's changes
// are written to it, the others' read from it, from now.
func (a *Agent) startFeed(ctx context.Context) error {
	head, err := a.shared.FeedHead(ctx)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	w := &feedWriter{kick: make(chan struct{}, 1)}
	a.watch.forward = w.add
	a.feedDone = make(chan struct{})
	a.bg.Add(2)
	go a.feedWriteLoop(w)
	go a.feedReadLoop(head)
	return nil
}

// feedWriteLoop writes the queued changes to the feed, in order, until
// Close has seen every run end (feedDone), so that the ends of the runs
// Close aborts reach the other replicas too.
func (a *Agent) feedWriteLoop(w *feedWriter) {
	defer a.bg.Done()
	for {
		closing := false
		select {
		case <-w.kick:
		case <-a.feedDone:
			closing = true
		}
		a.writeFeed(w, closing)
		if closing {
			return
		}
	}
}

// writeFeed writes what w holds, retrying while the store refuses; when
// closing it gives up after ControlTimeout.
func (a *Agent) writeFeed(w *feedWriter, closing bool) {
	deadline := time.Now().Add(ControlTimeout)
	for {
		w.mu.Lock()
		batch, lost, dropped := w.queue, w.lost, w.dropped
		w.mu.Unlock()
		if len(batch) == 0 && !lost {
			return
		}
		payloads := make([][]byte, 0, len(batch)+1)
		if lost {
			data, _ := proto.Marshal(&replicapb.WatchChange{Lost: true})
			payloads = append(payloads, data)
		}
		for _, c := range batch {
			data, err := proto.Marshal(feedChange(c))
			if err != nil {
				a.opts.Logger.Warn("could not encode a change for the other replicas' watchers", "session", c.SessionID, "err", err)
				continue
			}
			payloads = append(payloads, data)
		}
		ctx, cancel := context.WithTimeout(context.Background(), ControlTimeout)
		err := a.shared.AppendFeed(ctx, a.opts.ReplicaID, payloads...)
		cancel()
		if err == nil {
			w.mu.Lock()
			if w.dropped == dropped {
				w.queue, w.lost = w.queue[len(batch):], false
				if len(w.queue) == 0 {
					w.queue = nil
				}
			}
			// Otherwise the queue was dropped meanwhile: lost stays set.
			w.mu.Unlock()
			continue
		}
		if closing && time.Now().After(deadline) {
			a.opts.Logger.Warn("could not hand the last changes to the other replicas' watchers", "changes", len(batch), "err", err)
			return
		}
		a.opts.Logger.Warn("could not hand changes to the other replicas' watchers; trying again", "changes", len(batch), "err", err)
		t := time.NewTimer(sharedPoll)
		select {
		case <-t.C:
		case <-a.feedDone:
			t.Stop()
			closing = true
		}
	}
}

// feedChange is what the feed holds of c.
func feedChange(c *Change) *replicapb.WatchChange {
	return &replicapb.WatchChange{Kind: int32(c.Kind), Tenant: c.Tenant, SessionId: c.SessionID, Labels: c.Labels, RunId: c.RunID,
		Time: timestamppb.New(c.Time), Entries: c.Entries, EntryId: c.EntryID, Label: c.Label, Outcome: c.Outcome, Pending: c.Pending}
}

// feedReader feeds the changes of the other replicas into the hub. Only
// feedReadLoop's goroutine uses it, but for done.
type feedReader struct {
	a     *Agent
	ctx   context.Context
	after int64                 // the seq of the last change read
	runs  map[string]*remoteRun // followed, by run id
	ended map[string]time.Time  // runs whose end was published, by run id
	done  chan *remoteRun       // followers that are done
	wg    sync.WaitGroup
}

// remoteRun is a run of another replica that the hub follows.
type remoteRun struct {
	base Change // the run's tenant, session, labels and id
	done chan struct{}
	// outcome is the agent_end's; read once done is closed.
	outcome agentdv1.RunOutcome
}

// feedReadLoop reads the other replicas' changes after seq after on every
// wake-up, and now and then without one (wake-ups are lost while the
// listener reconnects), until Close.
func (a *Agent) feedReadLoop(after int64) {
	defer a.bg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	f := &feedReader{a: a, ctx: ctx, after: after, runs: map[string]*remoteRun{}, ended: map[string]time.Time{}, done: make(chan *remoteRun, 16)}
	defer f.wg.Wait()
	defer cancel()
	wake, stop := a.shared.Watch(persistence.FeedTopic)
	defer stop()
	poll := time.NewTicker(sharedPoll)
	defer poll.Stop()
	prune := time.NewTicker(feedPruneEvery)
	defer prune.Stop()
	for {
		if err := f.read(); err != nil && ctx.Err() == nil {
			a.opts.Logger.Warn("could not read other replicas' changes for watchers; trying again", "err", err)
		}
		select {
		case <-a.stop:
			return
		case <-wake:
		case <-poll.C:
		case r := <-f.done:
			f.finish(r.base, r.outcome)
		case <-prune.C:
			f.prune()
		}
	}
}

// read applies the changes after f.after, stopping at one it cannot
// apply yet (the store failed), which is read again next time.
func (f *feedReader) read() error {
	for {
		page, pruned, err := f.a.shared.ReadFeed(f.ctx, f.after, feedPage)
		if err != nil {
			return err
		}
		if f.after < pruned {
			f.lost(fmt.Sprintf("the changes %d to %d of other replicas were pruned before this replica read them", f.after+1, pruned))
			f.after = pruned
		}
		for _, c := range page {
			if c.Origin != f.a.opts.ReplicaID {
				if err := f.apply(c); err != nil {
					return err
				}
			}
			f.after = c.Seq
		}
		if len(page) < feedPage {
			return nil
		}
	}
}

// lost makes every watcher resync: changes of other replicas are missing
// from the hub.
func (f *feedReader) lost(why string) {
	f.a.opts.Logger.Warn("watchers must resync: changes of other replicas were missed", "why", why)
	f.a.watch.resyncAll("missed changes of other replicas")
}

// apply publishes one change of another replica.
func (f *feedReader) apply(fc persistence.FeedChange) error {
	m := &replicapb.WatchChange{}
	if err := proto.Unmarshal(fc.Payload, m); err != nil {
		f.a.opts.Logger.Warn("skipping a change of another replica that cannot be decoded", "seq", fc.Seq, "origin", fc.Origin, "err", err)
		return nil
	}
	if m.GetLost() {
		f.lost(fmt.Sprintf("agentd replica %q dropped changes it could not store", fc.Origin))
		return nil
	}
	c := &Change{Kind: ChangeKind(m.GetKind()), Tenant: m.GetTenant(), SessionID: m.GetSessionId(), Labels: m.GetLabels(), RunID: m.GetRunId(),
		Entries: m.GetEntries(), EntryID: m.GetEntryId(), Label: m.GetLabel(), Outcome: m.GetOutcome(), Pending: m.GetPending(), remote: true}
	if m.GetTime() != nil {
		c.Time = m.GetTime().AsTime()
	}
	h := f.a.watch
	switch c.Kind {
	case ChangeCreated, ChangeUpdated, ChangeAppended:
		// The feed does not carry the session: read it back.
		sess, err := f.a.store.GetSession(f.ctx, c.SessionID)
		if errors.Is(err, persistence.ErrNotFound) {
			return nil // deleted since; its deletion follows
		}
		if err != nil {
			return err
		}
		c.Tenant, c.Labels, c.Session = sess.Tenant, sess.Labels, sess
		h.publish(c)
	case ChangeLabel, ChangeDeleted:
		h.publish(c)
	case ChangeRunStarted:
		h.publish(c)
		f.follow(c)
	case ChangeRunEnded:
		// After the run's events: its follower is done once it sent
		// agent_end, which the run stores just after this change.
		if r := f.runs[c.RunID]; r != nil {
			select {
			case <-r.done:
			case <-f.ctx.Done():
				return f.ctx.Err()
			}
		}
		c.Kind = 0
		f.finish(*c, c.Outcome)
	case ChangePendingAdded:
		if _, ended := f.ended[c.RunID]; !ended && c.Pending != nil {
			h.addPending(c)
		}
	case ChangePendingRemoved:
		if c.Pending != nil {
			h.removePending(pendingKey(c.RunID, c.Pending.GetKind(), c.Pending.GetId()))
		}
	}
	return nil
}

// follow starts following the events of the run c started.
func (f *feedReader) follow(c *Change) {
	if _, ok := f.runs[c.RunID]; ok {
		return
	}
	if _, ok := f.ended[c.RunID]; ok {
		return
	}
	r := &remoteRun{base: Change{Tenant: c.Tenant, SessionID: c.SessionID, Labels: c.Labels, RunID: c.RunID, remote: true}, done: make(chan struct{})}
	f.runs[c.RunID] = r
	f.wg.Add(1)
	go f.followRun(r)
}

// followRun publishes the events of r, as its log holds them, until
// agent_end (or the run's log is known to have no more), retrying while
// the store fails; then it reports r done.
func (f *feedReader) followRun(r *remoteRun) {
	defer f.wg.Done()
	a := f.a
	var after uint64
	for {
		err := a.followStored(f.ctx, r.base.SessionID, r.base.RunID, after, func(e Event) error {
			after = e.Seq
			ev := &agentdv1.AgentEvent{}
			if err := proto.Unmarshal(e.Data, ev); err != nil {
				a.opts.Logger.Warn("skipping an event of another replica's run that cannot be decoded", "run", r.base.RunID, "seq", e.Seq, "err", err)
				return nil
			}
			if end := ev.GetAgentEnd(); end != nil {
				r.outcome = end.GetOutcome()
			}
			c := r.base
			c.Kind, c.Event = ChangeEvent, ev
			a.watch.publish(&c)
			return nil
		})
		var refused *Error
		if err == nil || f.ctx.Err() != nil || errors.As(err, &refused) {
			// Done, closing, or the run's log is gone (its session
			// deleted, its events expired).
			break
		}
		a.opts.Logger.Warn("could not read the events of another replica's run for watchers; trying again", "run", r.base.RunID, "err", err)
		t := time.NewTimer(sharedPoll)
		select {
		case <-t.C:
		case <-f.ctx.Done():
			t.Stop()
		}
	}
	close(r.done)
	select {
	case f.done <- r:
	case <-f.ctx.Done():
	}
}

// finish publishes, once, the end of the run base names.
func (f *feedReader) finish(base Change, outcome agentdv1.RunOutcome) {
	if _, ended := f.ended[base.RunID]; ended {
		return
	}
	delete(f.runs, base.RunID)
	f.ended[base.RunID] = time.Now()
	base.remote = true
	f.a.watch.endRun(base, outcome)
}

// prune deletes old changes from the feed (every replica does, which is
// harmless) and forgets runs that ended long ago.
func (f *feedReader) prune() {
	ctx, cancel := context.WithTimeout(f.ctx, ControlTimeout)
	defer cancel()
	if err := f.a.shared.PruneFeed(ctx, feedRetention); err != nil && f.ctx.Err() == nil {
		f.a.opts.Logger.Warn("could not prune the feed of changes between replicas", "err", err)
	}
	for id, at := range f.ended {
		if time.Since(at) > feedRetention {
			delete(f.ended, id)
		}
	}
}

// addPending publishes c, a request of another replica's run that
// started to wait, and lists it.
func (h *watchHub) addPending(c *Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.publishLocked(c)
	h.pending[pendingKey(c.RunID, c.Pending.GetKind(), c.Pending.GetId())] = c
}

// removePending publishes that the request key names stopped waiting,
// unless it is not listed.
func (h *watchHub) removePending(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.pending[key]; p != nil {
		delete(h.pending, key)
		h.removeLocked(p)
	}
}

// endRun publishes the end of another replica's run.
func (h *watchHub) endRun(base Change, outcome agentdv1.RunOutcome) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.endRunLocked(base, outcome)
}

// resyncAll ends every watch with a resync, and refuses cursors from
// before now: the hub missed changes of other replicas.
func (h *watchHub) resyncAll(reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.floor = h.seq
	resync := &ResyncError{Cursor: h.cursor(h.seq), Reason: reason}
	for w := range h.anySession {
		h.endLocked(w, resync)
	}
	for _, set := range h.bySession {
		for w := range set {
			h.endLocked(w, resync)
		}
	}
}
