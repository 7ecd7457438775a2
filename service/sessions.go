package service

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// CreateSession implements agentdv1.AgentServiceServer.
func (s *Service) CreateSession(ctx context.Context, req *agentdv1.CreateSessionRequest) (*agentdv1.CreateSessionResponse, error) {
	if err := checkSessionID(req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := s.checkNewSession(CallerFrom(ctx).Tenant, req.GetConfig(), req.GetTitle(), req.GetLabels()); err != nil {
		return nil, err
	}
	cfg := req.GetConfig()
	if cfg == nil {
		cfg = &agentdv1.SessionConfig{}
	}
	rec, err := s.agent.CreateSession(ctx, persistence.CreateSessionParams{
		ID:     req.GetSessionId(),
		Title:  req.GetTitle(),
		Labels: req.GetLabels(),
		Config: proto.CloneOf(cfg),
		Tenant: CallerFrom(ctx).Tenant,
	})
	if err != nil {
		return nil, s.status(ctx, "create session", err)
	}
	return &agentdv1.CreateSessionResponse{Session: s.wireSession(ctx, rec)}, nil
}

// GetSession implements agentdv1.AgentServiceServer.
func (s *Service) GetSession(ctx context.Context, req *agentdv1.GetSessionRequest) (*agentdv1.GetSessionResponse, error) {
	rec, err := s.session(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	out := s.wireSession(ctx, rec)
	spent, err := s.store.SessionSpend(ctx, rec.ID)
	if err != nil {
		return nil, s.status(ctx, "sum the session's spending", err)
	}
	out.Spent = &agentdv1.Spend{Tokens: spent.Tokens, CostUsd: spent.CostUSD}
	out.ToolSandbox = s.agent.ToolSandbox(rec.Config)
	return &agentdv1.GetSessionResponse{Session: out}, nil
}

// ListSessions implements agentdv1.AgentServiceServer.
func (s *Service) ListSessions(ctx context.Context, req *agentdv1.ListSessionsRequest) (*agentdv1.ListSessionsResponse, error) {
	if req.GetPageSize() < 0 || req.GetPageSize() > persistence.MaxPageSize {
		return nil, invalid("page_size", "%d is out of range (0 to %d; 0 means %d)", req.GetPageSize(), persistence.MaxPageSize, persistence.DefaultPageSize)
	}
	if err := checkLabels("label_filter", req.GetLabelFilter()); err != nil {
		return nil, err
	}
	if err := checkOptionalID("origin_session_id", req.GetOriginSessionId()); err != nil {
		return nil, err
	}
	caller := CallerFrom(ctx)
	page, err := s.store.ListSessions(ctx, persistence.ListSessionsRequest{
		PageSize:        int(req.GetPageSize()),
		PageToken:       req.GetPageToken(),
		LabelFilter:     req.GetLabelFilter(),
		OriginSessionID: req.GetOriginSessionId(),
		Tenant:          caller.Tenant,
		AllTenants:      caller.Admin,
	})
	if err != nil {
		if st := s.status(ctx, "list sessions", err); status.Code(st) == codes.InvalidArgument {
			return nil, invalid("page_token", "not a token this server issued for this label_filter and origin_session_id; start again with an empty page_token")
		}
		return nil, s.status(ctx, "list sessions", err)
	}
	resp := &agentdv1.ListSessionsResponse{NextPageToken: page.NextPageToken}
	for _, rec := range page.Sessions {
		resp.Sessions = append(resp.Sessions, s.wireSession(ctx, rec))
	}
	return resp, nil
}

// ForkSession implements agentdv1.AgentServiceServer.
func (s *Service) ForkSession(ctx context.Context, req *agentdv1.ForkSessionRequest) (*agentdv1.ForkSessionResponse, error) {
	source, err := s.session(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	if err := checkOptionalID("entry_id", req.GetEntryId()); err != nil {
		return nil, err
	}
	// A fork is its source's tenant's.
	if err := s.checkNewSession(source.Tenant, req.GetConfig(), req.GetTitle(), req.GetLabels()); err != nil {
		return nil, err
	}
	params := persistence.CreateSessionParams{Title: req.GetTitle(), Labels: req.GetLabels()}
	if req.GetConfig() != nil {
		params.Config = proto.CloneOf(req.GetConfig())
	}
	rec, err := s.agent.ForkSession(ctx, req.GetSessionId(), req.GetEntryId(), params)
	if err != nil {
		return nil, s.status(ctx, "fork session", err)
	}
	return &agentdv1.ForkSessionResponse{Session: s.wireSession(ctx, rec)}, nil
}

// DeleteSession implements agentdv1.AgentServiceServer.
func (s *Service) DeleteSession(ctx context.Context, req *agentdv1.DeleteSessionRequest) (*agentdv1.DeleteSessionResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := s.agent.DeleteSession(ctx, req.GetSessionId(), req.GetForce()); err != nil {
		return nil, s.status(ctx, "delete session", err)
	}
	return &agentdv1.DeleteSessionResponse{}, nil
}

// session loads a session record after checking the id. Another tenant's
// session is not found, exactly as an unknown id: its existence is not
// the caller's to learn.
func (s *Service) session(ctx context.Context, id string) (*persistence.Session, error) {
	if err := checkID("session_id", id); err != nil {
		return nil, err
	}
	rec, err := s.store.GetSession(ctx, id)
	if err == nil && !CallerFrom(ctx).sees(rec.Tenant) {
		rec, err = nil, persistence.SessionNotFound(id)
	}
	if err != nil {
		return nil, s.status(ctx, "get session", err)
	}
	return rec, nil
}

// wireSession adds the runtime state only the agent knows.
func (s *Service) wireSession(ctx context.Context, rec *persistence.Session) *agentdv1.Session {
	out := &agentdv1.Session{
		Id:          rec.ID,
		Title:       rec.Title,
		Labels:      rec.Labels,
		Config:      rec.Config,
		CreateTime:  timestamppb.New(rec.CreateTime),
		UpdateTime:  timestamppb.New(rec.UpdateTime),
		LeafEntryId: rec.LeafEntryID,
		State:       agentdv1.SessionState_SESSION_STATE_IDLE,
	}
	if rec.Origin.SessionID != "" {
		out.Origin = &agentdv1.SessionOrigin{SessionId: rec.Origin.SessionID, EntryId: rec.Origin.EntryID,
			RunId: rec.Origin.RunID, ToolCallId: rec.Origin.ToolCallID, SubagentProfile: rec.Origin.Profile}
	}
	id, err := s.agent.ActiveRun(ctx, rec.ID)
	if err != nil {
		s.logger.WarnContext(ctx, "could not read whether another replica runs the session; showing it idle", "session", rec.ID, "err", err)
	}
	if id != "" {
		out.State = agentdv1.SessionState_SESSION_STATE_RUNNING
		out.ActiveRunId = id
	}
	return out
}

func checkLabels(field string, labels map[string]string) error {
	if len(labels) > maxLabels {
		return invalid(field, "%d labels exceed the limit of %d", len(labels), maxLabels)
	}
	for k, v := range labels {
		if k == "" || len(k) > agent.MaxNameBytes || len(v) > maxLabelValueBytes {
			return invalid(fmt.Sprintf("%s[%q]", field, truncate(k, 40)), "keys need 1 to %d bytes and values at most %d", agent.MaxNameBytes, maxLabelValueBytes)
		}
	}
	return nil
}

// checkNewSession validates what a new session of tenant is created with.
func (s *Service) checkNewSession(tenant string, cfg *agentdv1.SessionConfig, title string, labels map[string]string) error {
	if err := s.checkConfig(tenant, cfg); err != nil {
		return err
	}
	if err := checkTitle(title); err != nil {
		return err
	}
	return checkLabels("labels", labels)
}

// checkConfig validates a configuration of a session of tenant
// completely: its sizes here, and through the agent what depends on the
// server (model, tools, workspace, turn limit) and the tenant's ceiling,
// so a run never fails on configuration.
func (s *Service) checkConfig(tenant string, cfg *agentdv1.SessionConfig) error {
	if err := s.checkConfigSizes("config", cfg); err != nil {
		return err
	}
	return s.status(context.Background(), "check config", s.agent.CheckConfig(tenant, cfg))
}

// checkConfigSizes checks the sizes of a configuration (at field
// prefix), and of the overlays of its subagent profiles.
func (s *Service) checkConfigSizes(prefix string, cfg *agentdv1.SessionConfig) error {
	if len(cfg.GetSystemPrompt()) > s.limits.MaxSystemPromptBytes {
		return invalid(prefix+".system_prompt", "%d bytes exceed the limit of %d", len(cfg.GetSystemPrompt()), s.limits.MaxSystemPromptBytes)
	}
	if err := checkModelSettings(prefix+".model_settings", cfg.GetModelSettings()); err != nil {
		return err
	}
	if err := checkDuration(prefix+".client_tool_timeout", cfg.GetClientToolTimeout()); err != nil {
		return err
	}
	if err := checkDuration(prefix+".approval_timeout", cfg.GetApprovalTimeout()); err != nil {
		return err
	}
	for i, b := range cfg.GetContextBlocks() {
		if len(b.GetText()) > s.limits.MaxTextBytes {
			return invalid(fmt.Sprintf("%s.context_blocks[%d].text", prefix, i), "%d bytes exceed the limit of %d", len(b.GetText()), s.limits.MaxTextBytes)
		}
	}
	for i, r := range cfg.GetFaux().GetResponses() {
		m := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: agent.ScriptedAnswer(r)}}
		if err := s.limits.checkAgentMessage(fmt.Sprintf("%s.faux.responses[%d]", prefix, i), m); err != nil {
			return err
		}
	}
	for i, p := range cfg.GetSubagents() {
		if err := s.checkConfigSizes(fmt.Sprintf("%s.subagents[%d].config", prefix, i), p.GetConfig()); err != nil {
			return err
		}
	}
	return nil
}
