package agent

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agent/compaction"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// SetLabel names an entry of the session, or clears its name when label is
// empty, by appending a Label entry at the leaf (the latest for a target
// wins). Labels never reach the model, so a run may be active.
func (a *Agent) SetLabel(ctx context.Context, sessionID, entryID, label string) (*agentdv1.Entry, error) {
	if len(label) > MaxNameBytes {
		return nil, invalid("label", "%d bytes exceed the limit of %d", len(label), MaxNameBytes)
	}
	if _, err := a.store.GetEntry(ctx, sessionID, entryID); err != nil {
		return nil, err
	}
	e := &agentdv1.Entry{Payload: &agentdv1.Entry_Label{Label: &agentdv1.Label{TargetEntryId: entryID, Label: label}}}
	if err := a.appendEntries(ctx, a.store, sessionID, e); err != nil {
		return nil, err
	}
	a.sessionChanged(ctx, sessionID, ChangeLabel, func(c *Change) { c.EntryID, c.Label = entryID, label })
	return e, nil
}

// NavigateOptions are the inputs of Navigate besides the target.
type NavigateOptions struct {
	// Summary is the client's summary of the path left.
	Summary string
	// Summarize asks the session's model for that summary.
	Summarize bool
	// Instructions focus the model's summary.
	Instructions string
}

// Navigate moves an idle session's leaf to entryID. With a summary (the
// client's, or the model's when opts.Summarize is set) of the path left —
// the entries after the common ancestor of the old leaf and the target —
// it appends a BranchSummary entry at the new position, which becomes the
// leaf. It returns that entry, or nil. ErrBusy while a run is active.
func (a *Agent) Navigate(ctx context.Context, sessionID, entryID string, opts NavigateOptions) (*agentdv1.Entry, error) {
	release, err := a.hold(ctx, sessionID, "Navigate")
	if err != nil {
		return nil, err
	}
	defer release()
	sess, err := a.store.GetSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	target, err := a.store.PathTo(ctx, sessionID, entryID)
	if err != nil {
		return nil, err
	}
	summary := opts.Summary
	var left []*agentdv1.Entry
	if summary != "" || opts.Summarize {
		old, err := a.store.Path(ctx, sessionID)
		if err != nil {
			return nil, err
		}
		left = abandoned(old, target)
	}
	if summary == "" && opts.Summarize && len(left) > 0 {
		if summary, err = a.summarizeBranch(ctx, sess, left, opts.Instructions); err != nil {
			return nil, refuse(agentdv1.ErrorReason_ERROR_REASON_SUMMARY_FAILED, "session %q: the branch summary failed (%v); navigate without one, or pass summary", sessionID, err)
		}
	}
	if err := a.store.SetLeaf(ctx, sessionID, entryID); err != nil {
		return nil, err
	}
	if summary == "" || len(left) == 0 {
		a.sessionChanged(ctx, sessionID, ChangeUpdated, nil)
		return nil, nil
	}
	e := &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_BranchSummary{
		BranchSummary: &agentdv1.BranchSummary{Summary: summary, FromEntryId: left[len(left)-1].GetId(), Timestamp: timestamppb.New(a.opts.Now())},
	}}}}
	if err := a.appendEntries(ctx, a.store, sessionID, e); err != nil {
		return nil, fmt.Errorf("store the branch summary: %w", err)
	}
	a.sessionChanged(ctx, sessionID, ChangeUpdated, func(c *Change) { c.Entries = []*agentdv1.Entry{e} })
	return e, nil
}

// abandoned returns the entries of from that are not on to: the branch
// left when the leaf moves from the end of from to the end of to.
func abandoned(from, to []*agentdv1.Entry) []*agentdv1.Entry {
	common := 0
	for common < len(from) && common < len(to) && from[common].GetId() == to[common].GetId() {
		common++
	}
	return from[common:]
}

// summarizeBranch asks the session's model (or the faux digest) for a
// summary of the messages of a branch left.
func (a *Agent) summarizeBranch(ctx context.Context, sess *persistence.Session, left []*agentdv1.Entry, instructions string) (string, error) {
	var msgs []*agentdv1.AgentMessage
	for _, e := range left {
		if m := e.GetMessage(); m != nil {
			msgs = append(msgs, m)
		}
	}
	model, stream, _, err := a.modelFor(sess.Config)
	if err != nil {
		return "", err
	}
	c := compactor{a: a, sessionID: sess.ID, shaper: newShaper(sess.Config, model), stream: stream, writer: a.store}
	plan := compaction.Plan{Summarize: msgs}
	if isFaux(sess.Config.GetModel()) {
		return compaction.Digest(plan), nil
	}
	return c.summarize(ctx, plan, instructions)
}

// ForkSession creates a session whose transcript is the path to entryID
// of another session (its leaf when entryID is empty), with the same entry
// ids, and returns it. params gives the new session's title and labels,
// and its configuration (nil copies the forked session's); its Origin is
// set here.
func (a *Agent) ForkSession(ctx context.Context, sessionID, entryID string, params persistence.CreateSessionParams) (*persistence.Session, error) {
	src, err := a.store.GetSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if entryID == "" {
		entryID = src.LeafEntryID
	}
	var path []*agentdv1.Entry
	if entryID != "" {
		if path, err = a.store.PathTo(ctx, sessionID, entryID); err != nil {
			return nil, err
		}
	}
	if params.Config == nil {
		params.Config = src.Config
	}
	params.ID = ""
	params.Origin = persistence.Origin{SessionID: sessionID, EntryID: entryID}
	// A fork belongs where its source does, whoever forks it.
	params.Tenant = src.Tenant
	fork, err := a.store.CreateSession(ctx, params)
	if err != nil {
		return nil, err
	}
	if len(path) > 0 {
		copies := make([]*agentdv1.Entry, len(path))
		for i, e := range path {
			c := proto.CloneOf(e)
			if i == 0 {
				c.ParentId = ""
			}
			copies[i] = c
		}
		if err := a.appendEntries(ctx, a.store, fork.ID, copies...); err != nil {
			// Leave no half-made fork behind.
			if derr := a.store.DeleteSession(context.WithoutCancel(ctx), fork.ID); derr != nil {
				a.opts.Logger.ErrorContext(ctx, "could not delete a fork that failed", "session", fork.ID, "err", derr)
			}
			return nil, fmt.Errorf("copy the path of session %q: %w", sessionID, err)
		}
	}
	return a.created(a.store.GetSession(ctx, fork.ID))
}
