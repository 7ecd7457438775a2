package service_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service"
)

// contextTexts renders a context as role:text lines.
func contextTexts(c *agentdv1.Context) string {
	var out []string
	for _, m := range c.GetMessages() {
		switch r := m.GetRole().(type) {
		case *agentdv1.Message_User:
			out = append(out, "user:"+r.User.GetContent()[0].GetText().GetText())
		case *agentdv1.Message_Assistant:
			out = append(out, "assistant:"+r.Assistant.GetContent()[0].GetText().GetText())
		}
	}
	return strings.Join(out, " | ")
}

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

// TestBranchesOverGRPC builds a tree of three branches over gRPC: edit and
// resend, Navigate with a client summary and with the model's, labels, and
// reading any branch without moving the leaf.
func TestBranchesOverGRPC(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
	for _, p := range []string{"one", "two", "three"} {
		h.prompt(id, p)
	}
	main := h.transcript(id) // one, echo, two, echo, three, echo
	if len(main) != 6 {
		t.Fatalf("transcript %s", messageKinds(main))
	}

	// Edit and resend the second prompt: a second branch below the first
	// answer, where the model sees only the edited prompt.
	h.promptWith(&agentdv1.PromptRequest{SessionId: id, Content: texts("two, edited"), ParentEntryId: main[1].GetId()})
	if got := contextTexts(h.context(id)); got != "user:one | assistant:one | user:two, edited | assistant:two, edited" {
		t.Fatalf("context after edit and resend: %s", got)
	}
	edited := h.transcript(id)

	// The old branch stays readable without moving the leaf.
	old, err := h.client.GetContext(h.ctx(), &agentdv1.GetContextRequest{SessionId: id, LeafEntryId: main[5].GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if got := contextTexts(old.GetContext()); got != "user:one | assistant:one | user:two | assistant:two | user:three | assistant:three" {
		t.Fatalf("GetContext of the old branch: %s", got)
	}
	oldPath, err := h.client.GetTranscript(h.ctx(), &agentdv1.GetTranscriptRequest{SessionId: id, LeafEntryId: main[5].GetId()})
	if err != nil || len(oldPath.GetEntries()) != 6 || oldPath.GetEntries()[5].GetId() != main[5].GetId() {
		t.Fatalf("GetTranscript of the old branch: %v %v", oldPath.GetEntries(), err)
	}

	// Navigate back to the first answer with a client summary of the
	// branch left, then prompt: a third branch.
	nav, err := h.client.Navigate(h.ctx(), &agentdv1.NavigateRequest{SessionId: id, EntryId: main[1].GetId(), Summary: "we tried an edited second prompt"})
	if err != nil {
		t.Fatal(err)
	}
	bs := nav.GetBranchSummary().GetMessage().GetBranchSummary()
	if bs.GetFromEntryId() != edited[len(edited)-1].GetId() || nav.GetSession().GetLeafEntryId() != nav.GetBranchSummary().GetId() {
		t.Fatalf("Navigate: %v", nav)
	}
	h.prompt(id, "four")
	want := "user:one | assistant:one | user:" + agentloop.BranchSummaryPrefix + "we tried an edited second prompt" + agentloop.BranchSummarySuffix + " | user:four | assistant:four"
	if got := contextTexts(h.context(id)); got != want {
		t.Fatalf("context after Navigate with a summary:\n%s\nwant\n%s", got, want)
	}

	// Navigate without a summary, then with the model's.
	if _, err := h.client.Navigate(h.ctx(), &agentdv1.NavigateRequest{SessionId: id, EntryId: main[5].GetId()}); err != nil {
		t.Fatal(err)
	}
	if got := contextTexts(h.context(id)); !strings.HasSuffix(got, "user:three | assistant:three") {
		t.Fatalf("context after Navigate: %s", got)
	}
	nav, err = h.client.Navigate(h.ctx(), &agentdv1.NavigateRequest{SessionId: id, EntryId: main[1].GetId(), Summarize: true})
	if err != nil {
		t.Fatal(err)
	}
	if s := nav.GetBranchSummary().GetMessage().GetBranchSummary().GetSummary(); !strings.Contains(s, "- user: two") || !strings.Contains(s, "- user: three") {
		t.Fatalf("the model's branch summary: %q", s)
	}

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

	// Refusals change nothing.
	other := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
	h.prompt(other, "elsewhere")
	foreign := h.transcript(other)[0].GetId()
	before := len(h.tree(id).GetNodes())
	_, err = h.client.Navigate(h.ctx(), &agentdv1.NavigateRequest{SessionId: id, EntryId: "no-such-entry"})
	wantCode(t, err, codes.NotFound, "no-such-entry")
	_, err = h.client.Navigate(h.ctx(), &agentdv1.NavigateRequest{SessionId: id, EntryId: foreign})
	wantCode(t, err, codes.NotFound, foreign)
	_, err = h.client.SetLabel(h.ctx(), &agentdv1.SetLabelRequest{SessionId: id, EntryId: foreign, Label: "x"})
	wantCode(t, err, codes.NotFound, foreign)
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("x"), ParentEntryId: foreign})
	if err == nil {
		_, err = drain(stream)
	}
	wantCode(t, err, codes.NotFound, foreign)
	_, err = h.client.GetContext(h.ctx(), &agentdv1.GetContextRequest{SessionId: id, LeafEntryId: foreign})
	wantCode(t, err, codes.NotFound, foreign)
	slow := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true, TokensPerSecond: 50}})
	h.prompt(slow, "a")
	first := h.transcript(slow)[0].GetId()
	stream, err = h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: slow, Content: texts(strings.Repeat("slow ", 200))})
	if err != nil {
		t.Fatal(err)
	}
	recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetMessageUpdate() != nil })
	_, err = h.client.Navigate(h.ctx(), &agentdv1.NavigateRequest{SessionId: slow, EntryId: first})
	wantCode(t, err, codes.FailedPrecondition, "needs an idle session")
	if _, err := h.client.Abort(h.ctx(), &agentdv1.AbortRequest{SessionId: slow}); err != nil {
		t.Fatal(err)
	}
	if _, err := drain(stream); err != nil {
		t.Fatal(err)
	}
	if after := len(h.tree(id).GetNodes()); after != before {
		t.Fatalf("refused calls changed the tree: %d nodes, before %d", after, before)
	}
}

