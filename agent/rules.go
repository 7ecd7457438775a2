package agent

import (
	"context"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/tools"
)

// Approval rules (docs/ARCHITECTURE.md, "Approval rules"): a RUN-scoped
// rule lives in its run's memory; a SESSION-scoped one is an ApprovalRule
// entry of the transcript, in force on every path that holds it and no
// ApprovalRuleRemoval of it. The approval gate consults them before it
// asks; this file holds what they are and how they match.

// fileRuleTools are the tools whose rules may carry a path glob: the
// built-in tools that take one file or directory as "path".
var fileRuleTools = []string{tools.ReadFile, tools.WriteFile, tools.EditFile, tools.Ls}

// RuleTakesPath reports whether rules of tool may carry a path glob.
func RuleTakesPath(tool string) bool { return slices.Contains(fileRuleTools, tool) }

// RuleTakesCommand reports whether rules of tool may carry a command
// prefix.
func RuleTakesCommand(tool string) bool { return tool == tools.Bash }

// ShellOperators are the characters that make a bash command more than
// the one an ALLOWED rule's prefix names: a second command (; & | line
// break), a substitution ($ ` ( )), or a redirection (< >). An ALLOWED
// rule never matches a command holding one, and its prefix may hold none;
// a DENIED rule matches such a command regardless.
const ShellOperators = ";&|\n\r$`()<>"

// ruleMatches reports whether rule decides a call of tool with args in a
// workspace rooted at root. A command prefix matches a command that
// starts with it at a word boundary; an ALLOWED one only when the command
// holds no shell operator. A rule
// stored malformed (an imported one, say) matches nothing.
func ruleMatches(rule *agentdv1.ApprovalRule, tool string, args *structpb.Struct, root string) bool {
	if rule.GetToolName() == "" || rule.GetToolName() != tool {
		return false
	}
	if p := rule.GetCommandPrefix(); p != "" {
		if !RuleTakesCommand(tool) {
			return false
		}
		cmd := strings.TrimLeft(args.GetFields()["command"].GetStringValue(), " \t\r\n")
		if !strings.HasPrefix(cmd, p) {
			return false
		}
		rest := cmd[len(p):]
		if rest != "" && !strings.ContainsAny(p[len(p)-1:], " \t") && !strings.ContainsAny(rest[:1], " \t"+ShellOperators) {
			return false // "git" must not match "gitk"
		}
		if rule.GetDecision() == agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED && strings.ContainsAny(cmd, ShellOperators) {
			return false
		}
	}
	if g := rule.GetPathGlob(); g != "" {
		if !RuleTakesPath(tool) {
			return false
		}
		rel, ok := workspacePath(args.GetFields()["path"].GetStringValue(), root)
		if !ok {
			return false
		}
		if ok, err := path.Match(g, rel); err != nil || !ok {
			return false
		}
	}
	return true
}

// workspacePath is a tool's path argument as a rule's glob sees it:
// cleaned, with slashes, relative to the workspace root (an absolute path
// inside it is made relative; "" is the root, "."). ok is false for a
// path outside the workspace.
func workspacePath(p, root string) (string, bool) {
	if p == "" {
		return ".", true
	}
	if filepath.IsAbs(p) {
		if root == "" {
			return "", false
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return "", false
		}
		p = rel
	}
	rel := path.Clean(filepath.ToSlash(p))
	if rel == ".." || strings.HasPrefix(rel, "../") || strings.HasPrefix(rel, "/") {
		return "", false
	}
	return rel, true
}

// suggestedRule is the rule approval_requested proposes for a call: for
// bash the command's first word (up to a shell operator, so the
// suggestion may be sent back as an ALLOWED rule; a command that starts
// with one gets the tool alone), for the file tools the directory of the
// path ("dir/*", or "*" at the workspace root), for other tools the tool
// alone.
func suggestedRule(tool string, args *structpb.Struct, root string) *agentdv1.ApprovalRule {
	rule := &agentdv1.ApprovalRule{ToolName: tool}
	switch {
	case RuleTakesCommand(tool):
		if words := strings.Fields(args.GetFields()["command"].GetStringValue()); len(words) > 0 {
			w := words[0]
			if i := strings.IndexAny(w, ShellOperators); i >= 0 {
				w = w[:i]
			}
			rule.CommandPrefix = w
		}
	case RuleTakesPath(tool):
		if rel, ok := workspacePath(args.GetFields()["path"].GetStringValue(), root); ok {
			if dir := path.Dir(rel); dir == "." {
				rule.PathGlob = "*"
			} else {
				rule.PathGlob = escapeGlob(dir) + "/*"
			}
		}
	}
	return rule
}

