package agent

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// FollowOptions tune Follow.
type FollowOptions struct {
	// AbortOnDrop aborts the run when the follower goes away (its context
	// ends, or send fails) before agent_end: the stream of a Prompt or
	// Continue that did not ask to detach.
	AbortOnDrop bool
	// ReportRefusal makes Follow return, after agent_end, the refusal of
	// the run's prompt by a USER_PROMPT hook (ERROR_REASON_PROMPT_REFUSED):
	// the Prompt call whose prompt was refused fails with it.
	ReportRefusal bool
}

// storePage is how many stored events a follower reads at a time.
const storePage = 1024

// pollInterval is how often a follower of a run that another process
// runs looks for its new events in the store.
const pollInterval = FlushInterval

// lastEventsGrace is how long a follower waits for the last events of a
// run whose end is recorded before it gives up on them.
const lastEventsGrace = 5 * time.Second

// Follow sends the events of a run with a seq greater than after to send,
// in order and each once, until agent_end: first the ones it missed, then
// live ones as the run produces them. An empty runID follows the session's
// active run. It reads the run's events from memory while the run is
// active here, and from the store otherwise: after the run ended, after a
// restart, or for a run another process runs. It returns nil after
// agent_end, the error of send, or the context's error.
func (a *Agent) Follow(ctx context.Context, sessionID, runID string, after uint64, opts FollowOptions, send func(Event) error) error {
	if runID == "" {
		if r := a.active(sessionID); r != nil {
			return a.followLive(ctx, r, after, opts, send)
		}
		remote, err := a.remoteRun(ctx, sessionID)
		if err != nil {
			return err
		}
		if remote == nil {
			return refuse(agentdv1.ErrorReason_ERROR_REASON_RUN_NOT_ACTIVE, "session %q has no active run; pass the run_id of a recent run to replay its events, or read GetTranscript", sessionID).with("session_id", sessionID)
		}
		runID = remote.ID
	}
	if r := a.lookup(runID); r != nil {
		if r.sessionID != sessionID {
			return runNotFound(sessionID, runID)
		}
		return a.followLive(ctx, r, after, opts, send)
	}
	return a.followStored(ctx, sessionID, runID, after, send)
}

func runNotFound(sessionID, runID string) error {
	return refuse(agentdv1.ErrorReason_ERROR_REASON_RUN_NOT_FOUND, "run %q of session %q not found; GetTranscript has every stored message", runID, sessionID)
}

// followLive follows a run of this agent.
func (a *Agent) followLive(ctx context.Context, r *Run, after uint64, opts FollowOptions, send func(Event) error) error {
	var me *int // set while reading from memory, so the run waits for us
	defer func() {
		if me != nil {
			r.log.leave(me)
		}
	}()
	dropped := func() {
		if opts.AbortOnDrop && !r.log.isEnded() {
			r.abort("the client's stream ended before agent_end and the request did not set detach")
		}
	}
	for {
		evs, ended, wake, inStore, first, err := r.log.since(after)
		if err != nil {
			return err
		}
		if inStore {
			// Older events were stored and dropped from memory: catch up
			// from the store without holding the run back.
			if me != nil {
				r.log.leave(me)
				me = nil
			}
			n, err := a.replay(ctx, r.id, &after, first-1, send)
			if err != nil {
				var se storeError
				if !errors.As(err, &se) || ctx.Err() != nil {
					dropped() // the client went away
				}
				return err
			}
			if n == 0 {
				return refuse(agentdv1.ErrorReason_ERROR_REASON_SEQ_OUT_OF_RANGE, "events after seq %d of run %q are missing from the store", after, r.id)
			}
			continue
		}
		if me == nil {
			me = r.log.join(after)
		}
		for _, e := range evs {
			if err := send(e); err != nil {
				dropped()
				return err
			}
			after = e.Seq
		}
		if len(evs) > 0 {
			r.log.progress(me, after)
			continue
		}
		if ended {
			if refused := r.refusal(); opts.ReportRefusal && refused != nil {
				return refused
			}
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			dropped()
			return ctx.Err()
		}
	}
}

// storeError marks an error of the store, as opposed to one of send.
type storeError struct{ err error }

func (e storeError) Error() string { return e.err.Error() }
func (e storeError) Unwrap() error { return e.err }

// replay sends the stored events after *after up to seq until (0 for no
// bound), advancing *after, and returns how many it sent. Errors of the
// store come wrapped in storeError.
func (a *Agent) replay(ctx context.Context, runID string, after *uint64, until uint64, send func(Event) error) (int, error) {
	sent := 0
	for until == 0 || *after < until {
		evs, err := a.store.Events(ctx, runID, *after, storePage)
		if err != nil {
			return sent, storeError{err}
		}
		if len(evs) == 0 {
			return sent, nil
		}
		for _, ev := range evs {
			if until != 0 && ev.Seq > until {
				return sent, nil
			}
			if err := send(Event{Seq: ev.Seq, Data: ev.Data, End: isAgentEnd(ev.Data)}); err != nil {
				return sent, err
			}
			*after = ev.Seq
			sent++
		}
	}
	return sent, nil
}

