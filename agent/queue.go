package agent

import (
	"context"
	"errors"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/replicapb"
)

// ClearQueue removes the steering and follow-up messages waiting for the
// session's active run and returns them, oldest first, so none is
// delivered; the run publishes a queue_update showing its queues emptied.
// On a shared store the replica running the run does it. A session without
// an active run has nothing queued: the answer is empty, not a refusal.
func (a *Agent) ClearQueue(ctx context.Context, sessionID string) (*agentdv1.ClearQueueResponse, error) {
	ans, err := a.control(ctx, sessionID, &replicapb.ReplicaControl{Action: &replicapb.ReplicaControl_ClearQueue{
		ClearQueue: &agentdv1.ClearQueueRequest{SessionId: sessionID}}})
	if errors.Is(err, ErrIdle) {
		return &agentdv1.ClearQueueResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if ans.GetCleared() == nil {
		return &agentdv1.ClearQueueResponse{}, nil
	}
	return ans.GetCleared(), nil
}

// clearQueue empties r's queues. It holds the agent's lock as enqueue
// does, so a message is either removed here or, when the run is ending,
// reported by the run as undelivered, never both.
func (a *Agent) clearQueue(r *Run) (*agentdv1.ClearQueueResponse, error) {
	a.mu.Lock()
	if a.bySession[r.sessionID] != r {
		a.mu.Unlock()
		return nil, refuse(agentdv1.ErrorReason_ERROR_REASON_RUN_NOT_ACTIVE, "session %q has no active run", r.sessionID).with("session_id", r.sessionID)
	}
	out := &agentdv1.ClearQueueResponse{Steering: r.steering.Clear(), FollowUp: r.followUp.Clear()}
	a.mu.Unlock()
	if len(out.GetSteering())+len(out.GetFollowUp()) > 0 {
		// Followers learn the queues changed; the snapshot shows anything
		// queued since, so the event never claims less than waits.
		r.publish(&agentdv1.AgentEvent{Time: timestamppb.New(a.opts.Now()), Event: &agentdv1.AgentEvent_QueueUpdate{QueueUpdate: &agentdv1.QueueUpdate{
			Steering: r.steering.Snapshot(), FollowUp: r.followUp.Snapshot(),
		}}})
	}
	return out, nil
}