// TestForkSessionFromTheMiddle forks a session at its first answer: the
// fork holds that path with the same entry ids and records its origin,
// ListSessions finds it by origin, and the two sessions then diverge.
func TestForkSessionFromTheMiddle(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := h.createSession(&agentdv1.SessionConfig{SystemPrompt: "original", Faux: &agentdv1.FauxScript{Echo: true}})
	h.prompt(id, "one")
	h.prompt(id, "two")
	src := h.transcript(id)
	resp, err := h.client.ForkSession(h.ctx(), &agentdv1.ForkSessionRequest{SessionId: id, EntryId: src[1].GetId(), Title: "fork",
		Config: &agentdv1.SessionConfig{SystemPrompt: "forked", Faux: &agentdv1.FauxScript{Echo: true}}})
	if err != nil {
		t.Fatal(err)
	}
	fork := resp.GetSession()
	if fork.GetOrigin().GetSessionId() != id || fork.GetOrigin().GetEntryId() != src[1].GetId() || fork.GetLeafEntryId() != src[1].GetId() ||
		fork.GetConfig().GetSystemPrompt() != "forked" || fork.GetTitle() != "fork" {
		t.Fatalf("fork: %v", fork)
	}
	copied := h.transcript(fork.GetId())
	if len(copied) != 2 || copied[0].GetId() != src[0].GetId() || copied[1].GetParentId() != src[0].GetId() {
		t.Fatalf("fork transcript: %v", copied)
	}
	h.prompt(fork.GetId(), "fork only")
	h.prompt(id, "original only")
	if got := contextTexts(h.context(fork.GetId())); got != "user:one | assistant:one | user:fork only | assistant:fork only" {
		t.Fatalf("fork context: %s", got)
	}
	if got := contextTexts(h.context(id)); !strings.HasSuffix(got, "user:two | assistant:two | user:original only | assistant:original only") {
		t.Fatalf("original context: %s", got)
	}
	list, err := h.client.ListSessions(h.ctx(), &agentdv1.ListSessionsRequest{OriginSessionId: id})
	if err != nil || len(list.GetSessions()) != 1 || list.GetSessions()[0].GetId() != fork.GetId() {
		t.Fatalf("ListSessions by origin: %v %v", list, err)
	}
	// The whole session by default, with its configuration.
	whole, err := h.client.ForkSession(h.ctx(), &agentdv1.ForkSessionRequest{SessionId: id})
	if err != nil || whole.GetSession().GetConfig().GetSystemPrompt() != "original" || len(h.transcript(whole.GetSession().GetId())) != 6 {
		t.Fatalf("fork of the leaf: %v %v", whole, err)
	}
	_, err = h.client.ForkSession(h.ctx(), &agentdv1.ForkSessionRequest{SessionId: id, EntryId: "nope"})
	wantCode(t, err, codes.NotFound, "nope")
	if list, _ := h.client.ListSessions(h.ctx(), &agentdv1.ListSessionsRequest{OriginSessionId: id}); len(list.GetSessions()) != 2 {
		t.Fatalf("a refused fork left a session behind: %d forks", len(list.GetSessions()))
	}
}

