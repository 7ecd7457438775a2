package service

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// maxSummaryBytes bounds a client-supplied compaction summary.
const maxSummaryBytes = 1 << 20

// UpdateSession implements agentdv1.AgentServiceServer.
func (s *Service) UpdateSession(ctx context.Context, req *agentdv1.UpdateSessionRequest) (*agentdv1.UpdateSessionResponse, error) {
	rec, err := s.session(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		return nil, invalid("update_mask", "name at least one field to change, such as \"config.model\" or \"title\"")
	}
	var u persistence.SessionUpdate
	cfg := proto.CloneOf(rec.Config)
	cfgFields := cfg.ProtoReflect().Descriptor().Fields()
	changedConfig := false
	for i, p := range paths {
		field := fmt.Sprintf("update_mask.paths[%d]", i)
		switch {
		case p == "title":
			if err := checkTitle(req.GetTitle()); err != nil {
				return nil, err
			}
			title := req.GetTitle()
			u.Title = &title
		case p == "labels":
			if err := checkLabels("labels", req.GetLabels()); err != nil {
				return nil, err
			}
			u.Labels, u.SetLabels = req.GetLabels(), true
		case p == "config":
			cfg = proto.CloneOf(req.GetConfig())
			if cfg == nil {
				cfg = &agentdv1.SessionConfig{}
			}
			changedConfig = true
		case strings.HasPrefix(p, "config."):
			fd := cfgFields.ByName(protoreflect.Name(strings.TrimPrefix(p, "config.")))
			if fd == nil {
				return nil, invalid(field, "%q names no field of SessionConfig", truncate(p, 70))
			}
			src := req.GetConfig().ProtoReflect()
			if req.GetConfig() != nil && src.Has(fd) {
				cfg.ProtoReflect().Set(fd, src.Get(fd))
			} else {
				cfg.ProtoReflect().Clear(fd)
			}
			changedConfig = true
		default:
			return nil, invalid(field, "%q is not a field UpdateSession changes: use \"title\", \"labels\", \"config\" or \"config.<field>\"", truncate(p, 70))
		}
	}
	if changedConfig {
		if err := s.checkConfig(rec.Tenant, cfg); err != nil {
			return nil, err
		}
		u.Config = proto.CloneOf(cfg)
	}
	sess, entries, err := s.agent.UpdateSession(ctx, req.GetSessionId(), u)
	if err != nil {
		return nil, s.status(ctx, "update session", err)
	}
	return &agentdv1.UpdateSessionResponse{Session: s.wireSession(ctx, sess), Entries: entries}, nil
}

// Compact implements agentdv1.AgentServiceServer.
func (s *Service) Compact(req *agentdv1.CompactRequest, stream grpc.ServerStreamingServer[agentdv1.AgentEvent]) error {
	ctx := stream.Context()
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return err
	}
	if len(req.GetInstructions()) > maxReasonBytes {
		return invalid("instructions", "%d bytes exceed the limit of %d", len(req.GetInstructions()), maxReasonBytes)
	}
	if len(req.GetSummary()) > maxSummaryBytes {
		return invalid("summary", "%d bytes exceed the limit of %d", len(req.GetSummary()), maxSummaryBytes)
	}
	if req.GetKeepRecentTokens() < 0 {
		return invalid("keep_recent_tokens", "may not be negative (0 means the session's setting)")
	}
	err := s.agent.Compact(ctx, req.GetSessionId(), agent.CompactOptions{
		Instructions: req.GetInstructions(), Summary: req.GetSummary(), KeepRecentTokens: req.GetKeepRecentTokens(), DryRun: req.GetDryRun(),
	}, stream.Send)
	if err != nil {
		return s.status(ctx, "compact", err)
	}
	return nil
}

// SubmitContext implements agentdv1.AgentServiceServer.
func (s *Service) SubmitContext(ctx context.Context, req *agentdv1.SubmitContextRequest) (*agentdv1.SubmitContextResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := checkID("request_id", req.GetRequestId()); err != nil {
		return nil, err
	}
	items := req.GetItems()
	if len(items) == 0 {
		err := invalid("items", "at least one item is required")
		s.agent.RefuseContext(ctx, req.GetSessionId(), req.GetRequestId(), err)
		return nil, err
	}
	sel := make([]*agentdv1.ContextSelection, len(items))
	for i, it := range items {
		switch x := it.GetItem().(type) {
		case *agentdv1.ContextSelection_EntryId:
			sel[i] = it
		case *agentdv1.ContextSelection_Message:
			field := fmt.Sprintf("items[%d].message", i)
			if err := s.limits.checkAgentMessage(field, x.Message); err != nil {
				s.agent.RefuseContext(ctx, req.GetSessionId(), req.GetRequestId(), err)
				return nil, err
			}
			m := proto.CloneOf(x.Message)
			stampMessage(m, s.now)
			sel[i] = &agentdv1.ContextSelection{Item: &agentdv1.ContextSelection_Message{Message: m}}
		default:
			err := invalid(fmt.Sprintf("items[%d]", i), "set entry_id or message")
			s.agent.RefuseContext(ctx, req.GetSessionId(), req.GetRequestId(), err)
			return nil, err
		}
	}
	if err := s.agent.SubmitContext(ctx, req.GetSessionId(), req.GetRequestId(), sel); err != nil {
		return nil, s.status(ctx, "submit context", err)
	}
	return &agentdv1.SubmitContextResponse{}, nil
}
