package agentloop

import (
	"sync"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Queue holds steering or follow-up messages that arrive while a run is
// active. Callers push from other goroutines while the loop drains
// between turns, so it is safe for concurrent use. A nil *Queue is an empty
// queue.
type Queue struct {
	mu   sync.Mutex
	mode agentdv1.QueueMode
	msgs []*agentdv1.AgentMessage
}

// NewQueue returns an empty queue; mode UNSPECIFIED means ONE_AT_A_TIME, as
// in pi.
func NewQueue(mode agentdv1.QueueMode) *Queue {
	return &Queue{mode: mode}
}

// SetMode changes how many messages the next Drain takes.
func (q *Queue) SetMode(mode agentdv1.QueueMode) {
	q.mu.Lock()
	q.mode = mode
	q.mu.Unlock()
}

// Push appends messages and returns how many are waiting now.
func (q *Queue) Push(msgs ...*agentdv1.AgentMessage) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.msgs = append(q.msgs, msgs...)
	return len(q.msgs)
}

// Len is the number of waiting messages.
func (q *Queue) Len() int {
	if q == nil {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.msgs)
}

// Drain removes and returns the messages to deliver now: all of them in mode
// ALL, the oldest one otherwise.
func (q *Queue) Drain() []*agentdv1.AgentMessage {
	if q == nil {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.msgs) == 0 {
		return nil
	}
	if q.mode == agentdv1.QueueMode_QUEUE_MODE_ALL {
		out := q.msgs
		q.msgs = nil
		return out
	}
	out := []*agentdv1.AgentMessage{q.msgs[0]}
	q.msgs[0] = nil
	q.msgs = q.msgs[1:]
	return out
}

// Clear removes and returns every waiting message.
func (q *Queue) Clear() []*agentdv1.AgentMessage {
	if q == nil {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.msgs
	q.msgs = nil
	return out
}

// Snapshot returns the waiting messages without removing them, for
// queue_update events.
func (q *Queue) Snapshot() []*agentdv1.AgentMessage {
	if q == nil {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]*agentdv1.AgentMessage(nil), q.msgs...)
}
