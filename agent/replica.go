package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/replicapb"
	"github.com/agentd/agentd/persistence"
)

// Replica defaults, for stores shared by several agentd processes
// ([persistence.Shared]).
const (
	// DefaultLease is how long a replica's claim on a run lasts without a
	// renewal. A replica renews every third of it, so two missed renewals
	// are survived; another replica closes the run once it has expired.
	DefaultLease = 10 * time.Second
	// ControlTimeout bounds how long a replica waits for the owner of a run
	// to answer a request it handed over.
	ControlTimeout = 10 * time.Second
	// controlPoll is how often a replica looks for controls and answers
	// without a wake-up: signals are lost while the listener reconnects.
	controlPoll = time.Second
	// sharedPoll is how often a follower of a run another replica runs
	// reads the store without a wake-up.
	sharedPoll = time.Second
)

// busyRefusal is the refusal of a run on a session that runs runID.
func busyRefusal(sessionID, runID string) *Error {
	return refuse(agentdv1.ErrorReason_ERROR_REASON_SESSION_BUSY,
		"session %q is already running run %q: use Steer or FollowUp to queue messages, Attach to follow the run, or wait for agent_end", sessionID, runID).
		with("session_id", sessionID, "run_id", runID)
}

// startRun records the run's start: on a shared store as a claim of this
// replica, whose writes are fenced from then on.
func (a *Agent) startRun(ctx context.Context, r *Run) error {
	if a.shared == nil {
		if err := a.store.StartRun(ctx, r.sessionID, r.id, r.request); err != nil {
			return err
		}
		r.log.startReserved()
		return nil
	}
	fence, err := a.shared.ClaimRun(ctx, r.sessionID, r.id, a.opts.ReplicaID, a.opts.Lease, r.request)
	var active *persistence.ActiveRunError
	if errors.As(err, &active) && active.Run.ID != r.id {
		return busyRefusal(r.sessionID, active.Run.ID)
	}
	if err != nil {
		return err
	}
	w := a.shared.Fenced(fence)
	// The lease loop reads the writers of the runs it lists under a.mu:
	// the run is listed already.
	a.mu.Lock()
	r.writer = w
	a.mu.Unlock()
	r.log.store = w
	r.log.startReserved()
	return nil
}

// remoteRun returns the session's active run when another replica runs
// it, or nil.
func (a *Agent) remoteRun(ctx context.Context, sessionID string) (*persistence.Run, error) {
	if a.shared == nil {
		return nil, nil
	}
	run, err := a.shared.ActiveRun(ctx, sessionID)
	if errors.Is(err, persistence.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if run.Owner == a.opts.ReplicaID {
		// Ours, and no longer in memory: it is ending.
		return nil, nil
	}
	return run, nil
}

// leaseLostText says why a run stopped on the replica that lost it.
func (a *Agent) leaseLostText(runID string) string {
	return fmt.Sprintf("agentd replica %q lost its lease on run %q (it was paused or cut off from the database for longer than the lease, %v); "+
		"the run stopped here and another replica closes it as interrupted: Attach to its events for the end, then Continue (after ResolveInDoubt for a tool call it leaves in doubt)", a.opts.ReplicaID, runID, a.opts.Lease)
}

// leaseLost records, once, that the run's claim is lost.
func (r *Run) leaseLost() {
	if r.fenced.CompareAndSwap(false, true) {
		r.a.opts.Logger.Error("lost the lease of an active run; stopping it", "session", r.sessionID, "run", r.id)
		r.a.opts.Metrics.LeaseLost()
	}
}

// leaseLoop renews the leases of this replica's active runs until Close,
// and stops the runs whose lease is lost. When the database cannot be
// reached for a whole lease every active run is stopped: its writes are
// refused by then anyway.
func (a *Agent) leaseLoop() {
	defer a.bg.Done()
	t := time.NewTicker(a.opts.Lease / 3)
	defer t.Stop()
	renewed := time.Now()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
		}
		a.mu.Lock()
		held := make([]string, 0, len(a.bySession))
		for _, r := range a.bySession {
			if r.writer != nil && r.writer != persistence.RunWriter(a.store) {
				held = append(held, r.id)
			}
		}
		a.mu.Unlock()
		a.opts.Metrics.LeasesHeld(len(held))
		if len(held) == 0 {
			renewed = time.Now()
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), a.opts.Lease/3)
		lost, err := a.shared.RenewLeases(ctx, a.opts.ReplicaID, held, a.opts.Lease)
		cancel()
		if err != nil {
			a.opts.Logger.Warn("could not renew the leases of active runs", "runs", len(held), "err", err)
			if time.Since(renewed) < a.opts.Lease {
				continue
			}
			lost = held
		} else {
			renewed = time.Now()
		}
		for _, id := range lost {
			if r := a.lookup(id); r != nil && !r.log.isEnded() {
				r.leaseLost()
				r.abort(a.leaseLostText(id))
			}
		}
	}
}

// repairLoop closes the runs whose lease expired, whichever replica held
// them, until Close.
func (a *Agent) repairLoop() {
	defer a.bg.Done()
	every := min(max(a.opts.Lease/4, 100*time.Millisecond), 2*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
		}
		if err := a.repair(context.Background()); err != nil {
			a.opts.Logger.Warn("could not close runs whose lease expired; trying again", "err", err)
		}
	}
}

