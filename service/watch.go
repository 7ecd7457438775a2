package service

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// errWatchDone ends a watch whose subject is gone (a deleted session):
// the stream ends cleanly.
var errWatchDone = errors.New("watch done")

// watch runs one watch over the agent's change feed and maps its end: a
// resync is sent as the stream's last message, a finished subject ends
// the stream cleanly, anything else is a status.
func (s *Service) watch(ctx context.Context, what string, opts agent.WatchOptions, send func(*agent.Change) error, resync func(*agentdv1.WatchResync) error) error {
	opts.Field = "cursor"
	err := s.agent.Watch(ctx, opts, send)
	var rs *agent.ResyncError
	switch {
	case errors.As(err, &rs):
		return resync(&agentdv1.WatchResync{Cursor: rs.Cursor, Reason: rs.Reason})
	case errors.Is(err, errWatchDone):
		return nil
	case err == nil:
		return nil
	}
	return s.status(ctx, what, err)
}

// WatchSession implements agentdv1.AgentServiceServer: the changes of one
// session the caller sees.
func (s *Service) WatchSession(req *agentdv1.WatchSessionRequest, stream grpc.ServerStreamingServer[agentdv1.SessionWatchEvent]) error {
	ctx := stream.Context()
	rec, err := s.session(ctx, req.GetSessionId())
	if err != nil {
		return err
	}
	id := rec.ID
	match := func(c *agent.Change) bool {
		if c.SessionID != id {
			return false
		}
		switch c.Kind {
		case agent.ChangeCreated, agent.ChangePendingAdded, agent.ChangePendingRemoved:
			return false
		}
		return true
	}
	send := func(c *agent.Change) error {
		out := &agentdv1.SessionWatchEvent{Cursor: c.Cursor(), SessionId: c.SessionID, Time: timestamppb.New(c.Time)}
		switch c.Kind {
		case agent.ChangeRunStarted:
			out.Change = &agentdv1.SessionWatchEvent_RunStarted{RunStarted: &agentdv1.RunStarted{RunId: c.RunID}}
		case agent.ChangeEvent:
			out.Change = &agentdv1.SessionWatchEvent_Event{Event: c.Event}
		case agent.ChangeRunEnded:
			out.Change = &agentdv1.SessionWatchEvent_RunEnded{RunEnded: &agentdv1.RunEnded{RunId: c.RunID, Outcome: c.Outcome}}
		case agent.ChangeUpdated:
			out.Change = &agentdv1.SessionWatchEvent_SessionUpdated{SessionUpdated: s.wireSession(ctx, c.Session)}
		case agent.ChangeAppended:
			out.Change = &agentdv1.SessionWatchEvent_EntriesAppended{EntriesAppended: &agentdv1.EntriesAppended{Entries: c.Entries}}
		case agent.ChangeLabel:
			out.Change = &agentdv1.SessionWatchEvent_LabelChanged{LabelChanged: &agentdv1.LabelChanged{EntryId: c.EntryID, Label: c.Label}}
		case agent.ChangeDeleted:
			out.Change = &agentdv1.SessionWatchEvent_Deleted{Deleted: &agentdv1.SessionDeleted{}}
		default:
			return nil
		}
		if err := stream.Send(out); err != nil {
			return err
		}
		if c.Kind == agent.ChangeDeleted {
			return errWatchDone
		}
		return nil
	}
	started := func(cursor string) error {
		return stream.Send(&agentdv1.SessionWatchEvent{Cursor: cursor, SessionId: id, Time: timestamppb.New(s.now()),
			Change: &agentdv1.SessionWatchEvent_Started{Started: &agentdv1.WatchStarted{}}})
	}
	resync := func(r *agentdv1.WatchResync) error {
		return stream.Send(&agentdv1.SessionWatchEvent{Cursor: r.GetCursor(), SessionId: id, Time: timestamppb.New(s.now()),
			Change: &agentdv1.SessionWatchEvent_Resync{Resync: r}})
	}
	return s.watch(ctx, "watch session", agent.WatchOptions{Cursor: req.GetCursor(), SessionID: id, Match: match, Started: started}, send, resync)
}

