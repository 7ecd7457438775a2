package main

import (
	"fmt"
	"strings"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// treeDepths is the indentation of each node of a session's tree, given in
// append order (parents first): a node sits at its parent's depth unless
// the parent has several children, whose branches then sit one deeper. A
// linear conversation is thus flat, and every │ marks a branch point.
func treeDepths(nodes []*agentdv1.TreeNode) map[string]int {
	children := map[string]int{}
	for _, n := range nodes {
		if n.GetParentId() != "" {
			children[n.GetParentId()]++
		}
	}
	depth := make(map[string]int, len(nodes))
	for _, n := range nodes {
		d := 0
		if p := n.GetParentId(); p != "" {
			d = depth[p]
			if children[p] > 1 {
				d++
			}
		}
		depth[n.GetId()] = d
	}
	return depth
}

// treeLine is one readable line of `agentctl tree`: * marks the leaf.
func treeLine(n *agentdv1.TreeNode, depth int) string {
	mark := " "
	if n.GetIsLeaf() {
		mark = "*"
	}
	label := ""
	if n.GetLabel() != "" {
		label = " [" + n.GetLabel() + "]"
	}
	return fmt.Sprintf("%s %s %s%s %s: %s", mark, n.GetId(), strings.Repeat("│", min(depth, 40)), label, n.GetKind(), n.GetPreview())
}
