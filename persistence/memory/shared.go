package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// Shared is the in-memory [persistence.Shared]: one database that several
// replicas in one process use at once, each through its own handle
// (NewShared, then Peer for every other replica). It keeps the
// semantics of the PostgreSQL engine (claims with leases, fencing
// generations, controls, wake-ups on the same topics) on the clock
// WithClock sets, so tests of replicas run without a database server and
// move time instead of sleeping. Safe for concurrent use.
type Shared struct {
	*Store
}

var _ persistence.Shared = (*Shared)(nil)

// controlRetention is how long answered controls are kept, and
// unanswered ones of runs that ended, as in the PostgreSQL engine.
const controlRetention = time.Hour

// control is a control message between replicas and its answer.
type control struct {
	id           int64
	runID, owner string
	payload      []byte
	answer       []byte // nil while unanswered
	created      time.Time
	answered     time.Time
}

// watcher is one Watch call of handle h.
type watcher struct {
	h  *Store
	ch chan struct{}
}

// NewShared returns an empty shared database and a first handle onto
// it.
func NewShared(opts ...Option) *Shared {
	return &Shared{Store: &Store{d: newData(opts)}}
}

// Peer returns another handle onto s's database, as another replica
// opens the same database: it sees every write of s and wakes s's
// watchers, and the other way round. Closing one handle leaves the
// others open.
func (s *Shared) Peer() *Shared {
	return &Shared{Store: &Store{d: s.d}}
}

// wake signals the watchers of topic, of every open handle, without
// blocking: a watcher whose buffer is full has a wake-up pending
// already. The write lock is held.
func (d *data) wake(topic string) {
	for w := range d.watchers[topic] {
		if w.h.closed {
			continue
		}
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// Watch implements [persistence.Shared]. A closed handle's watches are
// woken no more.
func (s *Shared) Watch(topic string) (<-chan struct{}, func()) {
	w := &watcher{h: s.Store, ch: make(chan struct{}, 1)}
	s.d.mu.Lock()
	ws := s.d.watchers[topic]
	if ws == nil {
		ws = map[*watcher]struct{}{}
		s.d.watchers[topic] = ws
	}
	ws[w] = struct{}{}
	s.d.mu.Unlock()
	var once sync.Once
	return w.ch, func() {
		once.Do(func() {
			s.d.mu.Lock()
			defer s.d.mu.Unlock()
			delete(s.d.watchers[topic], w)
			if len(s.d.watchers[topic]) == 0 {
				delete(s.d.watchers, topic)
			}
		})
	}
}

// Ping implements [persistence.Shared]: it fails once the handle is
// closed.
func (s *Shared) Ping(context.Context) error {
	return s.read(func(*data) error { return nil })
}

// checkRunID refuses an empty or over-long run id.
func checkRunID(sessionID, runID string) error {
	if runID == "" || len(runID) > persistence.MaxIDLength {
		return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, RunID: runID, Detail: fmt.Sprintf("run id must be 1 to %d bytes", persistence.MaxIDLength)}
	}
	return nil
}

// ClaimRun implements [persistence.Shared].
func (s *Shared) ClaimRun(_ context.Context, sessionID, runID, owner string, lease time.Duration, req *agentdv1.RunRequest) (persistence.Fence, error) {
	if err := checkRunID(sessionID, runID); err != nil {
		return persistence.Fence{}, err
	}
	if owner == "" || lease <= 0 {
		return persistence.Fence{}, &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sessionID, RunID: runID, Detail: fmt.Sprintf("a claim needs an owner and a positive lease (owner %q, lease %v)", owner, lease)}
	}
	var f persistence.Fence
	err := s.write(func(d *data) error {
		if _, err := d.session(sessionID); err != nil {
			return err
		}
		if _, dup := d.runs[runID]; dup {
			return &persistence.Error{Kind: persistence.ErrConflict, RunID: runID, Detail: "a run with this id exists"}
		}
		if active := d.activeRun(sessionID); active != nil {
			rec := active.rec
			return &persistence.ActiveRunError{Run: &rec}
		}
		now := d.nowTime()
		d.runs[runID] = &run{rec: persistence.Run{ID: runID, SessionID: sessionID, StartTime: now, Owner: owner, LeaseExpiry: now.Add(lease), Request: storedRequest(req), ReservedSeq: persistence.StartReservedSeq}, generation: 1}
		f = persistence.Fence{RunID: runID, Owner: owner, Generation: 1}
		return nil
	})
	return f, err
}

// activeRun is the session's active claimed run, or nil.
func (d *data) activeRun(sessionID string) *run {
	for _, r := range d.runs {
		if r.rec.SessionID == sessionID && r.rec.Owner != "" && !r.rec.Ended() {
			return r
		}
	}
	return nil
}

