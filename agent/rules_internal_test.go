package agent

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

func ruleArgs(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRuleMatches(t *testing.T) {
	const root = "/srv/ws"
	allow, deny := agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED, agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED
	bash := func(prefix string, d agentdv1.ApprovalDecision) *agentdv1.ApprovalRule {
		return &agentdv1.ApprovalRule{ToolName: "bash", CommandPrefix: prefix, Decision: d}
	}
	file := func(tool, glob string) *agentdv1.ApprovalRule {
		return &agentdv1.ApprovalRule{ToolName: tool, PathGlob: glob, Decision: allow}
	}
	cases := []struct {
		name string
		rule *agentdv1.ApprovalRule
		tool string
		args map[string]any
		want bool
	}{
		{"tool-wide", &agentdv1.ApprovalRule{ToolName: "bash", Decision: allow}, "bash", map[string]any{"command": "anything; at all"}, true},
		{"other tool", &agentdv1.ApprovalRule{ToolName: "bash", Decision: allow}, "write_file", map[string]any{"path": "a"}, false},
		{"no tool name", &agentdv1.ApprovalRule{Decision: allow}, "", nil, false},
		{"prefix", bash("git status", allow), "bash", map[string]any{"command": "git status"}, true},
		{"prefix after spaces", bash("git", allow), "bash", map[string]any{"command": " \t git log -1"}, true},
		{"prefix inside a word", bash("git", allow), "bash", map[string]any{"command": "gitk"}, false},
		{"prefix ending in a space", bash("git ", allow), "bash", map[string]any{"command": "git log"}, true},
		{"allow with a second command", bash("git status", allow), "bash", map[string]any{"command": "git status; rm -rf ~"}, false},
		{"allow with a pipe", bash("ls", allow), "bash", map[string]any{"command": "ls | sh"}, false},
		{"allow with a substitution", bash("echo", allow), "bash", map[string]any{"command": "echo $(id)"}, false},
		{"allow with a redirection", bash("echo", allow), "bash", map[string]any{"command": "echo x > ~/.bashrc"}, false},
		{"allow with a newline", bash("echo", allow), "bash", map[string]any{"command": "echo x\ncurl evil"}, false},
		{"deny with a second command", bash("rm", deny), "bash", map[string]any{"command": "rm -rf x && echo"}, true},
		{"allow, operator in the prefix", bash("ls;", allow), "bash", map[string]any{"command": "ls; rm -rf ~"}, false},
		{"deny right before an operator", bash("rm", deny), "bash", map[string]any{"command": "rm;ls"}, true},
		{"prefix for a file tool", &agentdv1.ApprovalRule{ToolName: "read_file", CommandPrefix: "x", Decision: allow}, "read_file", map[string]any{"path": "x"}, false},
		{"glob", file("write_file", "src/*"), "write_file", map[string]any{"path": "src/a.go"}, true},
		{"glob not deeper", file("write_file", "src/*"), "write_file", map[string]any{"path": "src/deep/a.go"}, false},
		{"glob, path cleaned", file("write_file", "src/*"), "write_file", map[string]any{"path": "./src//x/../a.go"}, true},
		{"glob, path escaping", file("write_file", "*"), "write_file", map[string]any{"path": "../outside"}, false},
		{"glob, absolute inside", file("edit_file", "src/*"), "edit_file", map[string]any{"path": "/srv/ws/src/a.go"}, true},
		{"glob, absolute outside", file("edit_file", "*"), "edit_file", map[string]any{"path": "/etc/passwd"}, false},
		{"glob, ls of the root", file("ls", "*"), "ls", map[string]any{}, true},
		{"malformed glob", file("read_file", "[a"), "read_file", map[string]any{"path": "[a"}, false},
		{"glob for bash", &agentdv1.ApprovalRule{ToolName: "bash", PathGlob: "*", Decision: allow}, "bash", map[string]any{"command": "ls"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ruleMatches(tc.rule, tc.tool, ruleArgs(t, tc.args), root); got != tc.want {
				t.Fatalf("ruleMatches(%v, %s, %v) = %v", tc.rule, tc.tool, tc.args, got)
			}
		})
	}
}

func TestSuggestedRule(t *testing.T) {
	cases := []struct {
		tool         string
		args         map[string]any
		prefix, glob string
	}{
		{"bash", map[string]any{"command": "  git status --short"}, "git", ""},
		{"bash", map[string]any{"command": ""}, "", ""},
		{"bash", map[string]any{"command": "ls;rm -rf ~"}, "ls", ""},
		{"bash", map[string]any{"command": "$(evil)"}, "", ""},
		{"write_file", map[string]any{"path": "notes.txt"}, "", "*"},
		{"write_file", map[string]any{"path": "src/pkg/a.go"}, "", "src/pkg/*"},
		{"read_file", map[string]any{"path": "/srv/ws/docs/x.md"}, "", "docs/*"},
		{"edit_file", map[string]any{"path": "we[ir]d*/a"}, "", `we\[ir]d\*/*`},
		{"ls", map[string]any{}, "", "*"},
		{"mcp__fs__read", map[string]any{"path": "a/b"}, "", ""},
	}
	for _, tc := range cases {
		r := suggestedRule(tc.tool, ruleArgs(t, tc.args), "/srv/ws")
		if r.GetToolName() != tc.tool || r.GetCommandPrefix() != tc.prefix || r.GetPathGlob() != tc.glob {
			t.Errorf("suggestedRule(%s, %v) = %v, want prefix %q glob %q", tc.tool, tc.args, r, tc.prefix, tc.glob)
		}
		if tc.glob != "" && !ruleMatches(&agentdv1.ApprovalRule{ToolName: tc.tool, PathGlob: r.GetPathGlob(), Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED},
			tc.tool, ruleArgs(t, tc.args), "/srv/ws") {
			t.Errorf("the suggestion for %v does not match its own call", tc.args)
		}
	}
}

// DENIED rules go first, then ALLOWED, run rules before session rules
// within each; an ALLOWED rule the ceiling forbids never decides.
func TestDecidingRulePrecedence(t *testing.T) {
	allow := &agentdv1.ApprovalRule{Id: "s-allow", ToolName: "bash", Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED}
	runAllow := &agentdv1.ApprovalRule{ToolName: "bash", CommandPrefix: "rm", Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED}
	deny := &agentdv1.ApprovalRule{Id: "s-deny", ToolName: "bash", CommandPrefix: "rm", Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED}
	args := ruleArgs(t, map[string]any{"command": "rm x"})
	if got := decidingRule([]*agentdv1.ApprovalRule{runAllow}, []*agentdv1.ApprovalRule{allow, deny}, Ceiling{}, "bash", args, ""); got != deny {
		t.Fatalf("got %v, want the denial", got)
	}
	if got := decidingRule([]*agentdv1.ApprovalRule{runAllow}, []*agentdv1.ApprovalRule{allow}, Ceiling{}, "bash", args, ""); got != runAllow {
		t.Fatalf("got %v, want the run's rule", got)
	}
	ceiling := Ceiling{RequireApproval: Limit{Values: []string{"bash"}}}
	if got := decidingRule([]*agentdv1.ApprovalRule{runAllow}, []*agentdv1.ApprovalRule{allow}, ceiling, "bash", args, ""); got != nil {
		t.Fatalf("the ceiling forbids %v", got)
	}
	if got := decidingRule(nil, []*agentdv1.ApprovalRule{allow, deny}, ceiling, "bash", args, ""); got != deny {
		t.Fatalf("a denial is fine under the ceiling; got %v", got)
	}
}

func TestRulesInForce(t *testing.T) {
	rule := func(id string) *agentdv1.Entry {
		return &agentdv1.Entry{Id: id, Payload: &agentdv1.Entry_ApprovalRule{ApprovalRule: &agentdv1.ApprovalRule{Id: "stale", ToolName: "bash"}}}
	}
	removal := &agentdv1.Entry{Id: "r", Payload: &agentdv1.Entry_ApprovalRuleRemoval{ApprovalRuleRemoval: &agentdv1.ApprovalRuleRemoval{RuleId: "a"}}}
	got := rulesInForce([]*agentdv1.Entry{rule("a"), rule("b"), removal})
	if len(got) != 1 || got[0].GetId() != "b" {
		t.Fatalf("in force: %v, want b alone (with its entry's id)", got)
	}
}

func TestArgumentsRefusalNamesTheField(t *testing.T) {
	problem := func(path, msg string) agentloop.ArgumentProblem {
		return agentloop.ArgumentProblem{Path: path, Message: msg}
	}
	cases := []struct {
		err   error
		field string
	}{
		{&agentloop.ArgumentsError{Tool: "bash", Problems: []agentloop.ArgumentProblem{problem("command", "must be string")}}, "arguments.command"},
		{&agentloop.ArgumentsError{Tool: "x", Problems: []agentloop.ArgumentProblem{problem("a.b", "missing b"), problem("c", "must be number")}}, "arguments.a.b"},
		{&agentloop.ArgumentsError{Tool: "x", Problems: []agentloop.ArgumentProblem{problem("", "must be object")}}, "arguments"},
		{errors.New("something else"), "arguments"},
	}
	for _, c := range cases {
		fe := argumentsRefusal("x", c.err, "call \"c1\" still waits")
		if fe.Field != c.field {
			t.Errorf("%v: field %q, want %q", c.err, fe.Field, c.field)
		}
		if !strings.Contains(fe.Description, "c1") {
			t.Errorf("%v: description %q does not say what still waits", c.err, fe.Description)
		}
	}
}
