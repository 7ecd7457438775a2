package service

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/tools"
)

type runManagerOptions struct {
	maxActive   int
	eventLimit  int
	retention   time.Duration
	maxFinished int
	now         func() time.Time
	metrics     *Metrics
	logger      *slog.Logger
}

// runManager knows which session runs what: at most one active run per
// session, the retained event logs of recent runs (for Attach), and the
// sessions an AppendMessages call holds for a moment.
type runManager struct {
	opts runManagerOptions

	mu        sync.Mutex
	bySession map[string]*runHandle
	byID      map[string]*runHandle
	finished  []*runHandle // retained finished runs, oldest first
	appending map[string]bool
	closing   bool
	wg        sync.WaitGroup
}

// runHandle is one run: its control (cancel, queues) and its event log.
type runHandle struct {
	id        string
	sessionID string
	// ctx is the run's own context: detached from the RPC that started it,
	// cancelled by Abort, a dropped stream without detach, or shutdown.
	ctx      context.Context
	cancel   context.CancelCauseFunc
	steering *agentloop.Queue
	followUp *agentloop.Queue
	log      *eventLog
	// pending are the run's tool calls waiting for a client's answer.
	pending pendingCalls
	// ws is the session's workspace, opened by the first built-in tool of
	// the run and closed when the run's goroutine returns.
	wsOnce sync.Once
	ws     *tools.Workspace
	wsErr  error
	// done is closed when the run's goroutine has returned.
	done    chan struct{}
	endedAt time.Time
}

// workspace opens the run's workspace once.
func (h *runHandle) workspace(open func() (*tools.Workspace, error)) (*tools.Workspace, error) {
	h.wsOnce.Do(func() { h.ws, h.wsErr = open() })
	return h.ws, h.wsErr
}

// release frees what the run holds.
func (h *runHandle) release() {
	if h.ws != nil {
		h.ws.Close()
	}
}

// abort cancels the run and stops its event log from waiting for followers.
func (h *runHandle) abort(reason string) {
	h.cancel(errors.New(reason))
	h.log.stopThrottling()
}

func newRunManager(opts runManagerOptions) *runManager {
	if opts.maxActive <= 0 {
		opts.maxActive = 1024
	}
	if opts.eventLimit <= 0 {
		opts.eventLimit = 200_000
	}
	if opts.retention <= 0 {
		opts.retention = 10 * time.Minute
	}
	if opts.maxFinished <= 0 {
		opts.maxFinished = 256
	}
	return &runManager{
		opts:      opts,
		bySession: map[string]*runHandle{},
		byID:      map[string]*runHandle{},
		appending: map[string]bool{},
	}
}

// register reserves the session for a new run with id runID. When a run
// with that id is already known (an idempotent retry), it returns that run
// as existing instead.
func (m *runManager) register(sessionID, runID string, cfg *agentdv1.SessionConfig) (h, existing *runHandle, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.evictLocked()
	if m.closing {
		return nil, nil, status.Error(codes.Unavailable, "agentd is shutting down; retry against the restarted server")
	}
	if r := m.byID[runID]; r != nil {
		if r.sessionID != sessionID {
			return nil, nil, status.Errorf(codes.AlreadyExists, "request_id was already used for run %q of another session; use a new request_id", runID)
		}
		return nil, r, nil
	}
	if r := m.bySession[sessionID]; r != nil {
		return nil, nil, status.Errorf(codes.FailedPrecondition,
			"session %q is already running run %q: use Steer or FollowUp to queue messages, Attach to follow the run, or wait for agent_end", sessionID, r.id)
	}
	if m.appending[sessionID] {
		return nil, nil, status.Errorf(codes.Aborted, "session %q is being appended to by AppendMessages; retry", sessionID)
	}
	if len(m.bySession) >= m.opts.maxActive {
		return nil, nil, status.Errorf(codes.ResourceExhausted,
			"%d runs are active, the most this agentd allows (--max-runs); retry when one ends", len(m.bySession))
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	h = &runHandle{
		ctx:       ctx,
		cancel:    cancel,
		id:        runID,
		sessionID: sessionID,
		steering:  agentloop.NewQueue(cfg.GetSteeringMode()),
		followUp:  agentloop.NewQueue(cfg.GetFollowUpMode()),
		log:       newEventLog(sessionID, runID, m.opts.eventLimit),
		done:      make(chan struct{}),
	}
	m.bySession[sessionID] = h
	m.byID[runID] = h
	m.wg.Add(1)
	m.opts.metrics.runStarted()
	return h, nil, nil
}

// unregister forgets a run that never started its loop.
func (m *runManager) unregister(h *runHandle) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bySession[h.sessionID] == h {
		delete(m.bySession, h.sessionID)
	}
	delete(m.byID, h.id)
	h.cancel(errors.New("the run never started"))
	h.release()
	close(h.done)
	m.wg.Done()
	m.opts.metrics.runEnded()
}

