package service

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// GetRun implements agentdv1.AgentServiceServer. The run is looked up
// within its session, which the caller's tenant must see: a run of another
// session (or tenant) is NOT_FOUND like an unknown one.
func (s *Service) GetRun(ctx context.Context, req *agentdv1.GetRunRequest) (*agentdv1.GetRunResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := checkID("run_id", req.GetRunId()); err != nil {
		return nil, err
	}
	run, err := s.store.GetRun(ctx, req.GetRunId())
	if err == nil && run.SessionID != req.GetSessionId() {
		err = persistence.RunNotFound(req.GetRunId())
	}
	if err != nil {
		return nil, s.status(ctx, "get run", err)
	}
	return &agentdv1.GetRunResponse{Run: wireRun(run)}, nil
}

// ListRuns implements agentdv1.AgentServiceServer.
func (s *Service) ListRuns(ctx context.Context, req *agentdv1.ListRunsRequest) (*agentdv1.ListRunsResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if req.GetPageSize() < 0 || req.GetPageSize() > persistence.MaxPageSize {
		return nil, invalid("page_size", "%d is out of range (0 to %d; 0 means %d)", req.GetPageSize(), persistence.MaxPageSize, persistence.DefaultPageSize)
	}
	for i, o := range req.GetOutcomes() {
		if _, known := agentdv1.RunOutcome_name[int32(o)]; !known {
			return nil, invalid(fmt.Sprintf("outcomes[%d]", i), "unknown outcome %d", o)
		}
	}
	after, err := optionalTime("start_time_after", req.GetStartTimeAfter())
	if err != nil {
		return nil, err
	}
	before, err := optionalTime("start_time_before", req.GetStartTimeBefore())
	if err != nil {
		return nil, err
	}
	if !after.IsZero() && !before.IsZero() && !after.Before(before) {
		return nil, invalid("start_time_before", "must be later than start_time_after")
	}
	if err := checkRunMetadata("metadata_filter", req.GetMetadataFilter()); err != nil {
		return nil, err
	}
	page, err := s.store.ListRuns(ctx, persistence.ListRunsRequest{
		SessionID:   req.GetSessionId(),
		PageSize:    int(req.GetPageSize()),
		PageToken:   req.GetPageToken(),
		Outcomes:    req.GetOutcomes(),
		StartAfter:  after,
		StartBefore: before,
		Metadata:    req.GetMetadataFilter(),
	})
	if err != nil {
		if st := s.status(ctx, "list runs", err); status.Code(st) == codes.InvalidArgument {
			return nil, invalid("page_token", "not a token this server issued for this session and these filters; start again with an empty page_token")
		}
		return nil, s.status(ctx, "list runs", err)
	}
	resp := &agentdv1.ListRunsResponse{NextPageToken: page.NextPageToken}
	for _, r := range page.Runs {
		resp.Runs = append(resp.Runs, wireRun(r))
	}
	return resp, nil
}

// optionalTime is a filter's time: zero when unset, refused naming field
// when it is not a valid timestamp.
func optionalTime(field string, ts *timestamppb.Timestamp) (time.Time, error) {
	if ts == nil {
		return time.Time{}, nil
	}
	if err := ts.CheckValid(); err != nil {
		return time.Time{}, invalid(field, "%v", err)
	}
	return ts.AsTime(), nil
}

// wireRun is a run record on the wire.
func wireRun(r *persistence.Run) *agentdv1.Run {
	out := &agentdv1.Run{
		Id:               r.ID,
		SessionId:        r.SessionID,
		StartTime:        timestamp(r.StartTime),
		Outcome:          r.Outcome,
		ErrorMessage:     r.ErrorMessage,
		Request:          r.Request,
		Usage:            r.Usage,
		StructuredOutput: r.StructuredOutput,
		LastSeq:          r.LastSeq,
		EventsPruned:     r.EventsPruned,
	}
	if r.Ended() {
		out.EndTime = timestamp(r.EndTime)
	}
	return out
}

// checkRunRequest validates the per-run fields Prompt and Continue share,
// before a run is started: their ranges here, what depends on the session
// and its model (and the system prompt addition's size) in the agent.
func checkRunRequest(run *agentdv1.RunRequest) error {
	if err := checkModelSettings("model_settings", run.GetModelSettings()); err != nil {
		return err
	}
	return checkRunMetadata("metadata", run.GetMetadata())
}