// followStored follows a run that is not active here, from the store. On
// a shared store the replica running it signals its new events; without a
// signal (lost while the listener reconnects) the store is read anyway
// now and then.
func (a *Agent) followStored(ctx context.Context, sessionID, runID string, after uint64, send func(Event) error) error {
	var wake <-chan struct{}
	poll := pollInterval
	if a.shared != nil {
		w, stop := a.shared.Watch(persistence.EventsTopic(runID))
		defer stop()
		wake, poll = w, sharedPoll
	}
	run, err := a.store.GetRun(ctx, runID)
	if errors.Is(err, persistence.ErrNotFound) || (err == nil && run.SessionID != sessionID) {
		return runNotFound(sessionID, runID)
	}
	if err != nil {
		return err
	}
	if run.EventsPruned {
		return a.eventsExpired(sessionID, runID)
	}
	if run.Ended() && after > run.LastSeq {
		// The client saw events the store does not hold (lost to a crash
		// before this agentd reserved seqs, or the log's last batch was
		// lost after the run's end was recorded): it gets the run's end
		// all the same, never a stream without one.
		end, err := a.finalEvent(ctx, run)
		if err != nil {
			return err
		}
		return send(end)
	}
	ended := false
	var caughtUp time.Time // when the run was first seen ended with every stored event sent
	wrapped := func(e Event) error {
		ended = ended || e.End
		return send(e)
	}
	for {
		if _, err := a.replay(ctx, runID, &after, 0, wrapped); err != nil {
			var se storeError
			if errors.As(err, &se) {
				return se.err
			}
			return err
		}
		if ended {
			return nil
		}
		// Everything stored is sent. A run that ended has no more; one that
		// did not is run by another process (or is being repaired): look
		// again shortly.
		if r := a.lookup(runID); r != nil {
			return a.followLive(ctx, r, after, FollowOptions{}, send)
		}
		if run, err = a.store.GetRun(ctx, runID); err != nil {
			return err
		}
		if run.EventsPruned {
			// Pruned while we followed: what is left will never come.
			return a.eventsExpired(sessionID, runID)
		}
		if run.Ended() && after >= run.LastSeq {
			// A run's last events (agent_end) are stored just after its
			// end is recorded, by its replica or by the one that closed
			// it: wait for them a little, but not for a log whose writer
			// is gone, nor for one whose agent_end is stored already (a
			// follower that starts after it has nothing left to get).
			if caughtUp.IsZero() {
				if end, err := a.storedEnd(ctx, runID, run.LastSeq); err != nil {
					return err
				} else if end != nil {
					return nil
				}
				caughtUp = time.Now()
			} else if time.Since(caughtUp) > lastEventsGrace {
				// They are lost: end the stream with the run's end.
				return send(recordedEnd(run))
			}
		}
		t := time.NewTimer(poll)
		select {
		case <-t.C:
		case <-wake:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// eventsExpired refuses to follow a run whose events were pruned.
func (a *Agent) eventsExpired(sessionID, runID string) error {
	return refuse(agentdv1.ErrorReason_ERROR_REASON_EVENTS_EXPIRED, "the events of run %q of session %q are no longer retained (the retention is %v, see --event-retention); GetTranscript has every stored message",
		runID, sessionID, a.opts.EventRetention)
}

// storedEnd returns the stored event of run runID with seq last when it is
// the run's agent_end, otherwise nil.
func (a *Agent) storedEnd(ctx context.Context, runID string, last uint64) (*Event, error) {
	if last == 0 {
		return nil, nil
	}
	evs, err := a.store.Events(ctx, runID, last-1, 1)
	if err != nil {
		return nil, err
	}
	if len(evs) == 1 && evs[0].Seq == last && isAgentEnd(evs[0].Data) {
		return &Event{Seq: last, Data: evs[0].Data, End: true}, nil
	}
	return nil, nil
}

// finalEvent returns the agent_end of an ended run: the stored one, or,
// when its log lacks it, the one its record implies (recordedEnd).
func (a *Agent) finalEvent(ctx context.Context, run *persistence.Run) (Event, error) {
	if end, err := a.storedEnd(ctx, run.ID, run.LastSeq); err != nil {
		return Event{}, err
	} else if end != nil {
		return *end, nil
	}
	return recordedEnd(run), nil
}

// recordedEnd is the agent_end of an ended run whose log lost it, built
// from the run's record, the same on every replica: its seq follows every
// seq the log stored or reserved.
func recordedEnd(run *persistence.Run) Event {
	ev := &agentdv1.AgentEvent{
		SessionId: run.SessionID, RunId: run.ID, Seq: max(run.LastSeq, run.ReservedSeq) + 1, Time: timestamppb.New(run.EndTime),
		Event: &agentdv1.AgentEvent_AgentEnd{AgentEnd: &agentdv1.AgentEnd{
			Outcome: run.Outcome, ErrorMessage: run.ErrorMessage, Usage: run.Usage, StructuredOutput: run.StructuredOutput,
			Metadata: run.Request.GetMetadata(),
		}},
	}
	data, _ := proto.Marshal(ev) // the record's parts decoded from protobufs: they encode
	return Event{Seq: ev.Seq, Data: data, End: true}
}
