package service

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// AppendMessages implements agentdv1.AgentServiceServer.
func (s *Service) AppendMessages(ctx context.Context, req *agentdv1.AppendMessagesRequest) (*agentdv1.AppendMessagesResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	msgs := req.GetMessages()
	if len(msgs) == 0 {
		return nil, invalid("messages", "at least one message is required")
	}
	if len(msgs) > s.limits.MaxMessagesPerAppend {
		return nil, invalid("messages", "%d messages exceed the limit of %d per call", len(msgs), s.limits.MaxMessagesPerAppend)
	}
	entries := make([]*agentdv1.Entry, len(msgs))
	for i, m := range msgs {
		if err := s.limits.checkAgentMessage(fmt.Sprintf("messages[%d]", i), m); err != nil {
			return nil, err
		}
		m = proto.Clone(m).(*agentdv1.AgentMessage)
		stampMessage(m, s.now)
		entries[i] = &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: m}}
	}
	release, err := s.runs.holdForAppend(req.GetSessionId())
	if err != nil {
		return nil, err
	}
	defer release()
	if err := s.appendEntries(ctx, req.GetSessionId(), entries...); err != nil {
		return nil, s.storeStatus(ctx, "append messages", err)
	}
	return &agentdv1.AppendMessagesResponse{Entries: entries}, nil
}

// GetTranscript implements agentdv1.AgentServiceServer.
func (s *Service) GetTranscript(ctx context.Context, req *agentdv1.GetTranscriptRequest) (*agentdv1.GetTranscriptResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if req.GetPageSize() < 0 || req.GetPageSize() > persistence.MaxPageSize {
		return nil, invalid("page_size", "%d is out of range (0 to %d; 0 means %d)", req.GetPageSize(), persistence.MaxPageSize, persistence.DefaultPageSize)
	}
	size := int(req.GetPageSize())
	if size == 0 {
		size = persistence.DefaultPageSize
	}
	offset, err := decodeOffsetToken(req.GetPageToken())
	if err != nil {
		return nil, invalid("page_token", "not a token this server issued; start again with an empty page_token")
	}
	path, err := s.store.Path(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.storeStatus(ctx, "load transcript", err)
	}
	if offset > len(path) {
		return nil, invalid("page_token", "points past the end of the transcript; start again with an empty page_token")
	}
	end := min(offset+size, len(path))
	resp := &agentdv1.GetTranscriptResponse{Entries: path[offset:end]}
	if end < len(path) {
		resp.NextPageToken = encodeOffsetToken(end)
	}
	return resp, nil
}

// GetContext implements agentdv1.AgentServiceServer.
func (s *Service) GetContext(ctx context.Context, req *agentdv1.GetContextRequest) (*agentdv1.GetContextResponse, error) {
	rec, err := s.session(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	cfg := cloneConfig(rec.Config)
	tools, err := s.toolSet(cfg, nil)
	if err != nil {
		return nil, err
	}
	path, err := s.store.Path(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.storeStatus(ctx, "load transcript", err)
	}
	state := agentloop.State{SystemPrompt: cfg.GetSystemPrompt(), Messages: transcriptMessages(path), Tools: tools}
	model, _, _, _ := s.modelFor(cfg) // a model no longer usable still names itself
	c, failures := agentloop.BuildContext(ctx, state, agentloop.Config{Model: model})
	for _, f := range failures {
		s.logger.WarnContext(ctx, "context pipeline fell back", "session", req.GetSessionId(), "err", f)
	}
	return &agentdv1.GetContextResponse{Context: c}, nil
}

// stampMessage sets the timestamp of a message that a client left empty.
func stampMessage(m *agentdv1.AgentMessage, now func() time.Time) {
	ts := timestamp(now())
	switch k := m.GetKind().(type) {
	case *agentdv1.AgentMessage_User:
		if k.User.Timestamp == nil {
			k.User.Timestamp = ts
		}
	case *agentdv1.AgentMessage_Assistant:
		if k.Assistant.Timestamp == nil {
			k.Assistant.Timestamp = ts
		}
	case *agentdv1.AgentMessage_ToolResult:
		if k.ToolResult.Timestamp == nil {
			k.ToolResult.Timestamp = ts
		}
	case *agentdv1.AgentMessage_ApprovalNotice:
		if k.ApprovalNotice.Timestamp == nil {
			k.ApprovalNotice.Timestamp = ts
		}
	case *agentdv1.AgentMessage_BashExecution:
		if k.BashExecution.Timestamp == nil {
			k.BashExecution.Timestamp = ts
		}
	case *agentdv1.AgentMessage_Custom:
		if k.Custom.Timestamp == nil {
			k.Custom.Timestamp = ts
		}
	case *agentdv1.AgentMessage_BranchSummary:
		if k.BranchSummary.Timestamp == nil {
			k.BranchSummary.Timestamp = ts
		}
	case *agentdv1.AgentMessage_CompactionSummary:
		if k.CompactionSummary.Timestamp == nil {
			k.CompactionSummary.Timestamp = ts
		}
	case *agentdv1.AgentMessage_Extension:
		if k.Extension.Timestamp == nil {
			k.Extension.Timestamp = ts
		}
	}
}

const offsetTokenPrefix = "path-offset:"

func encodeOffsetToken(offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte(offsetTokenPrefix + strconv.Itoa(offset)))
}

func decodeOffsetToken(token string) (int, error) {
	if token == "" {
		return 0, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return 0, err
	}
	rest, ok := strings.CutPrefix(string(raw), offsetTokenPrefix)
	if !ok {
		return 0, fmt.Errorf("bad token prefix")
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad token offset")
	}
	return n, nil
}