// finish marks the session idle and keeps the run's log for Attach. It
// returns the messages still queued, which the run can no longer deliver.
func (m *runManager) finish(h *runHandle) (undelivered []*agentdv1.AgentMessage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bySession[h.sessionID] == h {
		delete(m.bySession, h.sessionID)
		m.opts.metrics.runEnded()
	}
	h.endedAt = m.opts.now()
	m.finished = append(m.finished, h)
	m.evictLocked()
	// Steer and FollowUp push under m.mu after checking bySession, so no
	// message can be queued after this point.
	undelivered = append(h.steering.Clear(), h.followUp.Clear()...)
	return undelivered
}

// exited records that the run's goroutine returned.
func (m *runManager) exited(h *runHandle) {
	h.release()
	close(h.done)
	m.wg.Done()
}

func (m *runManager) evictLocked() {
	cutoff := m.opts.now().Add(-m.opts.retention)
	n := 0
	for n < len(m.finished) && (len(m.finished)-n > m.opts.maxFinished || m.finished[n].endedAt.Before(cutoff)) {
		if m.byID[m.finished[n].id] == m.finished[n] {
			delete(m.byID, m.finished[n].id)
		}
		m.finished[n] = nil
		n++
	}
	m.finished = m.finished[n:]
}

// active returns the session's active run, or nil.
func (m *runManager) active(sessionID string) *runHandle {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bySession[sessionID]
}

// lookup returns a known run (active or retained), or nil.
func (m *runManager) lookup(runID string) *runHandle {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.evictLocked()
	return m.byID[runID]
}

// enqueue pushes a message into the active run's steering or follow-up
// queue and returns the run and the queue's new length.
func (m *runManager) enqueue(sessionID string, msg *agentdv1.AgentMessage, followUp bool) (*runHandle, int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.bySession[sessionID]
	if h == nil {
		return nil, 0, status.Errorf(codes.FailedPrecondition, "session %q has no active run: use Prompt to start one", sessionID)
	}
	q := h.steering
	if followUp {
		q = h.followUp
	}
	return h, q.Push(msg), nil
}

// holdForAppend reserves an idle session for AppendMessages; release frees
// it.
func (m *runManager) holdForAppend(sessionID string) (release func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.bySession[sessionID]; h != nil {
		return nil, status.Errorf(codes.FailedPrecondition,
			"session %q is running run %q: AppendMessages needs an idle session; use Steer or FollowUp, or wait for agent_end", sessionID, h.id)
	}
	if m.appending[sessionID] {
		return nil, status.Errorf(codes.Aborted, "session %q is being appended to by another call; retry", sessionID)
	}
	m.appending[sessionID] = true
	return func() {
		m.mu.Lock()
		delete(m.appending, sessionID)
		m.mu.Unlock()
	}, nil
}

