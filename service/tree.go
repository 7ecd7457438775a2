package service

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// GetTree implements agentdv1.AgentServiceServer.
func (s *Service) GetTree(ctx context.Context, req *agentdv1.GetTreeRequest) (*agentdv1.GetTreeResponse, error) {
	rec, err := s.session(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	if req.GetPageSize() < 0 || req.GetPageSize() > persistence.MaxPageSize {
		return nil, invalid("page_size", "%d is out of range (0 to %d; 0 means %d)", req.GetPageSize(), persistence.MaxPageSize, persistence.DefaultPageSize)
	}
	page, err := s.store.Tree(ctx, req.GetSessionId(), persistence.EntriesRequest{PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken()})
	if err != nil {
		return nil, s.status(ctx, "list the tree", err)
	}
	labels, err := s.store.Labels(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.status(ctx, "load labels", err)
	}
	resp := &agentdv1.GetTreeResponse{NextPageToken: page.NextPageToken, LeafEntryId: rec.LeafEntryID,
		Nodes: make([]*agentdv1.TreeNode, len(page.Nodes))}
	for i, n := range page.Nodes {
		resp.Nodes[i] = &agentdv1.TreeNode{Id: n.ID, ParentId: n.ParentID, Kind: n.Kind, Preview: n.Preview, Label: labels[n.ID],
			Time: timestamppb.New(n.Time), IsLeaf: n.ID == rec.LeafEntryID}
	}
	return resp, nil
}

// SetLabel implements agentdv1.AgentServiceServer.
func (s *Service) SetLabel(ctx context.Context, req *agentdv1.SetLabelRequest) (*agentdv1.SetLabelResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := checkID("entry_id", req.GetEntryId()); err != nil {
		return nil, err
	}
	e, err := s.agent.SetLabel(ctx, req.GetSessionId(), req.GetEntryId(), req.GetLabel())
	if err != nil {
		return nil, s.status(ctx, "set a label", err)
	}
	return &agentdv1.SetLabelResponse{Entry: e}, nil
}

// Navigate implements agentdv1.AgentServiceServer.
func (s *Service) Navigate(ctx context.Context, req *agentdv1.NavigateRequest) (*agentdv1.NavigateResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := checkID("entry_id", req.GetEntryId()); err != nil {
		return nil, err
	}
	if len(req.GetSummary()) > maxSummaryBytes {
		return nil, invalid("summary", "%d bytes exceed the limit of %d", len(req.GetSummary()), maxSummaryBytes)
	}
	if len(req.GetInstructions()) > maxReasonBytes {
		return nil, invalid("instructions", "%d bytes exceed the limit of %d", len(req.GetInstructions()), maxReasonBytes)
	}
	summary, err := s.agent.Navigate(ctx, req.GetSessionId(), req.GetEntryId(), agent.NavigateOptions{
		Summary: req.GetSummary(), Summarize: req.GetSummarize(), Instructions: req.GetInstructions()})
	if err != nil {
		return nil, s.status(ctx, "navigate", err)
	}
	rec, err := s.session(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	return &agentdv1.NavigateResponse{Session: s.wireSession(ctx, rec), BranchSummary: summary}, nil
}

// ExportSession implements agentdv1.AgentServiceServer.
func (s *Service) ExportSession(req *agentdv1.ExportSessionRequest, stream grpc.ServerStreamingServer[agentdv1.SessionRecord]) error {
	ctx := stream.Context()
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return err
	}
	if err := s.agent.ExportSession(ctx, req.GetSessionId(), stream.Send); err != nil {
		return s.status(ctx, "export session", err)
	}
	return nil
}

// ImportSession implements agentdv1.AgentServiceServer.
func (s *Service) ImportSession(stream grpc.ClientStreamingServer[agentdv1.ImportSessionRequest, agentdv1.ImportSessionResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return invalid("records[0].header", "the stream is empty; send the header of an export first")
		}
		return err
	}
	header := first.GetRecord().GetHeader()
	if header == nil {
		return invalid("records[0].header", "the first message must carry the header of an export")
	}
	cfg := header.GetConfig()
	if cfg == nil {
		cfg = &agentdv1.SessionConfig{}
	}
	if err := s.checkConfig(CallerFrom(ctx).Tenant, cfg); err != nil {
		return err
	}
	if err := checkLabels("records[0].header.labels", header.GetLabels()); err != nil {
		return err
	}
	n := 0
	next := func() (*agentdv1.Entry, error) {
		msg, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		n++
		e := msg.GetRecord().GetEntry()
		if e == nil {
			return nil, invalid(fmt.Sprintf("records[%d].entry", n), "every message after the header must carry an entry")
		}
		if m := e.GetMessage(); m != nil {
			if err := s.limits.checkAgentMessage(fmt.Sprintf("records[%d].entry.message", n), m); err != nil {
				return nil, err
			}
		}
		return e, nil
	}
	rec, err := s.agent.ImportSession(ctx, CallerFrom(ctx).Tenant, header, next)
	if err != nil {
		return s.status(ctx, "import session", err)
	}
	return stream.SendAndClose(&agentdv1.ImportSessionResponse{Session: s.wireSession(ctx, rec)})
}