// escapeGlob quotes the characters path.Match reads as pattern syntax.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ceilingForbidsAllow reports whether the operator's ceiling keeps calls
// of tool asking, so no rule or RUN scope may allow them.
func (c Ceiling) ceilingForbidsAllow(tool string) bool {
	return matchesAny(c.RequireApproval.Values, tool)
}

// rulesInForce returns the approval rules on path that no removal on path
// removed, oldest first; each carries its entry's id.
func rulesInForce(path []*agentdv1.Entry) []*agentdv1.ApprovalRule {
	removed := map[string]bool{}
	for _, e := range path {
		if rm := e.GetApprovalRuleRemoval(); rm != nil {
			removed[rm.GetRuleId()] = true
		}
	}
	var out []*agentdv1.ApprovalRule
	for _, e := range path {
		if r := e.GetApprovalRule(); r != nil && !removed[e.GetId()] {
			r = proto.CloneOf(r)
			r.Id = e.GetId() // the entry's id is the rule's, whatever the payload says
			out = append(out, r)
		}
	}
	return out
}

// decidingRule is the rule that decides a call, or nil: DENIED rules
// before ALLOWED ones, run rules before session rules within each, older
// before newer; an ALLOWED rule the ceiling forbids is skipped.
func decidingRule(run, session []*agentdv1.ApprovalRule, c Ceiling, tool string, args *structpb.Struct, root string) *agentdv1.ApprovalRule {
	for _, d := range []agentdv1.ApprovalDecision{agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED, agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED} {
		if d == agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED && c.ceilingForbidsAllow(tool) {
			return nil
		}
		for _, rules := range [][]*agentdv1.ApprovalRule{run, session} {
			for _, r := range rules {
				if r.GetDecision() == d && ruleMatches(r, tool, args, root) {
					return r
				}
			}
		}
	}
	return nil
}

// ListApprovalRules returns the approval rules in force on the session's
// current path, oldest first. An ALLOWED rule the operator's ceiling
// forbids is listed, and ignored when calls are decided.
func (a *Agent) ListApprovalRules(ctx context.Context, sessionID string) ([]*agentdv1.ApprovalRule, error) {
	p, err := a.store.Path(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	return rulesInForce(p), nil
}

// DeleteApprovalRule removes a rule in force from the session's path by
// appending an ApprovalRuleRemoval entry (recording tenant, the caller's)
// at the leaf, and returns that entry. A rule not in force is refused
// with ERROR_REASON_RULE_NOT_FOUND. A run may be active: as labels, the
// removal never reaches the model, and the approval gate reads the
// session's rules each time it would ask, so the run's next call already
// asks again.
func (a *Agent) DeleteApprovalRule(ctx context.Context, sessionID, ruleID, tenant string) (*agentdv1.Entry, error) {
	rules, err := a.ListApprovalRules(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(rules, func(r *agentdv1.ApprovalRule) bool { return r.GetId() == ruleID }) {
		return nil, refuse(agentdv1.ErrorReason_ERROR_REASON_RULE_NOT_FOUND,
			"approval rule %q is not in force in session %q; ListApprovalRules lists those that are", ruleID, sessionID).with("rule_id", ruleID, "session_id", sessionID)
	}
	e := &agentdv1.Entry{Payload: &agentdv1.Entry_ApprovalRuleRemoval{ApprovalRuleRemoval: &agentdv1.ApprovalRuleRemoval{RuleId: ruleID, Tenant: tenant}}}
	if err := a.appendEntries(ctx, a.store, sessionID, e); err != nil {
		return nil, err
	}
	return e, nil
}