// abortAndWait cancels a run and waits until its goroutine has returned.
func (m *runManager) abortAndWait(ctx context.Context, h *runHandle, reason string) error {
	h.abort(reason)
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shutdown refuses new runs, aborts the active ones and waits for them to
// record their end.
func (m *runManager) shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.closing = true
	active := make([]*runHandle, 0, len(m.bySession))
	for _, h := range m.bySession {
		active = append(active, h)
	}
	m.mu.Unlock()
	for _, h := range active {
		h.abort("agentd is shutting down")
	}
	done := make(chan struct{})
	go func() {
		m.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// followerWindow is how many events a run may produce beyond what its
// slowest connected follower has sent. It keeps event latency bounded when
// runs produce faster than clients read (the loop waits instead of queueing
// without end); a follower that disconnects stops holding the run back.
const followerWindow = 256

// eventLog is a run's events in seq order, bounded to the newest limit
// events, with a wake-up for followers.
type eventLog struct {
	sessionID, runID string
	limit            int

	mu      sync.Mutex
	events  []*agentdv1.AgentEvent
	first   uint64 // seq of events[0]
	next    uint64 // seq the next event gets
	ended   bool
	waiting bool
	wake    chan struct{}

	// followers maps each connected follower to the last seq it sent;
	// room is signalled when one makes progress or leaves.
	followers  map[*int]uint64
	room       *sync.Cond
	unthrottle bool
}

func newEventLog(sessionID, runID string, limit int) *eventLog {
	l := &eventLog{sessionID: sessionID, runID: runID, limit: limit, first: 1, next: 1,
		wake: make(chan struct{}), followers: map[*int]uint64{}}
	l.room = sync.NewCond(&l.mu)
	return l
}

// stopThrottling lets appends proceed whatever followers do, for a run that
// is being aborted: its last events must not wait for a stalled client.
func (l *eventLog) stopThrottling() {
	l.mu.Lock()
	l.unthrottle = true
	l.room.Broadcast()
	l.mu.Unlock()
}

// join registers a follower that has sent everything up to seq after.
func (l *eventLog) join(after uint64) *int {
	id := new(int)
	l.mu.Lock()
	l.followers[id] = after
	l.mu.Unlock()
	return id
}

// progress records that a follower has sent everything up to seq.
func (l *eventLog) progress(id *int, seq uint64) {
	l.mu.Lock()
	l.followers[id] = seq
	l.room.Broadcast()
	l.mu.Unlock()
}

// leave unregisters a follower.
func (l *eventLog) leave(id *int) {
	l.mu.Lock()
	delete(l.followers, id)
	l.room.Broadcast()
	l.mu.Unlock()
}

// lagLocked is how far the slowest follower is behind the log's end.
func (l *eventLog) lagLocked() uint64 {
	var lag uint64
	for _, sent := range l.followers {
		lag = max(lag, l.next-1-sent)
	}
	return lag
}

// append stamps the event with the run's identity and the next seq, and
// wakes followers; it first waits while the slowest follower lags more than
// followerWindow events. Nothing is appended before agent_start or after
// agent_end. The log owns the event from now on: nobody
// changes it.
func (l *eventLog) append(ev *agentdv1.AgentEvent) {
	l.mu.Lock()
	for !l.unthrottle && l.lagLocked() >= followerWindow {
		l.room.Wait()
	}
	if l.ended || (l.next == 1) != (ev.GetAgentStart() != nil) {
		// agent_start is the first event of a run, and only the first, and
		// agent_end the last: a queue_update racing with either is dropped,
		// as is a second agent_start (the loop
		// announces the queue when it takes from it, and a message queued
		// too late is reported as undelivered before agent_end).
		l.mu.Unlock()
		return
	}
	ev.SessionId, ev.RunId, ev.Seq = l.sessionID, l.runID, l.next
	l.next++
	l.events = append(l.events, ev)
	if len(l.events) > l.limit {
		// Old entries stay in the backing array until append reallocates,
		// so slices handed to followers are never written to.
		l.events = l.events[1:]
		l.first++
	}
	if ev.GetAgentEnd() != nil {
		l.ended = true
	}
	if l.waiting {
		close(l.wake)
		l.wake = make(chan struct{})
		l.waiting = false
	}
	l.mu.Unlock()
}

// errEventsDropped says the events a follower asked for are gone.
type errEventsDropped struct{ after, first uint64 }

// since returns the retained events after seq after (read-only), whether
// the run has ended with them, and a channel closed when more arrive.
func (l *eventLog) since(after uint64) ([]*agentdv1.AgentEvent, bool, <-chan struct{}, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if after+1 < l.first {
		return nil, false, nil, &errEventsDropped{after: after, first: l.first}
	}
	if after >= l.next {
		return nil, false, nil, status.Errorf(codes.OutOfRange,
			"after_seq %d is beyond the last event of run %q (seq %d)", after, l.runID, l.next-1)
	}
	evs := l.events[after+1-l.first:]
	if len(evs) == 0 {
		l.waiting = true
	}
	return evs, l.ended, l.wake, nil
}

// Error implements error.
func (e *errEventsDropped) Error() string { return "events dropped" }

// isEnded reports whether agent_end is in the log.
func (l *eventLog) isEnded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}
