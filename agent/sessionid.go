package agent

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// Prefixes of the ids agentd makes itself. A session id a client chooses
// may not start with one (ReservedIDPrefix), so such an id never names a
// session agentd creates, and is never mistaken for a run's.
const (
	// RunIDPrefix starts every run id.
	RunIDPrefix = "run-"
	// SubagentIDPrefix starts the ids of the sessions agentd creates for
	// subagents.
	SubagentIDPrefix = "sub-"
)

// ReservedIDPrefix returns the prefix of agentd's own that id starts with,
// or "" when a client may choose it as a session id (as far as prefixes
// go: the charset and length are checked with every id).
func ReservedIDPrefix(id string) string {
	for _, p := range [...]string{RunIDPrefix, SubagentIDPrefix} {
		if strings.HasPrefix(id, p) {
			return p
		}
	}
	return ""
}

// maxCreateRounds bounds how often CreateSession tries again when the
// session holding the id it wants is deleted between its two looks.
const maxCreateRounds = 3

// CreateSession creates a session. With p.ID set (an id the client chose,
// already checked) it is idempotent: when a session with that id exists,
// and belongs to p.Tenant with a configuration equal to p.Config (nil
// meaning empty, as the store stores it), that session is returned as it
// is, title and labels as first given; otherwise the call is refused with
// ERROR_REASON_SESSION_EXISTS, which says nothing of the other session. Two
// concurrent calls with one id are safe: the store lets one create it, and
// the other finds it.
func (a *Agent) CreateSession(ctx context.Context, p persistence.CreateSessionParams) (*persistence.Session, error) {
	if p.Config == nil {
		p.Config = &agentdv1.SessionConfig{}
	}
	for round := 0; ; round++ {
		sess, err := a.store.CreateSession(ctx, p)
		if err == nil {
			a.publishSession(sess, ChangeCreated, nil)
		}
		if p.ID == "" || !errors.Is(err, persistence.ErrConflict) {
			return sess, err
		}
		existing, err := a.store.GetSession(ctx, p.ID)
		if errors.Is(err, persistence.ErrNotFound) && round+1 < maxCreateRounds {
			continue // deleted since: create it again
		}
		if err != nil {
			return nil, err
		}
		if existing.Tenant != p.Tenant || !proto.Equal(existing.Config, p.Config) {
			return nil, sessionExists(p.ID)
		}
		return existing, nil
	}
}

// sessionExists refuses a session id in use. It reads the same whoever
// holds the id and however its configuration differs, so it reveals
// nothing of another tenant's session.
func sessionExists(id string) *Error {
	return refuse(agentdv1.ErrorReason_ERROR_REASON_SESSION_EXISTS,
		"session_id %q is already used by a session with another configuration, or by another tenant: choose another session_id, or GetSession it if it is yours", id).
		with("session_id", id)
}
