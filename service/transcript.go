package service

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

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
	stamped := make([]*agentdv1.AgentMessage, len(msgs))
	for i, m := range msgs {
		if err := s.limits.checkAgentMessage(fmt.Sprintf("messages[%d]", i), m); err != nil {
			return nil, err
		}
		stamped[i] = proto.CloneOf(m)
		stampMessage(stamped[i], s.now)
	}
	entries, err := s.agent.AppendMessages(ctx, req.GetSessionId(), stamped)
	if err != nil {
		return nil, s.status(ctx, "append messages", err)
	}
	return &agentdv1.AppendMessagesResponse{Entries: entries}, nil
}

// listingTranscript names GetTranscript's page tokens, which are bound to
// the session they page through.
const listingTranscript = "transcript"

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
	if err := checkOptionalID("leaf_entry_id", req.GetLeafEntryId()); err != nil {
		return nil, err
	}
	// A token is bound to the session and the branch it pages through.
	scope := req.GetSessionId() + "\x00" + req.GetLeafEntryId()
	var offset int64
	if req.GetPageToken() != "" {
		var err error
		if offset, err = persistence.DecodePageToken(listingTranscript, scope, req.GetPageToken()); err != nil {
			return nil, invalid("page_token", "not a token this server issued for session %q and this leaf_entry_id; start again with an empty page_token", req.GetSessionId())
		}
	}
	var path []*agentdv1.Entry
	var err error
	if leaf := req.GetLeafEntryId(); leaf != "" {
		path, err = s.store.PathTo(ctx, req.GetSessionId(), leaf)
	} else {
		path, err = s.store.Path(ctx, req.GetSessionId())
	}
	if err != nil {
		return nil, s.status(ctx, "load transcript", err)
	}
	if offset > int64(len(path)) {
		return nil, invalid("page_token", "points past the end of the transcript; start again with an empty page_token")
	}
	end := min(int(offset)+size, len(path))
	resp := &agentdv1.GetTranscriptResponse{Entries: path[offset:end]}
	if end < len(path) {
		resp.NextPageToken = persistence.EncodePageToken(listingTranscript, scope, int64(end))
	}
	labels, err := s.store.Labels(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.status(ctx, "load labels", err)
	}
	for _, e := range resp.Entries {
		if l, ok := labels[e.GetId()]; ok {
			if resp.Labels == nil {
				resp.Labels = map[string]string{}
			}
			resp.Labels[e.GetId()] = l
		}
	}
	return resp, nil
}

// GetContext implements agentdv1.AgentServiceServer.
func (s *Service) GetContext(ctx context.Context, req *agentdv1.GetContextRequest) (*agentdv1.GetContextResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := checkOptionalID("leaf_entry_id", req.GetLeafEntryId()); err != nil {
		return nil, err
	}
	rep, err := s.agent.Context(ctx, req.GetSessionId(), req.GetLeafEntryId())
	if err != nil {
		return nil, s.status(ctx, "build the context", err)
	}
	return &agentdv1.GetContextResponse{Context: rep.Context, MessageTokens: rep.MessageTokens, TotalTokens: rep.TotalTokens,
		ContextWindow: rep.ContextWindow, CompactionThreshold: rep.CompactionThreshold, WouldCompact: rep.WouldCompact}, nil
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
