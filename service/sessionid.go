package service

import (
	"github.com/agentd/agentd/agent"
)

// checkSessionID validates the session id a client chose for a new
// session (CreateSessionRequest.session_id): the charset and length of
// every id (checkID), and none of the prefixes of agentd's own ids. Empty
// lets agentd assign one.
func checkSessionID(id string) error {
	if id == "" {
		return nil
	}
	if err := checkID("session_id", id); err != nil {
		return err
	}
	if p := agent.ReservedIDPrefix(id); p != "" {
		return invalid("session_id", "%q starts with %q, a prefix of the ids agentd makes itself; choose an id without it", truncate(id, 40), p)
	}
	return nil
}
