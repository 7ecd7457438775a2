package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/provider"
)

// InterruptedText is the agent_end error message of a run that agentd
// closed at start-up because the process running it stopped.
const InterruptedText = "agentd stopped while the run was active; it was closed as interrupted when agentd started again"

// ExpiredText is the agent_end error message of a run that a replica
// closed because the replica running it let its lease expire.
const ExpiredText = "the agentd replica running the run stopped, or lost the database, for longer than its lease; another replica closed the run as interrupted"

// repair closes the runs an earlier process left active. On a store with
// one owner at a time every such run belongs to a process that is gone; on
// a shared store, the runs whose lease expired, whichever replica claimed
// them (each is closed by one replica). A tool call of the session's last
// answer that never got a result gets the error result replay would give
// it ("No result provided"), so Continue works and transcript and context
// agree, unless its start was recorded: then its effect may have happened
// and it is stored as in doubt (a ToolInDoubt entry), for ResolveInDoubt
// to decide. The run's event log ends with those results, a tool_in_doubt
// event for each call in doubt, and agent_end (INTERRUPTED), so Attach
// ends.
func (a *Agent) repair(ctx context.Context) error {
	closeRuns, text := a.store.CloseInterruptedRuns, InterruptedText
	if a.shared != nil {
		closeRuns, text = a.shared.CloseExpiredRuns, ExpiredText
	}
	runs, err := closeRuns(ctx)
	if err != nil {
		return fmt.Errorf("close interrupted runs: %w", err)
	}
	repaired := map[string]bool{}
	for _, r := range runs {
		var answered []*agentdv1.Entry
		if !repaired[r.SessionID] {
			repaired[r.SessionID] = true
			answered, err = a.answerOrphanToolCalls(ctx, r.SessionID, r.ID)
			if errors.Is(err, persistence.ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("repair session %s after interrupted run %s: %w", r.SessionID, r.ID, err)
			}
		}
		if err := a.endInterruptedLog(ctx, r, answered, text); err != nil {
			return fmt.Errorf("end the event log of interrupted run %s of session %s: %w", r.ID, r.SessionID, err)
		}
		a.opts.Logger.WarnContext(ctx, "closed an interrupted run", "session", r.SessionID, "run", r.ID, "owner", r.Owner,
			"tool_calls_answered", len(answered), "events_stored", r.LastSeq)
	}
	return nil
}

// answerOrphanToolCalls appends, for every tool call of the session's last
// assistant message that has no result on the current path, a ToolInDoubt
// entry when the call's start was recorded after the message, and an error
// result otherwise; it returns the appended entries.
func (a *Agent) answerOrphanToolCalls(ctx context.Context, sessionID, runID string) ([]*agentdv1.Entry, error) {
	path, err := a.store.Path(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	lastAssistant := -1
	for i := len(path) - 1; i >= 0; i-- {
		if path[i].GetMessage().GetAssistant() != nil {
			lastAssistant = i
			break
		}
	}
	if lastAssistant < 0 {
		return nil, nil
	}
	answered := map[string]bool{}
	started := map[string]*agentdv1.Entry{}
	for _, e := range path[lastAssistant+1:] {
		switch {
		case e.GetMessage().GetToolResult() != nil:
			answered[e.GetMessage().GetToolResult().GetToolCallId()] = true
		case e.GetToolInDoubt() != nil:
			answered[e.GetToolInDoubt().GetToolCallId()] = true // by an earlier repair
		case e.GetToolCallStarted() != nil:
			started[e.GetToolCallStarted().GetToolCallId()] = e
		}
	}
	var results []*agentdv1.Entry
	for _, b := range path[lastAssistant].GetMessage().GetAssistant().GetContent() {
		call := b.GetToolCall()
		if call == nil || answered[call.GetId()] {
			continue
		}
		if s := started[call.GetId()]; s != nil {
			st := s.GetToolCallStarted()
			results = append(results, &agentdv1.Entry{RunId: runID, Payload: &agentdv1.Entry_ToolInDoubt{ToolInDoubt: &agentdv1.ToolInDoubt{
				ToolCallId: call.GetId(), ToolName: call.GetName(), Arguments: st.GetArguments(), RunId: s.GetRunId(),
				IdempotencyKey: st.GetIdempotencyKey(), StartEntryId: s.GetId(),
			}}})
			continue
		}
		results = append(results, &agentdv1.Entry{RunId: runID, Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{
			Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: &agentdv1.ToolResultMessage{
				ToolCallId: call.GetId(),
				ToolName:   call.GetName(),
				Content:    []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: provider.NoResultText}}}},
				IsError:    true,
				Timestamp:  timestamppb.New(a.opts.Now()),
			}},
		}}})
	}
	if len(results) == 0 {
		return nil, nil
	}
	return results, a.store.Append(ctx, sessionID, results...)
}

// endInterruptedLog ends an interrupted run's event log after its last
// stored event: agent_start if nothing was stored, the repair's tool
// results and calls in doubt, and agent_end. They follow the run's
// reservation when it reaches further: the events in between may have
// reached clients and been lost, and a seq a client saw must never name
// another event (nor hide agent_end from an Attach after it).
func (a *Agent) endInterruptedLog(ctx context.Context, r *persistence.Run, answered []*agentdv1.Entry, text string) error {
	now := timestamppb.New(a.opts.Now())
	last := max(r.LastSeq, r.ReservedSeq)
	var evs []*agentdv1.AgentEvent
	if r.LastSeq == 0 {
		evs = append(evs, &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_AgentStart{AgentStart: &agentdv1.AgentStart{}}})
	}
	for _, e := range answered {
		if d := e.GetToolInDoubt(); d != nil {
			evs = append(evs, &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_ToolInDoubt{ToolInDoubt: d}})
			continue
		}
		evs = append(evs,
			&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_MessageStart{MessageStart: &agentdv1.MessageStart{Message: e.GetMessage()}}},
			&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_MessageEnd{MessageEnd: &agentdv1.MessageEnd{Message: e.GetMessage(), EntryId: e.GetId()}}})
	}
	evs = append(evs, &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_AgentEnd{AgentEnd: &agentdv1.AgentEnd{
		Outcome: agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED, ErrorMessage: text, Usage: &agentdv1.Usage{Cost: &agentdv1.Cost{}},
	}}})
	batch := make([]persistence.Event, len(evs))
	for i, ev := range evs {
		ev.SessionId, ev.RunId, ev.Seq, ev.Time = r.SessionID, r.ID, last+uint64(i)+1, now
		data, err := proto.Marshal(ev)
		if err != nil {
			return err
		}
		batch[i] = persistence.Event{Seq: ev.Seq, Data: data}
	}
	return a.store.AppendEvents(ctx, r.ID, batch)
}

// pruneLoop deletes expired event logs now and then until Close.
func (a *Agent) pruneLoop() {
	defer a.bg.Done()
	every := min(max(a.opts.EventRetention/4, time.Second), time.Hour)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n, err := a.store.PruneEvents(context.Background(), a.opts.Now().Add(-a.opts.EventRetention))
		if err != nil {
			a.opts.Logger.Warn("could not prune expired event logs; trying again later", "err", err)
		} else if n > 0 {
			a.opts.Logger.Debug("pruned expired event logs", "runs", n, "retention", a.opts.EventRetention)
		}
		select {
		case <-a.stop:
			return
		case <-t.C:
		}
	}
}
