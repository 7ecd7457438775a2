package agent_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/persistence"
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

// nodes is the session's whole tree.
func (h *harness) nodes(id string) []persistence.TreeNode {
	h.t.Helper()
	page, err := h.store.Tree(context.Background(), id, persistence.EntriesRequest{PageSize: persistence.MaxPageSize})
	if err != nil || page.NextPageToken != "" {
		h.t.Fatalf("Tree: %v (more: %v)", err, page.NextPageToken != "")
	}
	return page.Nodes
}

func (h *harness) leaf(id string) string {
	h.t.Helper()
	s, err := h.store.GetSession(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return s.LeafEntryID
}

// TestBranches builds a tree of three branches: edit and resend, Navigate
// with a client summary and with the model's, labels, and reading any
// branch without moving the leaf.
func TestBranches(t *testing.T) {
	h := newHarness(t, agent.Options{})
	ctx := context.Background()
	id := h.session(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
	for _, p := range []string{"one", "two", "three"} {
		h.run(id, p)
	}
	main := h.transcript(id) // one, echo, two, echo, three, echo
	if len(main) != 6 {
		t.Fatalf("transcript %s", testkit.MessageKinds(main))
	}

	// Edit and resend the second prompt: a second branch below the first
	// answer, where the model sees only the edited prompt.
	h.startRun(agent.StartRequest{SessionID: id, Prompt: user("two, edited"), ParentEntryID: main[1].GetId()}, false).rest()
	if got := contextTexts(h.context(id)); got != "user:one | assistant:one | user:two, edited | assistant:two, edited" {
		t.Fatalf("context after edit and resend: %s", got)
	}
	edited := h.transcript(id)

	// The old branch stays readable without moving the leaf.
	if got := contextTexts(h.report(id, main[5].GetId()).Context); got != "user:one | assistant:one | user:two | assistant:two | user:three | assistant:three" {
		t.Fatalf("the context of the old branch: %s", got)
	}
	if h.leaf(id) != edited[len(edited)-1].GetId() {
		t.Fatal("reading the old branch moved the leaf")
	}

	// Navigate back to the first answer with a client summary of the
	// branch left, then prompt: a third branch.
	sum, err := h.a.Navigate(ctx, id, main[1].GetId(), agent.NavigateOptions{Summary: "we tried an edited second prompt"})
	if err != nil {
		t.Fatal(err)
	}
	if bs := sum.GetMessage().GetBranchSummary(); bs.GetFromEntryId() != edited[len(edited)-1].GetId() || h.leaf(id) != sum.GetId() || sum.GetParentId() != main[1].GetId() {
		t.Fatalf("Navigate: %v", sum)
	}
	h.run(id, "four")
	want := "user:one | assistant:one | user:" + agentloop.BranchSummaryPrefix + "we tried an edited second prompt" + agentloop.BranchSummarySuffix + " | user:four | assistant:four"
	if got := contextTexts(h.context(id)); got != want {
		t.Fatalf("context after Navigate with a summary:\n%s\nwant\n%s", got, want)
	}

	// Navigate without a summary, then with the model's.
	if sum, err := h.a.Navigate(ctx, id, main[5].GetId(), agent.NavigateOptions{}); err != nil || sum != nil || h.leaf(id) != main[5].GetId() {
		t.Fatalf("Navigate without a summary: %v, %v", sum, err)
	}
	if got := contextTexts(h.context(id)); !strings.HasSuffix(got, "user:three | assistant:three") {
		t.Fatalf("context after Navigate: %s", got)
	}
	sum, err = h.a.Navigate(ctx, id, main[1].GetId(), agent.NavigateOptions{Summarize: true})
	if err != nil {
		t.Fatal(err)
	}
	if s := sum.GetMessage().GetBranchSummary().GetSummary(); !strings.Contains(s, "- user: two") || !strings.Contains(s, "- user: three") {
		t.Fatalf("the model's branch summary: %q", s)
	}

	// Labels: set, replaced, cleared.
	for _, l := range []struct{ entry, label string }{{main[0].GetId(), "start"}, {main[0].GetId(), "begin"}, {main[1].GetId(), "x"}, {main[1].GetId(), ""}} {
		if _, err := h.a.SetLabel(ctx, id, l.entry, l.label); err != nil {
			t.Fatal(err)
		}
	}
	if labels, err := h.store.Labels(ctx, id); err != nil || len(labels) != 1 || labels[main[0].GetId()] != "begin" {
		t.Fatalf("labels %v, %v", labels, err)
	}

	// Refusals change nothing.
	other := h.session(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
	h.run(other, "elsewhere")
	foreign := h.transcript(other)[0].GetId()
	before := len(h.nodes(id))
	_, err = h.a.Navigate(ctx, id, "no-such-entry", agent.NavigateOptions{})
	wantStoreNotFound(t, err, "no-such-entry")
	_, err = h.a.Navigate(ctx, id, foreign, agent.NavigateOptions{})
	wantStoreNotFound(t, err, foreign)
	_, err = h.a.SetLabel(ctx, id, foreign, "x")
	wantStoreNotFound(t, err, foreign)
	_, err = h.a.Start(ctx, agent.StartRequest{SessionID: id, Prompt: user("x"), ParentEntryID: foreign})
	wantStoreNotFound(t, err, foreign)
	_, err = h.a.Context(ctx, id, foreign)
	wantStoreNotFound(t, err, foreign)
	slow := h.session(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true, TokensPerSecond: 50}})
	h.run(slow, "a")
	first := h.transcript(slow)[0].GetId()
	s := h.promptRun(slow, strings.Repeat("slow ", 200))
	s.until(func(ev *agentdv1.AgentEvent) bool { return ev.GetMessageUpdate() != nil })
	_, err = h.a.Navigate(ctx, slow, first, agent.NavigateOptions{})
	wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_SESSION_BUSY, "needs an idle session")
	if _, err := h.a.Abort(ctx, slow, ""); err != nil {
		t.Fatal(err)
	}
	s.rest()
	if after := len(h.nodes(id)); after != before {
		t.Fatalf("refused calls changed the tree: %d nodes, before %d", after, before)
	}
}