// WatchSessions implements agentdv1.AgentServiceServer: the changes of the
// sessions the caller's tenant sees.
func (s *Service) WatchSessions(req *agentdv1.WatchSessionsRequest, stream grpc.ServerStreamingServer[agentdv1.SessionsWatchEvent]) error {
	ctx := stream.Context()
	if err := checkLabels("label_filter", req.GetLabelFilter()); err != nil {
		return err
	}
	caller, filter := CallerFrom(ctx), req.GetLabelFilter()
	match := func(c *agent.Change) bool {
		switch c.Kind {
		case agent.ChangeCreated, agent.ChangeUpdated, agent.ChangeAppended, agent.ChangeRunStarted, agent.ChangeRunEnded, agent.ChangeDeleted:
		default:
			return false
		}
		if !caller.sees(c.Tenant) {
			return false
		}
		for k, v := range filter {
			if got, ok := c.Labels[k]; !ok || got != v {
				return false
			}
		}
		return true
	}
	send := func(c *agent.Change) error {
		out := &agentdv1.SessionsWatchEvent{Cursor: c.Cursor(), SessionId: c.SessionID, Time: timestamppb.New(c.Time)}
		switch c.Kind {
		case agent.ChangeCreated:
			out.Change = &agentdv1.SessionsWatchEvent_Created{Created: s.wireSession(ctx, c.Session)}
		case agent.ChangeUpdated, agent.ChangeAppended:
			out.Change = &agentdv1.SessionsWatchEvent_Updated{Updated: s.wireSession(ctx, c.Session)}
		case agent.ChangeRunStarted:
			out.Change = &agentdv1.SessionsWatchEvent_RunState{RunState: &agentdv1.RunStateChanged{
				State: agentdv1.SessionState_SESSION_STATE_RUNNING, RunId: c.RunID}}
		case agent.ChangeRunEnded:
			out.Change = &agentdv1.SessionsWatchEvent_RunState{RunState: &agentdv1.RunStateChanged{
				State: agentdv1.SessionState_SESSION_STATE_IDLE, RunId: c.RunID, Outcome: c.Outcome}}
		case agent.ChangeDeleted:
			out.Change = &agentdv1.SessionsWatchEvent_Deleted{Deleted: &agentdv1.SessionDeleted{}}
		default:
			return nil
		}
		return stream.Send(out)
	}
	started := func(cursor string) error {
		return stream.Send(&agentdv1.SessionsWatchEvent{Cursor: cursor, Time: timestamppb.New(s.now()),
			Change: &agentdv1.SessionsWatchEvent_Started{Started: &agentdv1.WatchStarted{}}})
	}
	resync := func(r *agentdv1.WatchResync) error {
		return stream.Send(&agentdv1.SessionsWatchEvent{Cursor: r.GetCursor(), Time: timestamppb.New(s.now()),
			Change: &agentdv1.SessionsWatchEvent_Resync{Resync: r}})
	}
	return s.watch(ctx, "watch sessions", agent.WatchOptions{Cursor: req.GetCursor(), Match: match, Started: started}, send, resync)
}

// pendingMatch selects the pending-interaction changes (kinds) the
// caller sees, of one session when sessionID is set.
func (s *Service) pendingMatch(ctx context.Context, sessionID string, kinds ...agent.ChangeKind) (func(*agent.Change) bool, error) {
	if sessionID != "" {
		if _, err := s.session(ctx, sessionID); err != nil {
			return nil, err
		}
	}
	caller := CallerFrom(ctx)
	return func(c *agent.Change) bool {
		for _, k := range kinds {
			if c.Kind == k {
				return caller.sees(c.Tenant) && (sessionID == "" || c.SessionID == sessionID)
			}
		}
		return false
	}, nil
}

// ListPendingInteractions implements agentdv1.AgentServiceServer.
func (s *Service) ListPendingInteractions(ctx context.Context, req *agentdv1.ListPendingInteractionsRequest) (*agentdv1.ListPendingInteractionsResponse, error) {
	match, err := s.pendingMatch(ctx, req.GetSessionId(), agent.ChangePendingAdded)
	if err != nil {
		return nil, err
	}
	list, cursor := s.agent.PendingInteractions(match)
	return &agentdv1.ListPendingInteractionsResponse{Interactions: list, Cursor: cursor}, nil
}

// WatchPendingInteractions implements agentdv1.AgentServiceServer.
func (s *Service) WatchPendingInteractions(req *agentdv1.WatchPendingInteractionsRequest, stream grpc.ServerStreamingServer[agentdv1.PendingInteractionsEvent]) error {
	ctx := stream.Context()
	match, err := s.pendingMatch(ctx, req.GetSessionId(), agent.ChangePendingAdded, agent.ChangePendingRemoved)
	if err != nil {
		return err
	}
	send := func(c *agent.Change) error {
		out := &agentdv1.PendingInteractionsEvent{Cursor: c.Cursor()}
		if c.Kind == agent.ChangePendingAdded {
			out.Change = &agentdv1.PendingInteractionsEvent_Added{Added: c.Pending}
		} else {
			out.Change = &agentdv1.PendingInteractionsEvent_Removed{Removed: c.Pending}
		}
		return stream.Send(out)
	}
	started := func(cursor string) error {
		return stream.Send(&agentdv1.PendingInteractionsEvent{Cursor: cursor, Change: &agentdv1.PendingInteractionsEvent_Started{Started: &agentdv1.WatchStarted{}}})
	}
	resync := func(r *agentdv1.WatchResync) error {
		return stream.Send(&agentdv1.PendingInteractionsEvent{Cursor: r.GetCursor(), Change: &agentdv1.PendingInteractionsEvent_Resync{Resync: r}})
	}
	return s.watch(ctx, "watch pending interactions", agent.WatchOptions{Cursor: req.GetCursor(), Match: match, Started: started}, send, resync)
}