// Edit and resend of the seed's first prompt: from_root starts a second
// branch where the model sees only the edited prompt; the first
// conversation stays in the tree.
func TestEditAndResendTheFirstPrompt(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := h.createSession(&agentdv1.SessionConfig{SystemPrompt: "你是桌面开发助手。", Faux: &agentdv1.FauxScript{Echo: true}})
	h.prompt(id, "读取 src/config.ts，告诉我默认端口。")
	h.prompt(id, "把它改成 8080。")
	first := h.transcript(id)
	h.promptWith(&agentdv1.PromptRequest{SessionId: id, Content: texts("读取 src/config.json，告诉我默认端口。"), FromRoot: true})
	if got := contextTexts(h.context(id)); got != "user:读取 src/config.json，告诉我默认端口。 | assistant:读取 src/config.json，告诉我默认端口。" {
		t.Fatalf("context of the edited branch: %s", got)
	}
	roots := 0
	for _, n := range h.tree(id).GetNodes() {
		if n.GetParentId() == "" {
			roots++
		}
	}
	if roots != 2 {
		t.Fatalf("%d roots; want the first conversation's and the edited one", roots)
	}
	old, err := h.client.GetContext(h.ctx(), &agentdv1.GetContextRequest{SessionId: id, LeafEntryId: first[len(first)-1].GetId()})
	if err != nil || len(old.GetContext().GetMessages()) != 4 {
		t.Fatalf("the first conversation: %v %v", old, err)
	}
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("x"), FromRoot: true, ParentEntryId: first[0].GetId()})
	if err == nil {
		_, err = drain(stream)
	}
	wantCode(t, err, codes.InvalidArgument, "from_root")
}

// Edit and resend is idempotent with request_id: a retry attaches to the
// run the first call started, appends nothing, and leaves the leaf where
// that run left it.
func TestEditAndResendIsIdempotent(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
	h.prompt(id, "one")
	h.prompt(id, "two")
	main := h.transcript(id)
	req := &agentdv1.PromptRequest{SessionId: id, Content: texts("two, edited"), ParentEntryId: main[1].GetId(), RequestId: "edit-1"}
	first := h.promptWith(req)
	h.prompt(id, "three") // the leaf moves on
	before := len(h.tree(id).GetNodes())
	again := h.promptWith(req)
	if again[0].GetRunId() != first[0].GetRunId() || len(again) != len(first) {
		t.Fatalf("the retry got run %s (%d events); want the first run %s (%d)", again[0].GetRunId(), len(again), first[0].GetRunId(), len(first))
	}
	if after := len(h.tree(id).GetNodes()); after != before {
		t.Fatalf("the retry appended %d entries", after-before)
	}
	if got := contextTexts(h.context(id)); !strings.HasSuffix(got, "user:three | assistant:three") {
		t.Fatalf("the retry moved the leaf: %s", got)
	}
}
