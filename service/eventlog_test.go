package service

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

func turnStart() *agentdv1.AgentEvent {
	return &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_TurnStart{TurnStart: &agentdv1.TurnStart{}}}
}

func agentStart() *agentdv1.AgentEvent {
	return &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_AgentStart{AgentStart: &agentdv1.AgentStart{}}}
}

func TestEventLogBoundsOrderAndEnd(t *testing.T) {
	l := newEventLog("s", "r", 3)
	l.append(turnStart()) // before agent_start: dropped
	l.append(agentStart())
	for range 4 {
		l.append(turnStart())
	}
	evs, ended, _, err := l.since(2)
	if err != nil || ended || len(evs) != 3 || evs[0].GetSeq() != 3 || evs[2].GetSeq() != 5 {
		t.Fatalf("since(2) = %d events from seq %d, ended %v, %v", len(evs), evs[0].GetSeq(), ended, err)
	}
	var dropped *errEventsDropped
	if _, _, _, err := l.since(1); !errors.As(err, &dropped) || dropped.first != 3 {
		t.Fatalf("since(1) after events 1-2 were dropped = %v", err)
	}
	if _, _, _, err := l.since(9); status.Code(err) != codes.OutOfRange {
		t.Fatalf("since(9) beyond the end = %v", err)
	}

	_, _, wake, _ := l.since(5)
	l.append(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_AgentEnd{AgentEnd: &agentdv1.AgentEnd{}}})
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting follower was not woken")
	}
	l.append(turnStart()) // after agent_end: dropped
	evs, ended, _, _ = l.since(5)
	if !ended || len(evs) != 1 || evs[0].GetAgentEnd() == nil || evs[0].GetSeq() != 6 || evs[0].GetRunId() != "r" || evs[0].GetSessionId() != "s" {
		t.Fatalf("after agent_end: %v ended=%v", evs, ended)
	}
}

func TestEventLogWaitsForASlowFollower(t *testing.T) {
	l := newEventLog("s", "r", 1000)
	me := l.join(0)
	l.append(agentStart())
	for range followerWindow - 1 {
		l.append(turnStart())
	}
	appended := make(chan struct{})
	go func() {
		l.append(turnStart())
		close(appended)
	}()
	select {
	case <-appended:
		t.Fatal("append went past a follower lagging by the whole window")
	case <-time.After(50 * time.Millisecond):
	}
	l.progress(me, 10)
	select {
	case <-appended:
	case <-time.After(5 * time.Second):
		t.Fatal("progress did not release the producer")
	}
	// A follower that leaves never holds the run back.
	done := make(chan struct{})
	go func() {
		for range 2 * followerWindow {
			l.append(turnStart())
		}
		close(done)
	}()
	l.leave(me)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a departed follower still held the producer")
	}
}
