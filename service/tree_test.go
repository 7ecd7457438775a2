package service_test

import (
	"testing"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/service"
)

func (h *harness) tree(id string) *agentdv1.GetTreeResponse {
	h.t.Helper()
	all := &agentdv1.GetTreeResponse{}
	token := ""
	for {
		resp, err := h.client.GetTree(h.ctx(), &agentdv1.GetTreeRequest{SessionId: id, PageSize: 4, PageToken: token})
		if err != nil {
			h.t.Fatalf("GetTree: %v", err)
		}
		all.Nodes = append(all.Nodes, resp.GetNodes()...)
		all.LeafEntryId = resp.GetLeafEntryId()
		if token = resp.GetNextPageToken(); token == "" {
			return all
		}
	}
}

// TestTreeOverGRPC: the tree of three branches (edit and resend with
// parent_entry_id, Navigate with a summary) as GetTree pages it, with
// labels, leaf and previews; GetTranscript of another branch and its
// labels; ForkSession's origin and ListSessions by origin. (The branching
// itself is tested in agent.)
func TestTreeOverGRPC(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
	for _, p := range []string{"one", "two", "three"} {
		h.prompt(id, p)
	}
	main := h.transcript(id) // one, echo, two, echo, three, echo
	if len(main) != 6 {
		t.Fatalf("transcript %s", testkit.MessageKinds(main))
	}
	edited := h.promptWith(&agentdv1.PromptRequest{SessionId: id, Content: texts("two, edited"), ParentEntryId: main[1].GetId()})
	if got := testkit.MessageKinds(h.transcript(id)); got != "user assistant user assistant" {
		t.Fatalf("transcript after edit and resend: %s", got)
	}
	oldPath, err := h.client.GetTranscript(h.ctx(), &agentdv1.GetTranscriptRequest{SessionId: id, LeafEntryId: main[5].GetId()})
	if err != nil || len(oldPath.GetEntries()) != 6 || oldPath.GetEntries()[5].GetId() != main[5].GetId() {
		t.Fatalf("GetTranscript of the old branch: %v %v", oldPath.GetEntries(), err)
	}
	nav, err := h.client.Navigate(h.ctx(), &agentdv1.NavigateRequest{SessionId: id, EntryId: main[1].GetId(), Summary: "we tried an edited second prompt"})
	if err != nil {
		t.Fatal(err)
	}
	var editedEnd string
	for _, ev := range edited {
		if e := ev.GetMessageEnd().GetEntryId(); e != "" {
			editedEnd = e
		}
	}
	bs := nav.GetBranchSummary().GetMessage().GetBranchSummary()
	if bs.GetFromEntryId() != editedEnd || nav.GetSession().GetLeafEntryId() != nav.GetBranchSummary().GetId() {
		t.Fatalf("Navigate: %v", nav)
	}
	h.prompt(id, "four")

	// Labels: set, replaced, cleared; GetTree and GetTranscript show them.
	for _, l := range []struct{ entry, label string }{{main[0].GetId(), "start"}, {main[0].GetId(), "begin"}, {main[1].GetId(), "x"}, {main[1].GetId(), ""}} {
		if _, err := h.client.SetLabel(h.ctx(), &agentdv1.SetLabelRequest{SessionId: id, EntryId: l.entry, Label: l.label}); err != nil {
			t.Fatal(err)
		}
	}
	tree := h.tree(id)
	labelled, leaves, byID := 0, 0, map[string]*agentdv1.TreeNode{}
	for _, n := range tree.GetNodes() {
		byID[n.GetId()] = n
		if n.GetLabel() != "" {
			labelled++
		}
		if n.GetIsLeaf() {
			leaves++
		}
		if n.GetParentId() != "" && byID[n.GetParentId()] == nil {
			t.Fatalf("node %s comes before its parent", n.GetId())
		}
	}
	if labelled != 1 || byID[main[0].GetId()].GetLabel() != "begin" || leaves != 1 || !byID[tree.GetLeafEntryId()].GetIsLeaf() {
		t.Fatalf("tree labels/leaf: %d labelled, %d leaves, first %v", labelled, leaves, byID[main[0].GetId()])
	}
	if n := byID[main[2].GetId()]; n.GetKind() != "user" || n.GetPreview() != "two" {
		t.Fatalf("node of the second prompt: %v", n)
	}
	tr, err := h.client.GetTranscript(h.ctx(), &agentdv1.GetTranscriptRequest{SessionId: id})
	if err != nil || tr.GetLabels()[main[0].GetId()] != "begin" || len(tr.GetLabels()) != 1 {
		t.Fatalf("GetTranscript labels: %v %v", tr.GetLabels(), err)
	}
	// The edited branch, the old one and the third all hang below the
	// first answer.
	children := 0
	for _, n := range tree.GetNodes() {
		if n.GetParentId() == main[1].GetId() {
			children++
		}
	}
	if children < 3 {
		t.Fatalf("%d branches below the first answer, want at least 3", children)
	}

	// A fork names its origin; ListSessions finds it by origin.
	resp, err := h.client.ForkSession(h.ctx(), &agentdv1.ForkSessionRequest{SessionId: id, EntryId: main[1].GetId(), Title: "fork",
		Config: &agentdv1.SessionConfig{SystemPrompt: "forked", Faux: &agentdv1.FauxScript{Echo: true}}})
	if err != nil {
		t.Fatal(err)
	}
	fork := resp.GetSession()
	if fork.GetOrigin().GetSessionId() != id || fork.GetOrigin().GetEntryId() != main[1].GetId() || fork.GetLeafEntryId() != main[1].GetId() ||
		fork.GetConfig().GetSystemPrompt() != "forked" || fork.GetTitle() != "fork" {
		t.Fatalf("fork: %v", fork)
	}
	list, err := h.client.ListSessions(h.ctx(), &agentdv1.ListSessionsRequest{OriginSessionId: id})
	if err != nil || len(list.GetSessions()) != 1 || list.GetSessions()[0].GetId() != fork.GetId() {
		t.Fatalf("ListSessions by origin: %v %v", list, err)
	}
}
