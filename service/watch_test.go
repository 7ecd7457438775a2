package service_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider/faux"
	"github.com/agentd/agentd/service"
)

// secondClient is another connection to h's agentd: another client.
func secondClient(t *testing.T, h *harness, opts ...grpc.DialOption) agentdv1.AgentServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(h.addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return agentdv1.NewAgentServiceClient(conn)
}

// watchKind names a SessionWatchEvent's change, with the run event's kind.
func watchKind(ev *agentdv1.SessionWatchEvent) string {
	switch c := ev.GetChange().(type) {
	case *agentdv1.SessionWatchEvent_Started:
		return "started"
	case *agentdv1.SessionWatchEvent_RunStarted:
		return "run_started"
	case *agentdv1.SessionWatchEvent_Event:
		return eventKind(c.Event)
	case *agentdv1.SessionWatchEvent_RunEnded:
		return "run_ended"
	case *agentdv1.SessionWatchEvent_SessionUpdated:
		return "session_updated"
	case *agentdv1.SessionWatchEvent_EntriesAppended:
		return "entries_appended"
	case *agentdv1.SessionWatchEvent_LabelChanged:
		return "label_changed:" + c.LabelChanged.GetLabel()
	case *agentdv1.SessionWatchEvent_Deleted:
		return "deleted"
	case *agentdv1.SessionWatchEvent_Resync:
		return "resync"
	}
	return "?"
}

// watchSession opens WatchSession and waits until it is live.
func watchSession(t *testing.T, ctx context.Context, c agentdv1.AgentServiceClient, id, cursor string) grpc.ServerStreamingClient[agentdv1.SessionWatchEvent] {
	t.Helper()
	st, err := c.WatchSession(ctx, &agentdv1.WatchSessionRequest{SessionId: id, Cursor: cursor})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// recvWatch reads until pred holds, and returns what it read.
func recvWatch(t *testing.T, st grpc.ServerStreamingClient[agentdv1.SessionWatchEvent], pred func(*agentdv1.SessionWatchEvent) bool) []*agentdv1.SessionWatchEvent {
	t.Helper()
	var out []*agentdv1.SessionWatchEvent
	for {
		ev, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d changes: %v", len(out), err)
		}
		out = append(out, ev)
		if pred(ev) {
			return out
		}
	}
}