// RenewLeases implements [persistence.Shared]. A lease that expired is not
// renewed even when no one closed the run yet.
func (s *Shared) RenewLeases(_ context.Context, owner string, runIDs []string, lease time.Duration) ([]string, error) {
	if len(runIDs) == 0 {
		return nil, nil
	}
	if lease <= 0 {
		return nil, &persistence.Error{Kind: persistence.ErrInvalid, Detail: fmt.Sprintf("lease %v is not positive", lease)}
	}
	var lost []string
	err := s.write(func(d *data) error {
		now := d.nowTime()
		for _, id := range runIDs {
			r, ok := d.runs[id]
			if !ok || r.rec.Owner != owner || r.rec.Ended() || !r.rec.LeaseExpiry.After(now) {
				lost = append(lost, id)
				continue
			}
			r.rec.LeaseExpiry = now.Add(lease)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return lost, nil
}

// ActiveRun implements [persistence.Shared].
func (s *Shared) ActiveRun(_ context.Context, sessionID string) (*persistence.Run, error) {
	var out *persistence.Run
	err := s.read(func(d *data) error {
		if _, err := d.session(sessionID); err != nil {
			return err
		}
		r := d.activeRun(sessionID)
		if r == nil {
			return &persistence.Error{Kind: persistence.ErrNotFound, SessionID: sessionID, Detail: "no active claimed run"}
		}
		rec := r.rec
		out = &rec
		return nil
	})
	return out, err
}

// CloseExpiredRuns implements [persistence.Shared]. It runs under the
// write lock, so each run is closed by one caller only. The generation
// moves, which fences the former owner out.
func (s *Shared) CloseExpiredRuns(context.Context) ([]*persistence.Run, error) {
	var out []*persistence.Run
	err := s.write(func(d *data) error {
		now := d.nowTime()
		for _, r := range d.runs {
			if r.rec.Ended() || r.rec.Owner == "" || !r.rec.LeaseExpiry.Before(now) {
				continue
			}
			r.rec.EndTime, r.rec.Outcome, r.rec.ErrorMessage = now, agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED, ""
			r.generation++
			rec := r.rec
			out = append(out, &rec)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sortRuns(out)
	return out, nil
}

// fenced is the ErrFenced error of a write of run runID.
func fenced(runID, format string, args ...any) error {
	return &persistence.Error{Kind: persistence.ErrFenced, RunID: runID, Detail: fmt.Sprintf(format, args...)}
}

// fence returns the run f claims when f still holds on it: the same
// owner and generation, and the run active with its lease not expired.
// With afterEnd a run that ended keeps its fence: only the fenced EndRun
// ends a run without moving the generation, so an ended run with f's
// generation was ended by f's holder itself, which still writes the
// run's last events. The write lock is held.
func (d *data) fence(f persistence.Fence, afterEnd bool) (*run, error) {
	r, ok := d.runs[f.RunID]
	switch {
	case !ok:
		return nil, fenced(f.RunID, "the run does not exist")
	case r.rec.Owner != f.Owner || r.generation != f.Generation:
		return nil, fenced(f.RunID, "the run is claimed by %q generation %d, not %q generation %d", r.rec.Owner, r.generation, f.Owner, f.Generation)
	case r.rec.Ended() && afterEnd:
		return r, nil
	case r.rec.Ended():
		return nil, fenced(f.RunID, "the run has ended")
	case !r.rec.LeaseExpiry.After(d.nowTime()):
		return nil, fenced(f.RunID, "the lease of %q expired", f.Owner)
	}
	return r, nil
}

// fenceSession is fence for a write of session sess, which must be the
// run's.
func (d *data) fenceSession(f persistence.Fence, sess *session) error {
	r, err := d.fence(f, false)
	if err != nil {
		return err
	}
	if r.rec.SessionID != sess.id {
		return &persistence.Error{Kind: persistence.ErrInvalid, SessionID: sess.id, RunID: f.RunID, Detail: "the run belongs to another session"}
	}
	return nil
}

// fencedWriter is the writer of a claimed run (Shared.Fenced): every
// write checks its fence under the write lock.
type fencedWriter struct {
	s *Shared
	f persistence.Fence
}

// Fenced implements [persistence.Shared].
func (s *Shared) Fenced(f persistence.Fence) persistence.RunWriter {
	return &fencedWriter{s: s, f: f}
}

// Append is Store.Append under the fence.
func (w *fencedWriter) Append(_ context.Context, sessionID string, entries ...*agentdv1.Entry) error {
	if _, err := persistence.CheckAppend(sessionID, entries); err != nil {
		return err
	}
	return w.s.write(func(d *data) error {
		sess, err := d.session(sessionID)
		if err != nil {
			return err
		}
		if err := d.fenceSession(w.f, sess); err != nil {
			return err
		}
		return d.append(sess, entries)
	})
}

// SetLeaf is Store.SetLeaf under the fence.
func (w *fencedWriter) SetLeaf(_ context.Context, sessionID, entryID string) error {
	return w.s.write(func(d *data) error {
		sess, err := d.session(sessionID)
		if err != nil {
			return err
		}
		if err := d.fenceSession(w.f, sess); err != nil {
			return err
		}
		return d.setLeaf(sess, entryID)
	})
}

// AppendEvents is Store.AppendEvents under the fence; it still stores
// after the holder ended the run with EndRun of this writer.
func (w *fencedWriter) AppendEvents(_ context.Context, runID string, events []persistence.Event) error {
	if err := w.f.CheckRun(runID); err != nil {
		return err
	}
	if len(events) == 0 {
		return &persistence.Error{Kind: persistence.ErrInvalid, RunID: runID, Detail: "no events to append"}
	}
	return w.s.write(func(d *data) error {
		r, err := d.fence(w.f, true)
		if err != nil {
			return err
		}
		return d.appendEvents(r, events)
	})
}

// ReserveEvents is Store.ReserveEvents under the fence; like
// AppendEvents, it still stores after the holder ended the run with EndRun
// of this writer.
func (w *fencedWriter) ReserveEvents(_ context.Context, runID string, through uint64) error {
	if err := w.f.CheckRun(runID); err != nil {
		return err
	}
	return w.s.write(func(d *data) error {
		r, err := d.fence(w.f, true)
		if err != nil {
			return err
		}
		r.rec.ReservedSeq = max(r.rec.ReservedSeq, through)
		return nil
	})
}

// EndRun is Store.EndRun under the fence. The generation stays, so the
// holder still stores the run's last events after it.
func (w *fencedWriter) EndRun(_ context.Context, runID string, end persistence.RunEnd) error {
	if err := w.f.CheckRun(runID); err != nil {
		return err
	}
	if err := end.Check(runID); err != nil {
		return err
	}
	return w.s.write(func(d *data) error {
		r, err := d.fence(w.f, true)
		if err != nil {
			return err
		}
		return d.endRun(r, end, false)
	})
}

// SetRunPrompt is Store.SetRunPrompt under the fence.
func (w *fencedWriter) SetRunPrompt(_ context.Context, runID, entryID string) error {
	if err := w.f.CheckRun(runID); err != nil {
		return err
	}
	return w.s.write(func(d *data) error {
		r, err := d.fence(w.f, false)
		if err != nil {
			return err
		}
		d.setRunPrompt(r, entryID)
		return nil
	})
}

// SendControl implements [persistence.Shared]: the control goes to the
// run's owner at the time it is stored.
func (s *Shared) SendControl(_ context.Context, runID string, payload []byte) (int64, error) {
	var id int64
	err := s.write(func(d *data) error {
		r, ok := d.runs[runID]
		if !ok || r.rec.Ended() || r.rec.Owner == "" {
			return &persistence.Error{Kind: persistence.ErrNotFound, RunID: runID, Detail: "no active claimed run with this id"}
		}
		d.nextControl++
		id = d.nextControl
		d.controls[id] = &control{id: id, runID: runID, owner: r.rec.Owner, payload: append([]byte{}, payload...), created: d.nowTime()}
		d.wake(persistence.ControlTopic(r.rec.Owner))
		return nil
	})
	if err != nil {
		return 0, err
	}
	return id, nil
}

// PendingControls implements [persistence.Shared].
func (s *Shared) PendingControls(_ context.Context, owner string) ([]persistence.Control, error) {
	var out []persistence.Control
	err := s.read(func(d *data) error {
		for _, c := range d.controls {
			if c.owner == owner && c.answer == nil {
				out = append(out, persistence.Control{ID: c.id, RunID: c.runID, Payload: append([]byte{}, c.payload...)})
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b persistence.Control) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// controlNotFound is the error for an unknown control id.
func controlNotFound(id int64) error {
	return &persistence.Error{Kind: persistence.ErrNotFound, Detail: fmt.Sprintf("control %d does not exist", id)}
}

// AnswerControl implements [persistence.Shared].
func (s *Shared) AnswerControl(_ context.Context, id int64, answer []byte) error {
	return s.write(func(d *data) error {
		c, ok := d.controls[id]
		if !ok {
			return controlNotFound(id)
		}
		if c.answer != nil {
			return &persistence.Error{Kind: persistence.ErrConflict, Detail: fmt.Sprintf("control %d is answered already", id)}
		}
		// Never nil: nil means unanswered.
		c.answer, c.answered = append([]byte{}, answer...), d.nowTime()
		d.wake(persistence.AnswerTopic(id))
		return nil
	})
}

// ControlAnswer implements [persistence.Shared].
func (s *Shared) ControlAnswer(_ context.Context, id int64) ([]byte, error) {
	var out []byte
	err := s.read(func(d *data) error {
		c, ok := d.controls[id]
		if !ok {
			return controlNotFound(id)
		}
		if c.answer != nil {
			out = append([]byte{}, c.answer...)
		}
		return nil
	})
	return out, err
}

// pruneControls deletes the controls nobody needs any more: answered
// ones controlRetention after the answer, and unanswered ones of runs
// that ended, controlRetention after they were sent. The write lock is
// held.
func (d *data) pruneControls() {
	cutoff := d.nowTime().Add(-controlRetention)
	for id, c := range d.controls {
		r, ok := d.runs[c.runID]
		switch {
		case !ok,
			c.answer != nil && c.answered.Before(cutoff),
			c.answer == nil && c.created.Before(cutoff) && r.rec.Ended():
			delete(d.controls, id)
		}
	}
}

// ManualClock is a clock that moves only when told: pass its Now to
// WithClock and Advance it instead of sleeping. Safe for concurrent use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a clock that reads start until advanced.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start}
}

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
