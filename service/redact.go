package service

import (
	"context"
	"fmt"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// maxRedactEntries bounds RedactEntriesRequest.entry_ids.
const maxRedactEntries = 1000

// RedactEntries implements agentdv1.AgentServiceServer.
func (s *Service) RedactEntries(ctx context.Context, req *agentdv1.RedactEntriesRequest) (*agentdv1.RedactEntriesResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	ids := req.GetEntryIds()
	if len(ids) == 0 || len(ids) > maxRedactEntries {
		return nil, invalid("entry_ids", "%d ids: name 1 to %d entries of the session", len(ids), maxRedactEntries)
	}
	seen := map[string]int{}
	for i, id := range ids {
		field := fmt.Sprintf("entry_ids[%d]", i)
		if err := checkID(field, id); err != nil {
			return nil, err
		}
		if j, dup := seen[id]; dup {
			return nil, invalid(field, "%q is named by entry_ids[%d] already", id, j)
		}
		seen[id] = i
	}
	if req.GetReason() == "" {
		return nil, invalid("reason", "required: say why, for the record (such as the ticket of the request to be forgotten)")
	}
	if len(req.GetReason()) > maxReasonBytes {
		return nil, invalid("reason", "%d bytes exceed the limit of %d", len(req.GetReason()), maxReasonBytes)
	}
	if len(req.GetRedactedBy()) > agent.MaxNameBytes {
		return nil, invalid("redacted_by", "%d bytes exceed the limit of %d", len(req.GetRedactedBy()), agent.MaxNameBytes)
	}
	entries, err := s.agent.RedactEntries(ctx, req.GetSessionId(), agent.Redaction{
		EntryIDs: ids, Reason: req.GetReason(), By: req.GetRedactedBy(), Tenant: CallerFrom(ctx).Tenant})
	if err != nil {
		return nil, s.status(ctx, "redact entries", err)
	}
	return &agentdv1.RedactEntriesResponse{Entries: entries}, nil
}
