package main

import (
	"strings"
	"testing"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service/servicetest"
)

func TestTreeDepths(t *testing.T) {
	node := func(id, parent string) *agentdv1.TreeNode { return &agentdv1.TreeNode{Id: id, ParentId: parent} }
	tests := []struct {
		name  string
		nodes []*agentdv1.TreeNode
		want  map[string]int
	}{
		{"linear", []*agentdv1.TreeNode{node("a", ""), node("b", "a"), node("c", "b"), node("d", "c")},
			map[string]int{"a": 0, "b": 0, "c": 0, "d": 0}},
		{"one branch point", []*agentdv1.TreeNode{node("a", ""), node("b", "a"), node("c", "b"), node("d", "a"), node("e", "d")},
			map[string]int{"a": 0, "b": 1, "c": 1, "d": 1, "e": 1}},
		{"nested branch points", []*agentdv1.TreeNode{node("a", ""), node("b", "a"), node("c", "a"), node("d", "c"), node("e", "c"), node("f", "e")},
			map[string]int{"a": 0, "b": 1, "c": 1, "d": 2, "e": 2, "f": 2}},
		{"two roots", []*agentdv1.TreeNode{node("a", ""), node("b", "a"), node("x", ""), node("y", "x")},
			map[string]int{"a": 0, "b": 0, "x": 0, "y": 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := treeDepths(tt.nodes)
			for id, want := range tt.want {
				if got[id] != want {
					t.Errorf("depth of %s = %d, want %d (all: %v)", id, got[id], want, got)
				}
			}
		})
	}
}

// agentctl tree over a real agentd: a linear conversation is flat, and an
// edit-and-resend (a branch) indents only the branches.
func TestTreeIndentsOnlyAtBranchPoints(t *testing.T) {
	addr := servicetest.Start(t, agent.Options{})
	_, out, _ := ctl(t, addr, "sessions", "create", "--faux-echo")
	id := strings.TrimSpace(out)
	for _, p := range []string{"one", "two", "three"} {
		if code, _, stderr := ctl(t, addr, "prompt", id, p); code != 0 {
			t.Fatalf("prompt %s: %s", p, stderr)
		}
	}
	_, out, _ = ctl(t, addr, "tree", id)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || strings.Contains(out, "│") {
		t.Fatalf("tree of a linear conversation is not 6 flat lines:\n%s", out)
	}
	// Resend below the first answer: its entry now has two children.
	firstAnswer := strings.Fields(lines[1])[0]
	if code, _, stderr := ctl(t, addr, "prompt", id, "two again", "--parent", firstAnswer); code != 0 {
		t.Fatalf("prompt --parent: %s", stderr)
	}
	_, out, _ = ctl(t, addr, "tree", id)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 8 {
		t.Fatalf("tree after a branch has %d lines, want 8:\n%s", len(lines), out)
	}
	for i, l := range lines {
		want := 0
		if i >= 2 {
			want = 1 // both branches below the branch point, one deep
		}
		if got := strings.Count(l, "│"); got != want {
			t.Errorf("line %d has %d │, want %d:\n%s", i, got, want, out)
		}
	}
}
