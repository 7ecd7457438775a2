package service

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/tools"
)

// CreateSession implements agentdv1.AgentServiceServer.
func (s *Service) CreateSession(ctx context.Context, req *agentdv1.CreateSessionRequest) (*agentdv1.CreateSessionResponse, error) {
	if err := s.checkConfig(req.GetConfig()); err != nil {
		return nil, err
	}
	if len(req.GetTitle()) > 1024 {
		return nil, invalid("title", "%d bytes exceed the limit of 1024", len(req.GetTitle()))
	}
	if err := checkLabels("labels", req.GetLabels()); err != nil {
		return nil, err
	}
	rec, err := s.store.CreateSession(ctx, persistence.CreateSessionParams{
		Title:  req.GetTitle(),
		Labels: req.GetLabels(),
		Config: cloneConfig(req.GetConfig()),
	})
	if err != nil {
		return nil, s.storeStatus(ctx, "create session", err)
	}
	return &agentdv1.CreateSessionResponse{Session: s.wireSession(rec)}, nil
}

// GetSession implements agentdv1.AgentServiceServer.
func (s *Service) GetSession(ctx context.Context, req *agentdv1.GetSessionRequest) (*agentdv1.GetSessionResponse, error) {
	rec, err := s.session(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	return &agentdv1.GetSessionResponse{Session: s.wireSession(rec)}, nil
}

// ListSessions implements agentdv1.AgentServiceServer.
func (s *Service) ListSessions(ctx context.Context, req *agentdv1.ListSessionsRequest) (*agentdv1.ListSessionsResponse, error) {
	if req.GetPageSize() < 0 || req.GetPageSize() > persistence.MaxPageSize {
		return nil, invalid("page_size", "%d is out of range (0 to %d; 0 means %d)", req.GetPageSize(), persistence.MaxPageSize, persistence.DefaultPageSize)
	}
	if err := checkLabels("label_filter", req.GetLabelFilter()); err != nil {
		return nil, err
	}
	page, err := s.store.ListSessions(ctx, persistence.ListSessionsRequest{
		PageSize:    int(req.GetPageSize()),
		PageToken:   req.GetPageToken(),
		LabelFilter: req.GetLabelFilter(),
	})
	if err != nil {
		if status.Code(s.storeStatus(ctx, "list sessions", err)) == codes.InvalidArgument {
			return nil, invalid("page_token", "not a token this server issued; start again with an empty page_token")
		}
		return nil, s.storeStatus(ctx, "list sessions", err)
	}
	resp := &agentdv1.ListSessionsResponse{NextPageToken: page.NextPageToken}
	for _, rec := range page.Sessions {
		resp.Sessions = append(resp.Sessions, s.wireSession(rec))
	}
	return resp, nil
}

// DeleteSession implements agentdv1.AgentServiceServer.
func (s *Service) DeleteSession(ctx context.Context, req *agentdv1.DeleteSessionRequest) (*agentdv1.DeleteSessionResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if r := s.runs.active(req.GetSessionId()); r != nil {
		if !req.GetForce() {
			return nil, status.Errorf(codes.FailedPrecondition,
				"session %q has an active run %q: Abort it first, wait for agent_end, or set force to abort and delete", req.GetSessionId(), r.id)
		}
		if err := s.runs.abortAndWait(ctx, r, "session deleted"); err != nil {
			return nil, status.FromContextError(err).Err()
		}
	}
	if err := s.store.DeleteSession(ctx, req.GetSessionId()); err != nil {
		return nil, s.storeStatus(ctx, "delete session", err)
	}
	return &agentdv1.DeleteSessionResponse{}, nil
}

// session loads a session record after checking the id.
func (s *Service) session(ctx context.Context, id string) (*persistence.Session, error) {
	if err := checkID("session_id", id); err != nil {
		return nil, err
	}
	rec, err := s.store.GetSession(ctx, id)
	if err != nil {
		return nil, s.storeStatus(ctx, "get session", err)
	}
	return rec, nil
}

// wireSession adds the runtime state only the service knows.
func (s *Service) wireSession(rec *persistence.Session) *agentdv1.Session {
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
	if r := s.runs.active(rec.ID); r != nil {
		out.State = agentdv1.SessionState_SESSION_STATE_RUNNING
		out.ActiveRunId = r.id
	}
	return out
}

func checkLabels(field string, labels map[string]string) error {
	if len(labels) > 64 {
		return invalid(field, "%d labels exceed the limit of 64", len(labels))
	}
	for k, v := range labels {
		if k == "" || len(k) > 128 || len(v) > 1024 {
			return invalid(fmt.Sprintf("%s[%q]", field, truncate(k, 40)), "keys need 1 to 128 bytes and values at most 1024")
		}
	}
	return nil
}

// checkConfig validates a session configuration completely, including that
// every tool's schema compiles, so a run never fails on configuration.
func (s *Service) checkConfig(cfg *agentdv1.SessionConfig) error {
	if err := s.checkModel(cfg.GetModel()); err != nil {
		return err
	}
	if len(cfg.GetSystemPrompt()) > s.limits.MaxSystemPromptBytes {
		return invalid("config.system_prompt", "%d bytes exceed the limit of %d", len(cfg.GetSystemPrompt()), s.limits.MaxSystemPromptBytes)
	}
	if cfg.GetMaxTurns() > s.limits.MaxTurns {
		return invalid("config.max_turns", "%d exceeds the limit of %d", cfg.GetMaxTurns(), s.limits.MaxTurns)
	}
	if err := checkDuration("config.client_tool_timeout", cfg.GetClientToolTimeout()); err != nil {
		return err
	}
	if err := checkDuration("config.approval_timeout", cfg.GetApprovalTimeout()); err != nil {
		return err
	}
	if root := cfg.GetWorkspaceRoot(); root != "" {
		if err := s.checkWorkspaceRoot(root); err != nil {
			return err
		}
	}
	for i, r := range cfg.GetFaux().GetResponses() {
		m := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: scriptedAnswer(r)}}
		if err := s.limits.checkAgentMessage(fmt.Sprintf("config.faux.responses[%d]", i), m); err != nil {
			return err
		}
	}
	if _, err := s.toolSet(cfg, nil); err != nil {
		return err
	}
	return nil
}