func TestWatchSessionSeesAnotherClientsChangesInOrder(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	id := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{faux.Message(faux.Text("hi"))}}})
	watcher := secondClient(t, h)
	st := watchSession(t, h.ctx(), watcher, id, "")
	recvWatch(t, st, func(ev *agentdv1.SessionWatchEvent) bool { return ev.GetStarted() != nil })

	evs := h.prompt(id, "hello")
	appended, err := h.client.AppendMessages(h.ctx(), &agentdv1.AppendMessagesRequest{SessionId: id, Messages: []*agentdv1.AgentMessage{
		{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: texts("from elsewhere")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.SetLabel(h.ctx(), &agentdv1.SetLabelRequest{SessionId: id, EntryId: appended.GetEntries()[0].GetId(), Label: "mark"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.UpdateSession(h.ctx(), &agentdv1.UpdateSessionRequest{SessionId: id, Title: "renamed",
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"title"}}}); err != nil {
		t.Fatal(err)
	}
	got := recvWatch(t, st, func(ev *agentdv1.SessionWatchEvent) bool { return ev.GetSessionUpdated() != nil })

	want := []string{"run_started"}
	for _, ev := range evs {
		want = append(want, eventKind(ev))
	}
	want = append(want, "run_ended", "entries_appended", "label_changed:mark", "session_updated")
	var kinds []string
	cursors := map[string]bool{}
	for _, ev := range got {
		kinds = append(kinds, watchKind(ev))
		if ev.GetCursor() == "" || cursors[ev.GetCursor()] {
			t.Errorf("change %s has cursor %q, want a new one", watchKind(ev), ev.GetCursor())
		}
		cursors[ev.GetCursor()] = true
	}
	if strings.Join(kinds, " ") != strings.Join(want, " ") {
		t.Fatalf("the watcher saw\n  %v\nwant\n  %v", kinds, want)
	}
	for i, ev := range evs {
		if w := got[1+i].GetEvent(); w.GetSeq() != ev.GetSeq() || w.GetRunId() != ev.GetRunId() {
			t.Errorf("watched event %d is seq %d of %q, the prompt's is seq %d of %q", i, w.GetSeq(), w.GetRunId(), ev.GetSeq(), ev.GetRunId())
		}
	}
	if got := got[len(got)-1].GetSessionUpdated().GetTitle(); got != "renamed" {
		t.Errorf("session_updated shows title %q", got)
	}

	// Resuming from a cursor replays exactly what came after it.
	mid := got[len(got)-3] // the append
	again := watchSession(t, h.ctx(), watcher, id, mid.GetCursor())
	replayed := recvWatch(t, again, func(ev *agentdv1.SessionWatchEvent) bool { return ev.GetStarted() != nil })
	if k := []string{watchKind(replayed[0]), watchKind(replayed[1]), watchKind(replayed[2])}; strings.Join(k, " ") != "label_changed:mark session_updated started" {
		t.Errorf("resumed after the append: %v", k)
	}

	// Deleting the session ends the watch.
	if _, err := h.client.DeleteSession(h.ctx(), &agentdv1.DeleteSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	recvWatch(t, st, func(ev *agentdv1.SessionWatchEvent) bool { return ev.GetDeleted() != nil })
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("after deleted: %v, want the end of the stream", err)
	}
}

func TestWatchCursors(t *testing.T) {
	h := newHarness(t, agent.Options{WatchHistory: 4}, service.ServerOptions{})
	id := h.createSession(nil)
	cases := []struct {
		name, cursor string
		code         codes.Code
		reason       string
	}{
		{"malformed", "nonsense", codes.InvalidArgument, ""},
		{"ahead", "", codes.InvalidArgument, ""}, // filled in below
		{"another process", "0badc0ffee00.1", codes.OK, "cursor of another agentd process"},
		{"expired", "", codes.OK, "cursor expired"},
	}
	first := recvWatch(t, watchSession(t, h.ctx(), h.client, id, ""), func(ev *agentdv1.SessionWatchEvent) bool { return true })[0].GetCursor()
	epoch, _, _ := strings.Cut(first, ".")
	cases[1].cursor = epoch + ".999999"
	for range 6 { // more than WatchHistory changes
		if _, err := h.client.SetLabel(h.ctx(), &agentdv1.SetLabelRequest{SessionId: id, EntryId: mustEntry(t, h, id), Label: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	cases[3].cursor = first
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := watchSession(t, h.ctx(), h.client, id, tc.cursor)
			ev, err := st.Recv()
			if tc.code != codes.OK {
				wantCode(t, err, tc.code, "cursor")
				return
			}
			if err != nil || ev.GetResync().GetReason() != tc.reason || ev.GetResync().GetCursor() == "" {
				t.Fatalf("got %v, %v; want a resync for %q", ev, err, tc.reason)
			}
			if _, err := st.Recv(); !errors.Is(err, io.EOF) {
				t.Errorf("after the resync: %v, want the end of the stream", err)
			}
			// Watching from the resync's cursor works.
			live := recvWatch(t, watchSession(t, h.ctx(), h.client, id, ev.GetResync().GetCursor()), func(*agentdv1.SessionWatchEvent) bool { return true })
			if live[0].GetStarted() == nil {
				t.Errorf("from the resync's cursor: %v, want started", live[0])
			}
		})
	}
}

// mustEntry appends a message to id and returns its entry's id.
func mustEntry(t *testing.T, h *harness, id string) string {
	t.Helper()
	resp, err := h.client.AppendMessages(h.ctx(), &agentdv1.AppendMessagesRequest{SessionId: id, Messages: []*agentdv1.AgentMessage{
		{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: texts("note")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetEntries()[0].GetId()
}

func TestStalledWatcherGetsResync(t *testing.T) {
	const buffer, appends = 4, 64
	h := newHarness(t, agent.Options{WatchBuffer: buffer}, service.ServerOptions{})
	id := h.createSession(nil)
	// Small flow-control windows: a watcher that does not read stalls
	// agentd's sends after a few changes, as a slow browser would.
	watcher := secondClient(t, h, grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	st := watchSession(t, h.ctx(), watcher, id, "")
	recvWatch(t, st, func(ev *agentdv1.SessionWatchEvent) bool { return ev.GetStarted() != nil })
	big := strings.Repeat("x", 32<<10)
	for range appends {
		if _, err := h.client.AppendMessages(h.ctx(), &agentdv1.AppendMessagesRequest{SessionId: id, Messages: []*agentdv1.AgentMessage{
			{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: texts(big)}}}}}); err != nil {
			t.Fatal(err)
		}
	}
	got := recvWatch(t, st, func(ev *agentdv1.SessionWatchEvent) bool { return ev.GetResync() != nil })
	resync := got[len(got)-1].GetResync()
	if resync.GetReason() != "watcher too slow" {
		t.Fatalf("resync reason %q", resync.GetReason())
	}
	t.Logf("%d changes reached the stalled watcher before its resync (buffer %d)", len(got)-1, buffer)
	if n := len(got) - 1; n >= appends {
		t.Fatalf("the stalled watcher got all %d changes before the resync: nothing was bounded", n)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("after the resync: %v, want the end of the stream", err)
	}
	// From the resync's cursor the watcher gets the rest: together with
	// what it had, every append once.
	rest := recvWatch(t, watchSession(t, h.ctx(), watcher, id, resync.GetCursor()), func(ev *agentdv1.SessionWatchEvent) bool { return ev.GetStarted() != nil })
	seen := map[string]int{}
	for _, ev := range append(got[:len(got)-1], rest...) {
		for _, e := range ev.GetEntriesAppended().GetEntries() {
			seen[e.GetId()]++
		}
	}
	if len(seen) != appends {
		t.Errorf("saw %d distinct appends, want %d", len(seen), appends)
	}
}

func TestPendingInteractionsAcrossSessions(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	a, b := askSession(t, h, textAnswer("a done")), askSession(t, h, textAnswer("b done"))
	inbox := secondClient(t, h)
	pw, err := inbox.WatchPendingInteractions(h.ctx(), &agentdv1.WatchPendingInteractionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := pw.Recv(); err != nil || ev.GetStarted() == nil {
		t.Fatalf("first: %v, %v", ev, err)
	}
	sa, _ := startWaiting(t, h.client, h, a, "ask a")
	sb, _ := startWaiting(t, h.client, h, b, "ask b")

	list, err := inbox.ListPendingInteractions(h.ctx(), &agentdv1.ListPendingInteractionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetInteractions()); n != 2 {
		t.Fatalf("%d pending, want 2: %v", n, list.GetInteractions())
	}
	sessions := map[string]bool{}
	for _, p := range list.GetInteractions() {
		if p.GetKind() != agentdv1.PendingInteractionKind_PENDING_INTERACTION_KIND_CLIENT_TOOL || p.GetId() != "c1" || p.GetRunId() == "" ||
			p.GetDeadline() == nil || p.GetRequest().GetToolCallRequested().GetToolName() != "ask" {
			t.Errorf("pending %v", p)
		}
		sessions[p.GetSessionId()] = true
		// Answered from the inbox, with what the item names.
		if _, err := inbox.SubmitToolResult(h.ctx(), &agentdv1.SubmitToolResultRequest{SessionId: p.GetSessionId(), ToolCallId: p.GetId(), Content: texts("answered")}); err != nil {
			t.Fatal(err)
		}
	}
	if !sessions[a] || !sessions[b] {
		t.Errorf("pending of sessions %v, want %s and %s", sessions, a, b)
	}
	for _, s := range []grpc.ServerStreamingClient[agentdv1.AgentEvent]{sa, sb} {
		if _, err := drain(s); err != nil {
			t.Fatal(err)
		}
	}
	added, removed := 0, 0
	for added+removed < 4 {
		ev, err := pw.Recv()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ev.GetAdded() != nil:
			added++
		case ev.GetRemoved() != nil:
			removed++
			if added < removed {
				t.Errorf("removed before added")
			}
		}
	}
	if list, err := inbox.ListPendingInteractions(h.ctx(), &agentdv1.ListPendingInteractionsRequest{}); err != nil || len(list.GetInteractions()) != 0 {
		t.Errorf("after answering: %v, %v; want none", list.GetInteractions(), err)
	}
}

func TestWatchIsTenantScoped(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{Auth: &service.AuthConfig{Tokens: []service.TokenGrant{
		{SHA256: tokenHash("acme-token"), Tenant: "acme", Role: service.RoleUser},
		{SHA256: tokenHash("globex-token"), Tenant: "globex", Role: service.RoleUser},
	}}})
	acme, globex := as(h.ctx(), "acme-token"), as(h.ctx(), "globex-token")
	watch := func(ctx context.Context, filter map[string]string) grpc.ServerStreamingClient[agentdv1.SessionsWatchEvent] {
		st, err := h.client.WatchSessions(ctx, &agentdv1.WatchSessionsRequest{LabelFilter: filter})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := st.Recv(); err != nil || ev.GetStarted() == nil {
			t.Fatalf("first: %v, %v", ev, err)
		}
		return st
	}
	globexWatch, acmeWatch, acmeTeam := watch(globex, nil), watch(acme, nil), watch(acme, map[string]string{"team": "b"})

	mine, err := h.client.CreateSession(acme, &agentdv1.CreateSessionRequest{Labels: map[string]string{"team": "a"}, Config: askConfig(t, textAnswer("done"))})
	if err != nil {
		t.Fatal(err)
	}
	id := mine.GetSession().GetId()
	st, err := h.client.Prompt(acme, &agentdv1.PromptRequest{SessionId: id, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	recvUntil(t, st, func(ev *agentdv1.AgentEvent) bool { return ev.GetToolCallRequested() != nil })
	// Another tenant's inbox is empty; acme's has the call.
	if l, err := h.client.ListPendingInteractions(globex, &agentdv1.ListPendingInteractionsRequest{}); err != nil || len(l.GetInteractions()) != 0 {
		t.Errorf("globex's pending: %v, %v", l.GetInteractions(), err)
	}
	if l, err := h.client.ListPendingInteractions(acme, &agentdv1.ListPendingInteractionsRequest{}); err != nil || len(l.GetInteractions()) != 1 {
		t.Errorf("acme's pending: %v, %v", l.GetInteractions(), err)
	}
	if _, err := h.client.SubmitToolResult(acme, &agentdv1.SubmitToolResultRequest{SessionId: id, ToolCallId: "c1", Content: texts("ok")}); err != nil {
		t.Fatal(err)
	}
	if _, err := drain(st); err != nil {
		t.Fatal(err)
	}
	theirs, err := h.client.CreateSession(globex, &agentdv1.CreateSessionRequest{Title: "globex's"})
	if err != nil {
		t.Fatal(err)
	}

	// acme sees its session created, its run start and end; globex sees
	// only its own creation; acme's team filter matches nothing of acme's.
	var kinds []string
	for len(kinds) < 3 {
		ev, err := acmeWatch.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetSessionId() != id {
			t.Fatalf("acme's watch saw session %q", ev.GetSessionId())
		}
		switch {
		case ev.GetCreated() != nil:
			kinds = append(kinds, "created")
		case ev.GetRunState() != nil:
			kinds = append(kinds, ev.GetRunState().GetState().String())
		}
	}
	if strings.Join(kinds, " ") != "created SESSION_STATE_RUNNING SESSION_STATE_IDLE" {
		t.Errorf("acme's watch: %v", kinds)
	}
	ev, err := globexWatch.Recv()
	if err != nil || ev.GetCreated().GetId() != theirs.GetSession().GetId() {
		t.Errorf("globex's first change: %v, %v; want its own session created", ev, err)
	}
	// The team filter's first change is a session of team b, made now.
	if _, err := h.client.CreateSession(acme, &agentdv1.CreateSessionRequest{Title: "team b", Labels: map[string]string{"team": "b"}}); err != nil {
		t.Fatal(err)
	}
	if ev, err := acmeTeam.Recv(); err != nil || ev.GetCreated().GetTitle() != "team b" {
		t.Errorf("the label-filtered watch's first change: %v, %v", ev, err)
	}
}
