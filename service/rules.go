package service

import (
	"context"
	"fmt"
	"path"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

// Bounds of a ResolveApproval request.
const (
	// maxBatchCalls bounds ResolveApprovalRequest.tool_call_ids.
	maxBatchCalls = 256
	// maxRulePatternBytes bounds a rule's command prefix and path glob.
	maxRulePatternBytes = 1024
)

// checkResolution checks the parts of a ResolveApproval request that need
// no run: the decision, the scope, the rule's shape, where edited
// arguments and a batch may go. A rule's id, decision, created_by and
// created are ignored (agentd sets them), so a client may send back a
// suggested or listed rule as it is.
func (s *Service) checkResolution(req *agentdv1.ResolveApprovalRequest) error {
	if req.GetToolCallId() == "" {
		return invalid("tool_call_id", "required: the id from the approval_requested event")
	}
	allowed := false
	switch req.GetDecision() {
	case agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED:
		allowed = true
	case agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED:
	default:
		return invalid("decision", "must be APPROVAL_DECISION_ALLOWED or APPROVAL_DECISION_DENIED")
	}
	if len(req.GetReason()) > maxReasonBytes {
		return invalid("reason", "%d bytes exceed the limit of %d", len(req.GetReason()), maxReasonBytes)
	}
	if len(req.GetDecidedBy()) > agent.MaxNameBytes {
		return invalid("decided_by", "%d bytes exceed the limit of %d", len(req.GetDecidedBy()), agent.MaxNameBytes)
	}
	scope := req.GetScope()
	switch scope {
	case agentdv1.ApprovalScope_APPROVAL_SCOPE_UNSPECIFIED, agentdv1.ApprovalScope_APPROVAL_SCOPE_CALL,
		agentdv1.ApprovalScope_APPROVAL_SCOPE_RUN, agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION:
	default:
		return invalid("scope", "unknown approval scope %d: use APPROVAL_SCOPE_CALL, APPROVAL_SCOPE_RUN or APPROVAL_SCOPE_SESSION", scope)
	}
	if rule := req.GetRule(); rule != nil {
		if scope != agentdv1.ApprovalScope_APPROVAL_SCOPE_RUN && scope != agentdv1.ApprovalScope_APPROVAL_SCOPE_SESSION {
			return invalid("rule", "only with scope APPROVAL_SCOPE_RUN or APPROVAL_SCOPE_SESSION; a decision of scope CALL makes no rule")
		}
		if err := checkRuleShape("rule", rule, allowed); err != nil {
			return err
		}
	}
	if req.GetArguments() != nil {
		switch {
		case !allowed:
			return invalid("arguments", "only with decision APPROVAL_DECISION_ALLOWED: a denied call does not run")
		case len(req.GetToolCallIds()) > 0:
			return invalid("arguments", "not with tool_call_ids: edited arguments are for one call")
		case proto.Size(req.GetArguments()) > s.limits.MaxTextBytes:
			return invalid("arguments", "%d bytes exceed the limit of %d", proto.Size(req.GetArguments()), s.limits.MaxTextBytes)
		}
	}
	if n := len(req.GetToolCallIds()); n > maxBatchCalls {
		return invalid("tool_call_ids", "%d calls exceed the limit of %d", n, maxBatchCalls)
	}
	seen := map[string]bool{req.GetToolCallId(): true}
	for i, id := range req.GetToolCallIds() {
		field := fmt.Sprintf("tool_call_ids[%d]", i)
		if id == "" {
			return invalid(field, "empty: each is the id of a call waiting for approval")
		}
		if seen[id] {
			return invalid(field, "%q is named twice", truncate(id, 70))
		}
		seen[id] = true
	}
	return nil
}

// checkRuleShape checks a rule given at field: a tool name, and only the
// pattern its tool takes, well formed.
func checkRuleShape(field string, rule *agentdv1.ApprovalRule, allowed bool) error {
	tool := rule.GetToolName()
	if tool == "" {
		return invalid(field+".tool_name", "required: the tool the rule applies to")
	}
	if err := provider.CheckToolName(tool); err != nil {
		return invalid(field+".tool_name", "%v", err)
	}
	if p := rule.GetCommandPrefix(); p != "" {
		switch {
		case !agent.RuleTakesCommand(tool):
			return invalid(field+".command_prefix", "only for bash, not for %q", tool)
		case len(p) > maxRulePatternBytes:
			return invalid(field+".command_prefix", "%d bytes exceed the limit of %d", len(p), maxRulePatternBytes)
		case strings.TrimLeft(p, " \t\r\n") != p:
			return invalid(field+".command_prefix", "starts with white space; commands are matched after their leading white space")
		case allowed && strings.ContainsAny(p, agent.ShellOperators):
			return invalid(field+".command_prefix", "%q holds a shell operator (one of %q); an allowing rule names one plain command", truncate(p, 70), agent.ShellOperators)
		}
	}
	if g := rule.GetPathGlob(); g != "" {
		switch {
		case !agent.RuleTakesPath(tool):
			return invalid(field+".path_glob", "only for the file tools (read_file, write_file, edit_file, ls), not for %q", tool)
		case len(g) > maxRulePatternBytes:
			return invalid(field+".path_glob", "%d bytes exceed the limit of %d", len(g), maxRulePatternBytes)
		case strings.HasPrefix(g, "/") || g == ".." || strings.HasPrefix(g, "../") || path.Clean(g) != g:
			return invalid(field+".path_glob", "%q must be a clean path relative to the workspace, such as \"src/*.go\"", truncate(g, 70))
		}
		if _, err := path.Match(g, ""); err != nil {
			return invalid(field+".path_glob", "%q is not a pattern of Go's path.Match syntax: %v", truncate(g, 70), err)
		}
	}
	if len(rule.GetReason()) > maxReasonBytes {
		return invalid(field+".reason", "%d bytes exceed the limit of %d", len(rule.GetReason()), maxReasonBytes)
	}
	return nil
}

// ListApprovalRules implements agentdv1.AgentServiceServer.
func (s *Service) ListApprovalRules(ctx context.Context, req *agentdv1.ListApprovalRulesRequest) (*agentdv1.ListApprovalRulesResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	rules, err := s.agent.ListApprovalRules(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.status(ctx, "list approval rules", err)
	}
	return &agentdv1.ListApprovalRulesResponse{Rules: rules}, nil
}

// DeleteApprovalRule implements agentdv1.AgentServiceServer.
func (s *Service) DeleteApprovalRule(ctx context.Context, req *agentdv1.DeleteApprovalRuleRequest) (*agentdv1.DeleteApprovalRuleResponse, error) {
	if _, err := s.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := checkID("rule_id", req.GetRuleId()); err != nil {
		return nil, err
	}
	e, err := s.agent.DeleteApprovalRule(ctx, req.GetSessionId(), req.GetRuleId(), CallerFrom(ctx).Tenant)
	if err != nil {
		return nil, s.status(ctx, "delete an approval rule", err)
	}
	return &agentdv1.DeleteApprovalRuleResponse{Entry: e}, nil
}