// sessionTool is a server tool as one session declares it: the session may
// override the description and set the approval policy.
type sessionTool struct {
	agentloop.Tool
	def *agentdv1.Tool
}

// Definition implements agentloop.Tool.
func (t sessionTool) Definition() *agentdv1.Tool { return t.def }

// toolSet builds the tools a session's run may call, with client tools and
// approval gates bound to run (nil when only validating or previewing); its
// errors are INVALID_ARGUMENT statuses naming the field.
func (s *Service) toolSet(cfg *agentdv1.SessionConfig, run *runHandle) (*agentloop.ToolSet, error) {
	decls := cfg.GetTools()
	if len(decls) > s.limits.MaxTools {
		return nil, invalid("config.tools", "%d tools exceed the limit of %d", len(decls), s.limits.MaxTools)
	}
	seen := map[string]int{}
	toolList := make([]agentloop.Tool, 0, len(decls))
	for i, d := range decls {
		field := fmt.Sprintf("config.tools[%d]", i)
		if !toolNamePattern.MatchString(d.GetName()) {
			return nil, invalid(field+".name", "%q is not a valid tool name (1 to 64 characters of a-z A-Z 0-9 _ -)", truncate(d.GetName(), 70))
		}
		if j, dup := seen[d.GetName()]; dup {
			return nil, invalid(field+".name", "%q is already declared by config.tools[%d]; tool names must be unique", d.GetName(), j)
		}
		seen[d.GetName()] = i
		var tool agentloop.Tool
		policy := d.GetApproval()
		switch d.GetExecutor() {
		case agentdv1.ToolExecutor_TOOL_EXECUTOR_UNSPECIFIED, agentdv1.ToolExecutor_TOOL_EXECUTOR_SERVER:
			builtin, ok := s.tools[d.GetName()]
			if !ok && tools.IsBuiltin(d.GetName()) {
				t, err := s.builtinTool(cfg, d.GetName(), field, run)
				if err != nil {
					return nil, err
				}
				builtin, ok = t, true
			}
			if !ok {
				return nil, invalid(field+".name", "no server tool is named %q; server tools: %s (or set executor CLIENT to run it in the client)",
					d.GetName(), s.serverToolNames())
			}
			if d.GetParameters() != nil {
				return nil, invalid(field+".parameters", "must be empty for server tool %q: its schema is built in", d.GetName())
			}
			def := &agentdv1.Tool{
				Name:        d.GetName(),
				Description: builtin.Definition().GetDescription(),
				Parameters:  builtin.Definition().GetParameters(),
				Executor:    agentdv1.ToolExecutor_TOOL_EXECUTOR_SERVER,
				Approval:    d.GetApproval(),
				Sequential:  d.GetSequential() || builtin.Definition().GetSequential(),
			}
			if d.GetDescription() != "" {
				def.Description = d.GetDescription()
			}
			tool = sessionTool{Tool: builtin, def: def}
			if policy == agentdv1.ApprovalPolicy_APPROVAL_POLICY_UNSPECIFIED && !readOnly(builtin) {
				policy = agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK
			}
		case agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT:
			if d.GetParameters() == nil {
				return nil, invalid(field+".parameters", "required for a client tool: the JSON Schema of its arguments object")
			}
			if d.GetDescription() == "" {
				return nil, invalid(field+".description", "required for a client tool: the model needs to know what it does")
			}
			tool = clientTool{def: d, run: run, timeout: durationOr(cfg.GetClientToolTimeout(), DefaultClientToolTimeout), now: s.now}
		default:
			return nil, invalid(field+".executor", "unknown executor %v", d.GetExecutor())
		}
		switch policy {
		case agentdv1.ApprovalPolicy_APPROVAL_POLICY_UNSPECIFIED, agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW:
		case agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK, agentdv1.ApprovalPolicy_APPROVAL_POLICY_DENY:
			tool = gatedTool{Tool: tool, policy: policy, run: run, now: s.now,
				timeout:        durationOr(cfg.GetApprovalTimeout(), DefaultApprovalTimeout),
				includeInModel: cfg.GetIncludeApprovalsInModelContext()}
		default:
			return nil, invalid(field+".approval", "unknown approval policy %v", policy)
		}
		toolList = append(toolList, tool)
	}
	ts, err := agentloop.NewToolSet(toolList...)
	if err != nil {
		return nil, invalid("config.tools", "%v", err)
	}
	return ts, nil
}

func durationOr(d *durationpb.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.AsDuration()
}

func (s *Service) serverToolNames() string {
	names := tools.Names()
	for n := range s.tools {
		if !tools.IsBuiltin(n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
