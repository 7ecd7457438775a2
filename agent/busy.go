package agent

import (
	"context"
	"errors"

	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/replicapb"
)

// What a Prompt does while another run is active on its session
// (PromptRequest.if_busy; docs/ARCHITECTURE.md, "Busy sessions").

// maxBusyRounds bounds how often StartAndFollow tries again when the
// session's active run changes under it (a run ending as the prompt is
// queued, another client's run starting after an interrupt): past it the
// last SESSION_BUSY refusal stands.
const maxBusyRounds = 4

// errNotTaken stops following a run that ended with the prompt still in
// its queue.
var errNotTaken = errors.New("the run ended without taking the queued prompt")

// StartAndFollow starts req's run and streams its events to send (Start,
// then Follow with opts). While another run is active on the session the
// prompt's busy policy (req.Run.IfBusy) decides:
//
//   - REJECT (and UNSPECIFIED): Start's SESSION_BUSY refusal is returned.
//   - ENQUEUE and STEER: the prompt is queued into the active run as a
//     follow-up or steering message (through the replica that runs it, on
//     a shared store), and that run's events from the moment of queuing
//     to its agent_end are sent. Should the run end with the prompt still
//     queued, its agent_end is not sent: the prompt starts a run of its
//     own, whose events follow on the same stream. The prompt's per-run
//     settings apply only then.
//   - INTERRUPT: the active run is aborted and its end awaited (Abort),
//     then the prompt's run is started and streamed.
//
// A request id keeps its meaning: the run it started before is found
// first, so a retried INTERRUPT follows its own run instead of aborting
// it. Following a run the prompt was queued into never aborts that run
// when the stream drops (it is another caller's run); opts apply to a
// run the prompt starts.
func (a *Agent) StartAndFollow(ctx context.Context, req StartRequest, opts FollowOptions, send func(Event) error) error {
	policy := req.Run.GetIfBusy()
	for round := 0; ; round++ {
		runID, err := a.Start(ctx, req)
		if err == nil {
			return a.Follow(ctx, req.SessionID, runID, 0, opts, send)
		}
		active := busyRunOf(err)
		if active == "" || req.Prompt == nil || round+1 >= maxBusyRounds {
			return err
		}
		// The next round starts after another run: read the session again.
		req.Session = nil
		switch policy {
		case agentdv1.BusyPolicy_BUSY_POLICY_INTERRUPT:
			if _, aerr := a.Abort(ctx, req.SessionID, active); aerr != nil && !errors.Is(aerr, ErrIdle) {
				return aerr
			}
		case agentdv1.BusyPolicy_BUSY_POLICY_ENQUEUE, agentdv1.BusyPolicy_BUSY_POLICY_STEER:
			taken, qerr := a.followQueued(ctx, req.SessionID, active, req.Prompt, policy == agentdv1.BusyPolicy_BUSY_POLICY_STEER, send)
			if qerr != nil || taken {
				return qerr
			}
		default:
			return err
		}
	}
}

// busyRunOf is the active run a SESSION_BUSY refusal names, or "" for any
// other error.
func busyRunOf(err error) string {
	var e *Error
	if !errors.As(err, &e) || e.Reason != agentdv1.ErrorReason_ERROR_REASON_SESSION_BUSY {
		return ""
	}
	return e.Metadata["run_id"]
}

// followQueued queues msg into run runID of the session and sends that
// run's events from then on. taken is false when the prompt was not
// queued (the run is no longer active) or the run ended with it still
// queued; the prompt then needs a run of its own, and the run's agent_end
// was not sent.
func (a *Agent) followQueued(ctx context.Context, sessionID, runID string, msg *agentdv1.AgentMessage, steer bool, send func(Event) error) (taken bool, err error) {
	after := a.lastSeqOf(ctx, runID)
	ctl := &replicapb.ReplicaControl{RunId: runID, Action: &replicapb.ReplicaControl_FollowUp{FollowUp: msg}}
	if steer {
		ctl.Action = &replicapb.ReplicaControl_Steer{Steer: msg}
	}
	if _, err := a.control(ctx, sessionID, ctl); err != nil {
		if errors.Is(err, ErrIdle) {
			return false, nil
		}
		return false, err
	}
	if got := ctl.GetRunId(); got != runID {
		// Relayed to the run another replica found active instead: follow
		// that one from its start.
		runID, after = got, 0
	}
	w := queueWatch{msg: msg}
	err = a.Follow(ctx, sessionID, runID, after, FollowOptions{}, func(e Event) error {
		w.observe(e)
		if e.End && !w.taken {
			return errNotTaken
		}
		return send(e)
	})
	if errors.Is(err, errNotTaken) || (err == nil && !w.taken) {
		return false, nil
	}
	return true, err
}

// lastSeqOf is the seq of run runID's newest event: exact for a run of
// this process, the newest stored one for a run of another replica (so
// following from it may repeat a few events before the moment asked
// about, never miss one after it).
func (a *Agent) lastSeqOf(ctx context.Context, runID string) uint64 {
	if r := a.lookup(runID); r != nil {
		return r.log.lastSeq()
	}
	run, err := a.store.GetRun(ctx, runID)
	if err != nil {
		return 0
	}
	return run.LastSeq
}

// lastSeq is the seq of the newest event logged.
func (l *eventLog) lastSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// queueWatch tells from a run's events whether the run took a queued
// message: it did once the message starts as a message of the run, or
// once a queue_update after one that showed the message no longer shows
// it (taken from the queue to be delivered, refused by a USER_PROMPT
// hook, or removed by ClearQueue, whose caller got it back). A message
// still queued when the run ends was not taken: the run reports it as
// undelivered at its end.
type queueWatch struct {
	msg    *agentdv1.AgentMessage
	queued bool // a queue_update showed the message
	taken  bool
}

func (w *queueWatch) observe(e Event) {
	if w.taken || e.End {
		return
	}
	ev, err := e.Decode()
	if err != nil {
		return
	}
	switch x := ev.GetEvent().(type) {
	case *agentdv1.AgentEvent_QueueUpdate:
		shown := holds(x.QueueUpdate.GetSteering(), w.msg) || holds(x.QueueUpdate.GetFollowUp(), w.msg)
		if shown {
			w.queued = true
		} else if w.queued {
			w.taken = true
		}
	case *agentdv1.AgentEvent_MessageStart:
		if proto.Equal(x.MessageStart.GetMessage(), w.msg) {
			w.taken = true
		}
	}
}

// holds reports whether msgs hold msg. The prompt's timestamp makes it
// distinct from any other message.
func holds(msgs []*agentdv1.AgentMessage, msg *agentdv1.AgentMessage) bool {
	for _, m := range msgs {
		if proto.Equal(m, msg) {
			return true
		}
	}
	return false
}