// relay hands a request for the session's active run to the replica that
// runs it and returns that replica's answer. handled is false when no
// other replica runs the session: the request is answered here, as on one
// process.
func (a *Agent) relay(ctx context.Context, sessionID string, ctl *replicapb.ReplicaControl) (ans *replicapb.ReplicaControlAnswer, handled bool, err error) {
	run, err := a.remoteRun(ctx, sessionID)
	if err != nil || run == nil {
		return nil, err != nil, err
	}
	ctl.SessionId, ctl.RunId = sessionID, run.ID
	payload, err := proto.Marshal(ctl)
	if err != nil {
		return nil, true, fmt.Errorf("encode a control for run %s: %w", run.ID, err)
	}
	id, err := a.shared.SendControl(ctx, run.ID, payload)
	if errors.Is(err, persistence.ErrNotFound) {
		return nil, false, nil // the run ended meanwhile
	}
	if err != nil {
		return nil, true, err
	}
	wake, stop := a.shared.Watch(persistence.AnswerTopic(id))
	defer stop()
	deadline := time.NewTimer(ControlTimeout)
	defer deadline.Stop()
	poll := time.NewTicker(controlPoll / 4)
	defer poll.Stop()
	for {
		data, err := a.shared.ControlAnswer(ctx, id)
		if err != nil {
			return nil, true, err
		}
		if data != nil {
			ans := &replicapb.ReplicaControlAnswer{}
			if err := proto.Unmarshal(data, ans); err != nil {
				return nil, true, fmt.Errorf("decode the answer to control %d: %w", id, err)
			}
			return ans, true, answerError(ans)
		}
		select {
		case <-wake:
		case <-poll.C:
		case <-deadline.C:
			return nil, true, refuse(agentdv1.ErrorReason_ERROR_REASON_REPLICA_UNREACHABLE, "agentd replica %q, which runs run %q of session %q, did not answer within %v; retry",
				run.Owner, run.ID, sessionID, ControlTimeout)
		case <-ctx.Done():
			return nil, true, ctx.Err()
		}
	}
}

// controlLoop carries out the controls other replicas hand to this one,
// until Close.
func (a *Agent) controlLoop() {
	defer a.bg.Done()
	wake, stopWatch := a.shared.Watch(persistence.ControlTopic(a.opts.ReplicaID))
	defer stopWatch()
	t := time.NewTicker(controlPoll)
	defer t.Stop()
	var mu sync.Mutex
	serving := map[int64]bool{}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), ControlTimeout)
		controls, err := a.shared.PendingControls(ctx, a.opts.ReplicaID)
		cancel()
		if err != nil {
			a.opts.Logger.Warn("could not read controls from other replicas; trying again", "err", err)
		}
		for _, c := range controls {
			mu.Lock()
			busy := serving[c.ID]
			serving[c.ID] = true
			mu.Unlock()
			if busy {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				a.serveControl(c)
				mu.Lock()
				delete(serving, c.ID)
				mu.Unlock()
			}()
		}
		select {
		case <-a.stop:
			return
		case <-wake:
		case <-t.C:
		}
	}
}

// serveControl carries out one control and stores the answer.
func (a *Agent) serveControl(c persistence.Control) {
	ctx, cancel := context.WithTimeout(context.Background(), ControlTimeout)
	defer cancel()
	ctl := &replicapb.ReplicaControl{}
	ans := &replicapb.ReplicaControlAnswer{}
	var err error
	if err = proto.Unmarshal(c.Payload, ctl); err == nil {
		ans, err = a.controlHere(ctx, ctl)
	}
	if err != nil {
		ans = errorAnswer(err)
	}
	data, err := proto.Marshal(ans)
	if err == nil {
		err = a.shared.AnswerControl(ctx, c.ID, data)
	}
	if err != nil && !errors.Is(err, persistence.ErrConflict) {
		a.opts.Logger.Warn("could not answer a control of another replica", "control", c.ID, "run", c.RunID, "err", err)
	}
}

// errorAnswer is the answer that carries err to the sender.
func errorAnswer(err error) *replicapb.ReplicaControlAnswer {
	var fe *FieldError
	if errors.As(err, &fe) {
		return &replicapb.ReplicaControlAnswer{ErrorReason: fe.Reason, ErrorField: fe.Field, ErrorMessage: fe.Description, ErrorMetadata: fe.Metadata}
	}
	var e *Error
	if errors.As(err, &e) {
		return &replicapb.ReplicaControlAnswer{ErrorReason: e.Reason, ErrorMessage: e.Message, ErrorMetadata: e.Metadata}
	}
	return &replicapb.ReplicaControlAnswer{ErrorReason: agentdv1.ErrorReason_ERROR_REASON_REPLICA_UNREACHABLE,
		ErrorMessage: "the replica running the run failed: " + err.Error()}
}

// answerError is the error an answer carries, or nil.
func answerError(ans *replicapb.ReplicaControlAnswer) error {
	reason := ans.GetErrorReason()
	switch {
	case reason == agentdv1.ErrorReason_ERROR_REASON_UNSPECIFIED:
		return nil
	case ans.GetErrorField() != "":
		return &FieldError{Field: ans.GetErrorField(), Description: ans.GetErrorMessage(), Reason: reason, Metadata: ans.GetErrorMetadata()}
	}
	return &Error{Reason: reason, Message: ans.GetErrorMessage(), Metadata: ans.GetErrorMetadata()}
}
