package agent

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

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
	release, err := a.hold(ctx, sessionID, "UpdateSession")
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
		if err := a.appendEntries(ctx, a.store, sessionID, entries...); err != nil {
			return nil, nil, fmt.Errorf("record the model change of session %q: %w", sessionID, err)
		}
		if sess, err = a.store.GetSession(ctx, sessionID); err != nil {
			return nil, nil, err
		}
	}
	a.publishSession(sess, ChangeUpdated, func(c *Change) { c.Entries = entries })
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