// TestForkSessionFromTheMiddle forks a session at its first answer: the
// fork holds that path with the same entry ids and records its origin,
// listing by origin finds it, and the two sessions then diverge.
func TestForkSessionFromTheMiddle(t *testing.T) {
	h := newHarness(t, agent.Options{})
	ctx := context.Background()
	id := h.session(&agentdv1.SessionConfig{SystemPrompt: "original", Faux: &agentdv1.FauxScript{Echo: true}})
	h.run(id, "one")
	h.run(id, "two")
	src := h.transcript(id)
	fork, err := h.a.ForkSession(ctx, id, src[1].GetId(), persistence.CreateSessionParams{Title: "fork",
		Config: &agentdv1.SessionConfig{SystemPrompt: "forked", Faux: &agentdv1.FauxScript{Echo: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if fork.Origin.SessionID != id || fork.Origin.EntryID != src[1].GetId() || fork.LeafEntryID != src[1].GetId() ||
		fork.Config.GetSystemPrompt() != "forked" || fork.Title != "fork" {
		t.Fatalf("fork: %+v", fork)
	}
	copied := h.transcript(fork.ID)
	if len(copied) != 2 || copied[0].GetId() != src[0].GetId() || copied[1].GetParentId() != src[0].GetId() {
		t.Fatalf("fork transcript: %v", copied)
	}
	h.run(fork.ID, "fork only")
	h.run(id, "original only")
	if got := contextTexts(h.context(fork.ID)); got != "user:one | assistant:one | user:fork only | assistant:fork only" {
		t.Fatalf("fork context: %s", got)
	}
	if got := contextTexts(h.context(id)); !strings.HasSuffix(got, "user:two | assistant:two | user:original only | assistant:original only") {
		t.Fatalf("original context: %s", got)
	}
	forks := func() []*persistence.Session {
		list, err := h.store.ListSessions(ctx, persistence.ListSessionsRequest{OriginSessionID: id})
		if err != nil {
			t.Fatal(err)
		}
		return list.Sessions
	}
	if list := forks(); len(list) != 1 || list[0].ID != fork.ID {
		t.Fatalf("sessions by origin: %v", list)
	}
	// The whole session by default, with its configuration.
	whole, err := h.a.ForkSession(ctx, id, "", persistence.CreateSessionParams{})
	if err != nil || whole.Config.GetSystemPrompt() != "original" || len(h.transcript(whole.ID)) != 6 {
		t.Fatalf("fork of the leaf: %+v %v", whole, err)
	}
	_, err = h.a.ForkSession(ctx, id, "nope", persistence.CreateSessionParams{})
	wantStoreNotFound(t, err, "nope")
	if list := forks(); len(list) != 2 {
		t.Fatalf("a refused fork left a session behind: %d forks", len(list))
	}
}

// Edit and resend of the seed's first prompt: from_root starts a second
// branch where the model sees only the edited prompt; the first
// conversation stays in the tree.
func TestEditAndResendTheFirstPrompt(t *testing.T) {
	h := newHarness(t, agent.Options{})
	id := h.session(&agentdv1.SessionConfig{SystemPrompt: "你是桌面开发助手。", Faux: &agentdv1.FauxScript{Echo: true}})
	h.run(id, "读取 src/config.ts，告诉我默认端口。")
	h.run(id, "把它改成 8080。")
	first := h.transcript(id)
	h.startRun(agent.StartRequest{SessionID: id, Prompt: user("读取 src/config.json，告诉我默认端口。"), FromRoot: true}, false).rest()
	if got := contextTexts(h.context(id)); got != "user:读取 src/config.json，告诉我默认端口。 | assistant:读取 src/config.json，告诉我默认端口。" {
		t.Fatalf("context of the edited branch: %s", got)
	}
	roots := 0
	for _, n := range h.nodes(id) {
		if n.ParentID == "" {
			roots++
		}
	}
	if roots != 2 {
		t.Fatalf("%d roots; want the first conversation's and the edited one", roots)
	}
	if old := h.report(id, first[len(first)-1].GetId()); len(old.Context.GetMessages()) != 4 {
		t.Fatalf("the first conversation: %v", old.Context)
	}
	_, err := h.a.Start(context.Background(), agent.StartRequest{SessionID: id, Prompt: user("x"), FromRoot: true, ParentEntryID: first[0].GetId()})
	wantField(t, err, "from_root")
}

// Edit and resend is idempotent with a request id: a retry attaches to the
// run the first call started, appends nothing, and leaves the leaf where
// that run left it.
func TestEditAndResendIsIdempotent(t *testing.T) {
	h := newHarness(t, agent.Options{})
	id := h.session(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
	h.run(id, "one")
	h.run(id, "two")
	main := h.transcript(id)
	req := agent.StartRequest{SessionID: id, Prompt: user("two, edited"), ParentEntryID: main[1].GetId(), RequestID: "edit-1"}
	first := h.startRun(req, false).rest()
	h.run(id, "three") // the leaf moves on
	before := len(h.nodes(id))
	again := h.startRun(req, false).rest()
	if again[0].GetRunId() != first[0].GetRunId() || len(again) != len(first) {
		t.Fatalf("the retry got run %s (%d events); want the first run %s (%d)", again[0].GetRunId(), len(again), first[0].GetRunId(), len(first))
	}
	if after := len(h.nodes(id)); after != before {
		t.Fatalf("the retry appended %d entries", after-before)
	}
	if got := contextTexts(h.context(id)); !strings.HasSuffix(got, "user:three | assistant:three") {
		t.Fatalf("the retry moved the leaf: %s", got)
	}
}
