package agent

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agent/compaction"
	"github.com/agentd/agentd/agent/contextview"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/provider/faux"
)

// UpdateSession changes an idle session's title, labels or configuration
// (check a new configuration with CheckConfig first) and returns the
// session and the entries the change wrote: a ModelChange when the model
// changed and a ThinkingLevelChange when the thinking level did, so the
// transcript says which model answered what. ErrBusy while a run is
// active.
func (a *Agent) UpdateSession(ctx context.Context, sessionID string, u persistence.SessionUpdate) (*persistence.Session, []*agentdv1.Entry, error) {
	release, err := a.hold(sessionID, "UpdateSession")
	if err != nil {
		return nil, nil, err
	}
	defer release()
	old, err := a.store.GetSession(ctx, sessionID)
	if err != nil {
		return nil, nil, err
	}
	var entries []*agentdv1.Entry
	if u.Config != nil {
		from, to := modelOf(old.Config.GetModel()), modelOf(u.Config.GetModel())
		if !proto.Equal(from, to) {
			entries = append(entries, &agentdv1.Entry{Payload: &agentdv1.Entry_ModelChange{ModelChange: &agentdv1.ModelChange{
				Provider: to.GetProvider(), ModelId: to.GetId()}}})
		}
		if old.Config.GetThinkingLevel() != u.Config.GetThinkingLevel() {
			entries = append(entries, &agentdv1.Entry{Payload: &agentdv1.Entry_ThinkingLevelChange{ThinkingLevelChange: &agentdv1.ThinkingLevelChange{
				ThinkingLevel: u.Config.GetThinkingLevel()}}})
		}
	}
	sess, err := a.store.UpdateSession(ctx, sessionID, u)
	if err != nil {
		return nil, nil, err
	}
	if len(entries) > 0 {
		if err := a.appendEntries(ctx, sessionID, entries...); err != nil {
			return nil, nil, fmt.Errorf("record the model change of session %q: %w", sessionID, err)
		}
		if sess, err = a.store.GetSession(ctx, sessionID); err != nil {
			return nil, nil, err
		}
	}
	return sess, entries, nil
}

// modelOf names a session's model with the faux default filled in, so an
// unset model and the faux model compare equal.
func modelOf(ref *agentdv1.ModelRef) *agentdv1.ModelRef {
	if isFaux(ref) {
		return &agentdv1.ModelRef{Provider: faux.ProviderName, Id: faux.ModelID}
	}
	return ref
}

// CompactOptions are the inputs of a manual compaction.
type CompactOptions struct {
	// Instructions focus the summary.
	Instructions string
	// Summary is a summary the client wrote; no model is called.
	Summary string
	// KeepRecentTokens overrides the session's setting when positive.
	KeepRecentTokens int64
	// DryRun only plans: compaction_end carries the cut point and token
	// counts, and nothing is stored.
	DryRun bool
}

// Compact compacts an idle session's conversation and sends
// compaction_start and compaction_end (only compaction_end for a dry run),
// numbered from 1. A summarizer failure is reported in compaction_end and
// is not an error. ErrBusy while a run is active; ErrPrecondition when
// there is nothing to compact.
func (a *Agent) Compact(ctx context.Context, sessionID string, opts CompactOptions, send func(*agentdv1.AgentEvent) error) error {
	release, err := a.hold(sessionID, "Compact")
	if err != nil {
		return err
	}
	defer release()
	sess, err := a.store.GetSession(ctx, sessionID)
	if err != nil {
		return err
	}
	path, err := a.store.ContextPath(ctx, sessionID)
	if err != nil {
		return err
	}
	model, stream, _, merr := a.modelFor(sess.Config)
	sh := newShaper(sess.Config, model)
	keep := opts.KeepRecentTokens
	if keep <= 0 {
		keep = sh.settings.KeepRecentTokens
	}
	if _, ok := compaction.Prepare(contextview.FromPath(path), keep); !ok {
		return refuse(ErrPrecondition, "session %q: %v", sessionID, errNothingToCompact)
	}
	if merr != nil && opts.Summary == "" && !opts.DryRun && sess.Config.GetCompaction().GetModel() == nil {
		return refuse(ErrPrecondition, "session %q: its model cannot write the summary now: %v; pass summary to bring your own", sessionID, merr)
	}
	var seq uint64
	var sendErr error
	c := compactor{a: a, sessionID: sessionID, shaper: sh, stream: stream, appendEntry: func(*agentdv1.Entry) {},
		publish: func(ev *agentdv1.AgentEvent) {
			seq++
			ev.SessionId, ev.Seq = sessionID, seq
			if ev.Time == nil {
				ev.Time = timestamppb.New(a.opts.Now())
			}
			if sendErr == nil {
				sendErr = send(ev)
			}
		}}
	_, err = c.run(ctx, path, agentdv1.CompactionReason_COMPACTION_REASON_MANUAL, opts.Instructions, opts.Summary, keep, opts.DryRun)
	if sendErr != nil {
		return sendErr
	}
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}
