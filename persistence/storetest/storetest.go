package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/transcriptgen"
	"github.com/agentd/agentd/persistence"
)

// Harness adapts an engine to the suite.
type Harness struct {
	// Open returns a new, empty store. The suite closes it (through Reopen
	// or at the end of the test).
	Open func(t *testing.T) persistence.Store
	// Reopen closes s and opens the same storage again, as a restart would.
	Reopen func(t *testing.T, s persistence.Store) persistence.Store
	// CorruptPayload replaces the stored payload of one entry with raw
	// bytes, bypassing the store's checks, to simulate disk damage or a
	// buggy foreign writer.
	CorruptPayload func(t *testing.T, s persistence.Store, sessionID, entryID string, payload []byte)
}

// Run runs the whole suite as subtests of t.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"Sessions", testSessions},
		{"ListSessions", testListSessions},
		{"DeleteSession", testDeleteSession},
		{"UpdateSession", testUpdateSession},
		{"AppendOrder", testAppendOrder},
		{"AppendAtomicity", testAppendAtomicity},
		{"CallerIDs", testCallerIDs},
		{"TreeAndLeaf", testTreeAndLeaf},
		{"ContextPath", testContextPath},
		{"TreeAndLabels", testTreeAndLabels},
		{"Origin", testOrigin},
		{"TenantIsolation", testTenantIsolation},
		{"Spend", testSpend},
		{"NewRoot", testNewRoot},
		{"EntryPaging", testEntryPaging},
		{"ConcurrentAppends", testConcurrentAppends},
		{"ConcurrentReadsDuringWrites", testConcurrentReads},
		{"ReopenIdenticalBytes", testReopen},
		{"CorruptPayload", testCorrupt},
		{"ContextPathReadsOnlyTheContext", testContextPathReadsOnlyTheContext},
		{"PathSinceAnswer", testPathSinceAnswer},
		{"LongPathWithBranches", testLongPathWithBranches},
		{"Runs", testRuns},
		{"RunRecords", testRunRecords},
		{"ListRuns", testListRuns},
		{"EventLog", testEventLog},
		{"EventLogDeltas", testEventLogDeltas},
		{"EventLogReservation", testEventReservation},
		{"EventLogConcurrentRuns", testEventLogConcurrentRuns},
		{"EventRetention", testEventRetention},
		{"PageTokensBoundToTheirListing", testPageTokenBinding},
		{"Redact", testRedact},
		{"LastSeq", testLastSeq},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

func open(t *testing.T, h Harness) persistence.Store {
	t.Helper()
	s := h.Open(t)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustCreate(t *testing.T, s persistence.Store, p persistence.CreateSessionParams) *persistence.Session {
	t.Helper()
	sess, err := s.CreateSession(context.Background(), p)
	if err != nil {
		t.Fatalf("CreateSession(%+v): %v", p, err)
	}
	return sess
}

func userEntry(text string) *agentdv1.Entry {
	return &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{
		User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: text}}}}},
	}}}}
}

func mustAppend(t *testing.T, s persistence.Store, sessionID string, entries ...*agentdv1.Entry) {
	t.Helper()
	if err := s.Append(context.Background(), sessionID, entries...); err != nil {
		t.Fatalf("Append(%s, %d entries): %v", sessionID, len(entries), err)
	}
}

func ids(entries []*agentdv1.Entry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.GetId()
	}
	return out
}

func allEntries(t *testing.T, s persistence.Store, sessionID string) []*agentdv1.Entry {
	t.Helper()
	var out []*agentdv1.Entry
	token := ""
	for {
		page, err := s.Entries(context.Background(), sessionID, persistence.EntriesRequest{PageSize: persistence.MaxPageSize, PageToken: token})
		if err != nil {
			t.Fatalf("Entries(%s): %v", sessionID, err)
		}
		out = append(out, page.Entries...)
		if page.NextPageToken == "" {
			return out
		}
		token = page.NextPageToken
	}
}

// wantErr checks err matches kind and, when it is a *[persistence.Error],
// names the given session and entry.
func wantErr(t *testing.T, what string, err, kind error, sessionID, entryID string) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("%s: got error %v, want %v", what, err, kind)
	}
	var pe *persistence.Error
	if !errors.As(err, &pe) {
		t.Fatalf("%s: error %v is not a *persistence.Error", what, err)
	}
	if pe.SessionID != sessionID || pe.EntryID != entryID {
		t.Fatalf("%s: error names session %q entry %q, want %q %q (%v)", what, pe.SessionID, pe.EntryID, sessionID, entryID, err)
	}
}

func testSessions(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	cfg := &agentdv1.SessionConfig{
		Model:             &agentdv1.ModelRef{Provider: "faux", Id: "faux-1"},
		SystemPrompt:      "be brief",
		Tools:             []*agentdv1.Tool{{Name: "read_file", Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_SERVER}},
		ApprovalTimeout:   durationpb.New(90e9),
		ThinkingLevel:     agentdv1.ThinkingLevel_THINKING_LEVEL_HIGH,
		WorkspaceRoot:     "/tmp/ws",
		MaxTurns:          7,
		ToolExecution:     agentdv1.ToolExecutionMode_TOOL_EXECUTION_MODE_SEQUENTIAL,
		ClientToolTimeout: durationpb.New(5e9),
	}
	created := mustCreate(t, s, persistence.CreateSessionParams{Title: "first", Labels: map[string]string{"team": "a", "env": "dev"}, Config: cfg})
	if created.ID == "" {
		t.Fatal("CreateSession assigned no id")
	}
	got, err := s.GetSession(ctx, created.ID)
	if err != nil {
		t.Fatalf("GetSession: %v", err)
	}
	if d := diff(created, got); d != "" {
		t.Fatalf("GetSession differs from CreateSession: %s", d)
	}
	if !proto.Equal(got.Config, cfg) || got.Title != "first" || got.Labels["team"] != "a" || got.LeafEntryID != "" {
		t.Fatalf("GetSession = %+v, want the created fields", got)
	}
	if got.CreateTime.IsZero() || got.UpdateTime.Before(got.CreateTime) {
		t.Fatalf("times: create %v update %v", got.CreateTime, got.UpdateTime)
	}

	given := mustCreate(t, s, persistence.CreateSessionParams{ID: "my-session"})
	if given.ID != "my-session" || given.Config == nil || given.Labels == nil {
		t.Fatalf("CreateSession with id = %+v", given)
	}
	_, err = s.CreateSession(ctx, persistence.CreateSessionParams{ID: "my-session"})
	wantErr(t, "duplicate session id", err, persistence.ErrConflict, "my-session", "")

	_, err = s.GetSession(ctx, "nope")
	wantErr(t, "GetSession(unknown)", err, persistence.ErrNotFound, "nope", "")
	for name, call := range map[string]func() error{
		"Append":    func() error { return s.Append(ctx, "nope", userEntry("x")) },
		"SetLeaf":   func() error { return s.SetLeaf(ctx, "nope", "e") },
		"Path":      func() error { _, err := s.Path(ctx, "nope"); return err },
		"Entries":   func() error { _, err := s.Entries(ctx, "nope", persistence.EntriesRequest{}); return err },
		"GetEntry":  func() error { _, err := s.GetEntry(ctx, "nope", "e"); return err },
		"StartRun":  func() error { return s.StartRun(ctx, "nope", "r", nil) },
		"DeleteSes": func() error { return s.DeleteSession(ctx, "nope") },
	} {
		wantErr(t, name+"(unknown session)", call(), persistence.ErrNotFound, "nope", "")
	}
	path, err := s.Path(ctx, given.ID)
	if err != nil || len(path) != 0 {
		t.Fatalf("Path(empty session) = %v, %v; want empty", path, err)
	}
	_, err = s.GetEntry(ctx, given.ID, "missing")
	wantErr(t, "GetEntry(unknown entry)", err, persistence.ErrNotFound, given.ID, "missing")
}

func testListSessions(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	var want []string // newest first
	for i := range 7 {
		labels := map[string]string{"parity": []string{"even", "odd"}[i%2], "n": fmt.Sprint(i)}
		if i%3 == 0 {
			labels["third"] = "yes"
		}
		sess := mustCreate(t, s, persistence.CreateSessionParams{Title: fmt.Sprint(i), Labels: labels})
		want = append([]string{sess.ID}, want...)
	}
	tests := []struct {
		name   string
		size   int
		filter map[string]string
		want   []string
	}{
		{"all in pages of 3", 3, nil, want},
		{"default size", 0, nil, want},
		{"one page exactly", 7, nil, want},
		{"filter one label", 2, map[string]string{"parity": "even"}, []string{want[0], want[2], want[4], want[6]}},
		{"filter every label", 1, map[string]string{"parity": "even", "third": "yes"}, []string{want[0], want[6]}},
		{"filter no match", 5, map[string]string{"parity": "prime"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			token, pages := "", 0
			for {
				page, err := s.ListSessions(ctx, persistence.ListSessionsRequest{PageSize: tc.size, PageToken: token, LabelFilter: tc.filter})
				if err != nil {
					t.Fatalf("ListSessions: %v", err)
				}
				pages++
				if tc.size > 0 && len(page.Sessions) > tc.size {
					t.Fatalf("page of %d sessions, size %d", len(page.Sessions), tc.size)
				}
				for _, sess := range page.Sessions {
					got = append(got, sess.ID)
					for k, v := range tc.filter {
						if sess.Labels[k] != v {
							t.Fatalf("session %s labels %v do not match filter %v", sess.ID, sess.Labels, tc.filter)
						}
					}
					if sess.Labels["n"] != sess.Title {
						t.Fatalf("session %s: labels %v not loaded with it (title %s)", sess.ID, sess.Labels, sess.Title)
					}
				}
				if page.NextPageToken == "" {
					break
				}
				token = page.NextPageToken
			}
			if d := diff(tc.want, got); d != "" {
				t.Fatalf("listed ids: %s", d)
			}
			if tc.size > 0 && pages > len(tc.want)/tc.size+1 {
				t.Fatalf("%d pages for %d sessions of page size %d", pages, len(tc.want), tc.size)
			}
		})
	}
	_, err := s.ListSessions(ctx, persistence.ListSessionsRequest{PageToken: "garbage!"})
	if !errors.Is(err, persistence.ErrInvalid) {
		t.Fatalf("bad page token: %v, want ErrInvalid", err)
	}
	_, err = s.ListSessions(ctx, persistence.ListSessionsRequest{PageSize: -1})
	if !errors.Is(err, persistence.ErrInvalid) {
		t.Fatalf("negative page size: %v, want ErrInvalid", err)
	}
}

func testDeleteSession(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	doomed := mustCreate(t, s, persistence.CreateSessionParams{Labels: map[string]string{"k": "v"}})
	kept := mustCreate(t, s, persistence.CreateSessionParams{Labels: map[string]string{"k": "v"}})
	mustAppend(t, s, doomed.ID, userEntry("a"), userEntry("b"))
	mustAppend(t, s, kept.ID, userEntry("c"))
	if err := s.StartRun(ctx, doomed.ID, "run-doomed", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSession(ctx, doomed.ID); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	_, err := s.GetSession(ctx, doomed.ID)
	wantErr(t, "GetSession after delete", err, persistence.ErrNotFound, doomed.ID, "")
	wantErr(t, "Append after delete", s.Append(ctx, doomed.ID, userEntry("late")), persistence.ErrNotFound, doomed.ID, "")
	_, err = s.Path(ctx, doomed.ID)
	wantErr(t, "Path after delete", err, persistence.ErrNotFound, doomed.ID, "")
	wantErr(t, "second delete", s.DeleteSession(ctx, doomed.ID), persistence.ErrNotFound, doomed.ID, "")
	if _, err := s.GetRun(ctx, "run-doomed"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("run of deleted session: %v, want ErrNotFound", err)
	}
	page, err := s.ListSessions(ctx, persistence.ListSessionsRequest{LabelFilter: map[string]string{"k": "v"}})
	if err != nil || len(page.Sessions) != 1 || page.Sessions[0].ID != kept.ID {
		t.Fatalf("ListSessions after delete = %v, %v; want only %s", page, err, kept.ID)
	}
	if got := allEntries(t, s, kept.ID); len(got) != 1 {
		t.Fatalf("other session has %d entries after delete, want 1", len(got))
	}
	// The id is free again.
	mustCreate(t, s, persistence.CreateSessionParams{ID: doomed.ID})
	if got := allEntries(t, s, doomed.ID); len(got) != 0 {
		t.Fatalf("recreated session has %d old entries", len(got))
	}
}

func testAppendOrder(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	gen := transcriptgen.New(1)
	var written []*agentdv1.Entry
	for range 4 {
		e := gen.Next()
		mustAppend(t, s, sess.ID, e)
		written = append(written, e)
	}
	batch := []*agentdv1.Entry{gen.Next(), gen.Next(), gen.Next()}
	mustAppend(t, s, sess.ID, batch...)
	written = append(written, batch...)

	seen := map[string]bool{}
	for i, e := range written {
		if e.Id == "" || seen[e.Id] {
			t.Fatalf("entry %d: id %q empty or repeated", i, e.Id)
		}
		seen[e.Id] = true
		wantParent := ""
		if i > 0 {
			wantParent = written[i-1].Id
		}
		if e.ParentId != wantParent {
			t.Fatalf("entry %d: parent %q, want %q", i, e.ParentId, wantParent)
		}
		if e.Time == nil {
			t.Fatalf("entry %d: time not set", i)
		}
	}
	got, err := s.GetSession(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.LeafEntryID != written[len(written)-1].Id {
		t.Fatalf("leaf %q, want %q", got.LeafEntryID, written[len(written)-1].Id)
	}
	if got.UpdateTime.Before(sess.UpdateTime) {
		t.Fatalf("update time went back: %v < %v", got.UpdateTime, sess.UpdateTime)
	}
	path, err := s.Path(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(written, path); d != "" {
		t.Fatalf("Path differs from what was appended: %s", d)
	}
	if d := diff(written, allEntries(t, s, sess.ID)); d != "" {
		t.Fatalf("Entries differs from what was appended: %s", d)
	}
	for _, e := range written {
		one, err := s.GetEntry(ctx, sess.ID, e.Id)
		if err != nil || !proto.Equal(one, e) {
			t.Fatalf("GetEntry(%s) = %v, %v", e.Id, one, err)
		}
	}
	// A given time is kept.
	at := timestamppb.New(sess.CreateTime.Add(-1e9))
	e := userEntry("timed")
	e.Time = at
	mustAppend(t, s, sess.ID, e)
	if one, err := s.GetEntry(ctx, sess.ID, e.Id); err != nil || !proto.Equal(one.Time, at) {
		t.Fatalf("given time not kept: %v, %v", one, err)
	}
}

func testAppendAtomicity(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	other := mustCreate(t, s, persistence.CreateSessionParams{})
	mustAppend(t, s, other.ID, userEntry("elsewhere"))
	otherLeaf := other.ID
	if o, err := s.GetSession(ctx, other.ID); err == nil {
		otherLeaf = o.LeafEntryID
	}

	tests := []struct {
		name    string
		batch   func(existing string) []*agentdv1.Entry
		kind    error
		entryID string // the entry the error must name; "" for none
	}{
		{"payload missing in third entry", func(string) []*agentdv1.Entry {
			return []*agentdv1.Entry{userEntry("1"), userEntry("2"), {Id: "bare"}}
		}, persistence.ErrInvalid, "bare"},
		{"message kind missing", func(string) []*agentdv1.Entry {
			return []*agentdv1.Entry{userEntry("1"), {Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{}}}}
		}, persistence.ErrInvalid, ""},
		{"parent from another session", func(string) []*agentdv1.Entry {
			e := userEntry("1")
			e.ParentId = otherLeaf
			return []*agentdv1.Entry{e, userEntry("2")}
		}, persistence.ErrInvalid, otherLeaf},
		{"parent does not exist", func(string) []*agentdv1.Entry {
			e := userEntry("1")
			e.ParentId = "ghost"
			return []*agentdv1.Entry{e}
		}, persistence.ErrInvalid, "ghost"},
		{"later entry names another parent", func(existing string) []*agentdv1.Entry {
			e := userEntry("2")
			e.Id, e.ParentId = "second", existing
			return []*agentdv1.Entry{userEntry("1"), e}
		}, persistence.ErrInvalid, "second"},
		{"duplicate id inside the batch", func(string) []*agentdv1.Entry {
			a, b := userEntry("1"), userEntry("2")
			a.Id, b.Id = "twin", "twin"
			return []*agentdv1.Entry{userEntry("0"), a, b}
		}, persistence.ErrConflict, "twin"},
		{"id already stored", func(existing string) []*agentdv1.Entry {
			e := userEntry("2")
			e.Id = existing
			return []*agentdv1.Entry{userEntry("1"), e}
		}, persistence.ErrConflict, "existing-id"},
		{"nil entry", func(string) []*agentdv1.Entry { return []*agentdv1.Entry{userEntry("1"), nil} }, persistence.ErrInvalid, ""},
		{"empty batch", func(string) []*agentdv1.Entry { return nil }, persistence.ErrInvalid, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sess := mustCreate(t, s, persistence.CreateSessionParams{})
			first := userEntry("first")
			first.Id = "existing-id"
			mustAppend(t, s, sess.ID, first)
			before, err := s.GetSession(ctx, sess.ID)
			if err != nil {
				t.Fatal(err)
			}
			batch := tc.batch(first.Id)
			var snapshot []*agentdv1.Entry
			for _, e := range batch {
				snapshot = append(snapshot, proto.CloneOf(e))
			}
			err = s.Append(ctx, sess.ID, batch...)
			wantErr(t, "Append", err, tc.kind, sess.ID, tc.entryID)
			if d := diff(snapshot, batch); d != "" {
				t.Fatalf("failed Append changed its input: %s", d)
			}
			if got := allEntries(t, s, sess.ID); len(got) != 1 {
				t.Fatalf("failed batch left %d entries, want the 1 from before: %v", len(got), ids(got))
			}
			after, err := s.GetSession(ctx, sess.ID)
			if err != nil {
				t.Fatal(err)
			}
			if after.LeafEntryID != before.LeafEntryID {
				t.Fatalf("failed batch moved the leaf from %q to %q", before.LeafEntryID, after.LeafEntryID)
			}
			// The session still works.
			mustAppend(t, s, sess.ID, userEntry("after"))
			if got := allEntries(t, s, sess.ID); len(got) != 2 {
				t.Fatalf("append after failure: %d entries, want 2", len(got))
			}
		})
	}
	if got := allEntries(t, s, other.ID); len(got) != 1 {
		t.Fatalf("other session has %d entries, want 1", len(got))
	}
}

func testCallerIDs(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	a := mustCreate(t, s, persistence.CreateSessionParams{})
	b := mustCreate(t, s, persistence.CreateSessionParams{})
	e := userEntry("x")
	e.Id = "fixed"
	mustAppend(t, s, a.ID, e)
	same := userEntry("y")
	same.Id = "fixed"
	mustAppend(t, s, b.ID, same) // ids are unique per session only
	for _, sid := range []string{a.ID, b.ID} {
		got, err := s.GetEntry(ctx, sid, "fixed")
		if err != nil {
			t.Fatalf("GetEntry(%s, fixed): %v", sid, err)
		}
		want := map[string]string{a.ID: "x", b.ID: "y"}[sid]
		if text := got.GetMessage().GetUser().GetContent()[0].GetText().GetText(); text != want {
			t.Fatalf("session %s entry fixed holds %q, want %q", sid, text, want)
		}
	}
	long := userEntry("z")
	long.Id = string(make([]byte, persistence.MaxIDLength+1))
	if err := s.Append(ctx, a.ID, long); !errors.Is(err, persistence.ErrInvalid) {
		t.Fatalf("over-long id: %v, want ErrInvalid", err)
	}
}

func testTreeAndLeaf(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	other := mustCreate(t, s, persistence.CreateSessionParams{})
	mk := func(id, parent string) *agentdv1.Entry {
		e := userEntry(id)
		e.Id, e.ParentId = id, parent
		return e
	}
	mustAppend(t, s, sess.ID, mk("a", ""), mk("b", ""), mk("c", ""))
	mustAppend(t, s, sess.ID, mk("d", "a"), mk("e", "")) // branch below a
	mustAppend(t, s, other.ID, mk("x", ""))

	pathIDs := func(to string) []string {
		t.Helper()
		var p []*agentdv1.Entry
		var err error
		if to == "" {
			p, err = s.Path(ctx, sess.ID)
		} else {
			p, err = s.PathTo(ctx, sess.ID, to)
		}
		if err != nil {
			t.Fatalf("path to %q: %v", to, err)
		}
		return ids(p)
	}
	leaf := func() string {
		t.Helper()
		got, err := s.GetSession(ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.LeafEntryID
	}
	steps := []struct {
		name     string
		act      func() error
		wantErr  error
		wantLeaf string
		wantPath []string
	}{
		{"branch moved the leaf", nil, nil, "e", []string{"a", "d", "e"}},
		{"leaf to the old branch", func() error { return s.SetLeaf(ctx, sess.ID, "c") }, nil, "c", []string{"a", "b", "c"}},
		{"append continues the selected branch", func() error { return s.Append(ctx, sess.ID, mk("f", "")) }, nil, "f", []string{"a", "b", "c", "f"}},
		{"leaf to an inner entry", func() error { return s.SetLeaf(ctx, sess.ID, "a") }, nil, "a", []string{"a"}},
		{"unknown entry", func() error { return s.SetLeaf(ctx, sess.ID, "ghost") }, persistence.ErrNotFound, "a", []string{"a"}},
		{"entry of another session", func() error { return s.SetLeaf(ctx, sess.ID, "x") }, persistence.ErrNotFound, "a", []string{"a"}},
		{"branch from the root again", func() error { return s.Append(ctx, sess.ID, mk("g", "a")) }, nil, "g", []string{"a", "g"}},
	}
	for _, st := range steps {
		if st.act != nil {
			if err := st.act(); !errors.Is(err, st.wantErr) || (err != nil) != (st.wantErr != nil) {
				t.Fatalf("%s: error %v, want %v", st.name, err, st.wantErr)
			}
		}
		if got := leaf(); got != st.wantLeaf {
			t.Fatalf("%s: leaf %q, want %q", st.name, got, st.wantLeaf)
		}
		if d := diff(st.wantPath, pathIDs("")); d != "" {
			t.Fatalf("%s: path: %s", st.name, d)
		}
	}
	if d := diff([]string{"a", "d", "e"}, pathIDs("e")); d != "" {
		t.Fatalf("PathTo(e): %s", d)
	}
	_, err := s.PathTo(ctx, sess.ID, "x")
	wantErr(t, "PathTo(entry of another session)", err, persistence.ErrNotFound, sess.ID, "x")
	if d := diff([]string{"a", "b", "c", "d", "e", "f", "g"}, ids(allEntries(t, s, sess.ID))); d != "" {
		t.Fatalf("Entries keeps every branch in append order: %s", d)
	}
}

func testEntryPaging(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	want := transcriptgen.Transcript(2, 25)
	mustAppend(t, s, sess.ID, want...)
	tests := []struct {
		size      int
		wantSizes []int
	}{
		{10, []int{10, 10, 5}},
		{5, []int{5, 5, 5, 5, 5}},
		{25, []int{25}},
		{0, []int{25}},
		{1000, []int{25}},
		{persistence.MaxPageSize + 50, []int{25}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			var got []*agentdv1.Entry
			var sizes []int
			token := ""
			for {
				page, err := s.Entries(ctx, sess.ID, persistence.EntriesRequest{PageSize: tc.size, PageToken: token})
				if err != nil {
					t.Fatal(err)
				}
				sizes = append(sizes, len(page.Entries))
				got = append(got, page.Entries...)
				if page.NextPageToken == "" {
					break
				}
				token = page.NextPageToken
			}
			if d := diff(tc.wantSizes, sizes); d != "" {
				t.Fatalf("page sizes: %s", d)
			}
			if d := diff(want, got); d != "" {
				t.Fatalf("paged entries: %s", d)
			}
		})
	}
	for _, bad := range []persistence.EntriesRequest{{PageToken: "not-a-token"}, {PageSize: -3}} {
		if _, err := s.Entries(ctx, sess.ID, bad); !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("Entries(%+v): %v, want ErrInvalid", bad, err)
		}
	}
}

func testConcurrentAppends(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	const sessions, perSession = 6, 30
	want := make([][]*agentdv1.Entry, sessions)
	sids := make([]string, sessions)
	for i := range sessions {
		sids[i] = mustCreate(t, s, persistence.CreateSessionParams{}).ID
		want[i] = transcriptgen.Transcript(uint64(100+i), perSession)
	}
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	start := make(chan struct{})
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for j, e := range want[i] {
				if err := s.Append(ctx, sids[i], e); err != nil {
					errs <- fmt.Errorf("session %d append %d: %w", i, j, err)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, sid := range sids {
		path, err := s.Path(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		if d := diff(want[i], path); d != "" {
			t.Fatalf("session %d path: %s", i, d)
		}
	}
}

func testConcurrentReads(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	want := transcriptgen.Transcript(3, 60)
	done := make(chan struct{})
	firstWritten := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for i, e := range want {
			if err := s.Append(ctx, sess.ID, e); err != nil {
				errs <- fmt.Errorf("append %d: %w", i, err)
				return
			}
			if i == 0 {
				close(firstWritten)
			}
		}
	}()
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-firstWritten
			last := 0
			for finished := false; !finished; {
				select {
				case <-done:
					finished = true // one more read after the writer is done
				default:
				}
				var got []*agentdv1.Entry
				var err error
				if r%2 == 0 {
					got, err = s.Path(ctx, sess.ID)
				} else {
					var page *persistence.EntryPage
					page, err = s.Entries(ctx, sess.ID, persistence.EntriesRequest{PageSize: persistence.MaxPageSize})
					if page != nil {
						got = page.Entries
					}
				}
				if err != nil {
					errs <- fmt.Errorf("reader %d: %w", r, err)
					return
				}
				if len(got) < last || len(got) > len(want) {
					errs <- fmt.Errorf("reader %d: saw %d entries after %d (of %d)", r, len(got), last, len(want))
					return
				}
				last = len(got)
				for i, e := range got {
					if !proto.Equal(e, want[i]) {
						errs <- fmt.Errorf("reader %d: entry %d differs from what was written", r, i)
						return
					}
				}
			}
			if last != len(want) {
				errs <- fmt.Errorf("reader %d: final read saw %d entries, want %d", r, last, len(want))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func summaryEntry(firstKept string) *agentdv1.Entry {
	return &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_CompactionSummary{
		CompactionSummary: &agentdv1.CompactionSummary{Summary: "s", FirstKeptEntryId: firstKept}}}}}
}

func testContextPath(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	check := func(sessionID, want string) {
		t.Helper()
		got, err := s.ContextPath(ctx, sessionID)
		if err != nil {
			t.Fatal(err)
		}
		path, err := s.Path(ctx, sessionID)
		if err != nil {
			t.Fatal(err)
		}
		if g, p := strings.Join(ids(got), " "), strings.Join(ids(path[persistence.ContextStart(path):]), " "); g != p || g != want {
			t.Fatalf("ContextPath = %q, Path from ContextStart = %q, want %q", g, p, want)
		}
	}
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	check(sess.ID, "")
	e := func(id string) *agentdv1.Entry { x := userEntry(id); x.Id = id; return x }
	mustAppend(t, s, sess.ID, e("a"), e("b"), e("c"))
	check(sess.ID, "a b c")
	s1 := summaryEntry("b")
	s1.Id = "s1"
	mustAppend(t, s, sess.ID, s1, e("d"))
	check(sess.ID, "b c s1 d")
	// A later summary wins; one naming a missing entry starts at itself.
	s2 := summaryEntry("nope")
	s2.Id = "s2"
	mustAppend(t, s, sess.ID, e("e"), s2, e("f"))
	check(sess.ID, "s2 f")
	s3 := summaryEntry("d")
	s3.Id = "s3"
	mustAppend(t, s, sess.ID, s3)
	check(sess.ID, "d e s2 f s3")
	// A summary on another branch does not count.
	if err := s.SetLeaf(ctx, sess.ID, "c"); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, sess.ID, e("g"))
	check(sess.ID, "a b c g")
}

func testTreeAndLabels(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	entries := transcriptgen.Transcript(9, 5)
	mustAppend(t, s, sess.ID, entries...)
	// A branch from the second entry, and labels: set, replaced, cleared.
	branch := userEntry("another try")
	branch.ParentId = entries[1].GetId()
	mustAppend(t, s, sess.ID, branch)
	label := func(target, text string) *agentdv1.Entry {
		return &agentdv1.Entry{Payload: &agentdv1.Entry_Label{Label: &agentdv1.Label{TargetEntryId: target, Label: text}}}
	}
	mustAppend(t, s, sess.ID, label(entries[0].GetId(), "start"), label(entries[2].GetId(), "first"), label(entries[2].GetId(), "second"),
		label(branch.GetId(), "gone"), label(branch.GetId(), ""))
	all := allEntries(t, s, sess.ID)
	var nodes []persistence.TreeNode
	token := ""
	for {
		page, err := s.Tree(ctx, sess.ID, persistence.EntriesRequest{PageSize: 4, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, page.Nodes...)
		if token = page.NextPageToken; token == "" {
			break
		}
	}
	if len(nodes) != len(all) {
		t.Fatalf("tree has %d nodes, the session %d entries", len(nodes), len(all))
	}
	for i, e := range all {
		kind, _ := persistence.EntryKind(e)
		n := nodes[i]
		if n.ID != e.GetId() || n.ParentID != e.GetParentId() || n.Kind != kind || n.Preview != persistence.Preview(e) || !n.Time.Equal(e.GetTime().AsTime()) {
			t.Fatalf("node %d = %+v; want the entry %v", i, n, e)
		}
	}
	labels, err := s.Labels(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(labels) != 2 || labels[entries[0].GetId()] != "start" || labels[entries[2].GetId()] != "second" {
		t.Fatalf("labels %v", labels)
	}
	if _, err := s.Tree(ctx, "missing", persistence.EntriesRequest{}); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("Tree of a missing session: %v", err)
	}
}

func testNewRoot(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	first := userEntry("first")
	mustAppend(t, s, sess.ID, first, userEntry("second"))
	if err := s.SetLeaf(ctx, sess.ID, ""); err != nil {
		t.Fatal(err)
	}
	if path, err := s.Path(ctx, sess.ID); err != nil || len(path) != 0 {
		t.Fatalf("path before the first entry: %v, %v", path, err)
	}
	root := userEntry("first, edited")
	mustAppend(t, s, sess.ID, root)
	if root.GetParentId() != "" {
		t.Fatalf("the new entry hangs below %q; want a new root", root.GetParentId())
	}
	path, err := s.Path(ctx, sess.ID)
	if err != nil || len(path) != 1 || path[0].GetId() != root.GetId() {
		t.Fatalf("path of the new root: %v, %v", path, err)
	}
	if old, err := s.PathTo(ctx, sess.ID, first.GetId()); err != nil || len(old) != 1 {
		t.Fatalf("the old root: %v, %v", old, err)
	}
	if got, err := s.GetSession(ctx, sess.ID); err != nil || got.LeafEntryID != root.GetId() {
		t.Fatalf("leaf %q, %v", got.LeafEntryID, err)
	}
}

func testOrigin(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	parent := mustCreate(t, s, persistence.CreateSessionParams{})
	origin := persistence.Origin{SessionID: parent.ID, EntryID: "e7"}
	fork := mustCreate(t, s, persistence.CreateSessionParams{Origin: origin, Labels: map[string]string{"k": "v"}})
	mustCreate(t, s, persistence.CreateSessionParams{Labels: map[string]string{"k": "v"}})
	if got, err := s.GetSession(ctx, fork.ID); err != nil || got.Origin != origin || fork.Origin != origin {
		t.Fatalf("origin = %+v (created %+v), %v; want %+v", got.Origin, fork.Origin, err, origin)
	}
	if got, err := s.GetSession(ctx, parent.ID); err != nil || got.Origin != (persistence.Origin{}) {
		t.Fatalf("a created session has origin %+v, %v", got.Origin, err)
	}
	page, err := s.ListSessions(ctx, persistence.ListSessionsRequest{OriginSessionID: parent.ID, LabelFilter: map[string]string{"k": "v"}})
	if err != nil || len(page.Sessions) != 1 || page.Sessions[0].ID != fork.ID {
		t.Fatalf("ListSessions by origin: %+v, %v", page, err)
	}
	// A page token of the unfiltered listing is refused by the origin
	// listing: tokens are bound to their filters.
	page, err = s.ListSessions(ctx, persistence.ListSessionsRequest{PageSize: 1})
	if err != nil || page.NextPageToken == "" {
		t.Fatalf("first page: %+v, %v", page, err)
	}
	_, err = s.ListSessions(ctx, persistence.ListSessionsRequest{OriginSessionID: parent.ID, PageToken: page.NextPageToken})
	wantErr(t, "a token of another listing", err, persistence.ErrInvalid, "", "")

	// A subagent's origin names the parent's run, tool call and profile,
	// through a restart; the origin listing finds forks and subagents.
	sub := persistence.Origin{SessionID: parent.ID, RunID: "run-1", ToolCallID: "call-1", Profile: "researcher"}
	child := mustCreate(t, s, persistence.CreateSessionParams{ID: "sub-1", Origin: sub, Tenant: "t1"})
	if child.Origin != sub {
		t.Fatalf("created subagent origin %+v, want %+v", child.Origin, sub)
	}
	s = h.Reopen(t, s)
	t.Cleanup(func() { _ = s.Close() })
	for _, id := range []string{child.ID, fork.ID} {
		want := map[string]persistence.Origin{child.ID: sub, fork.ID: origin}[id]
		if got, err := s.GetSession(ctx, id); err != nil || got.Origin != want {
			t.Fatalf("origin of %s after reopening = %+v, %v; want %+v", id, got.Origin, err, want)
		}
	}
	page, err = s.ListSessions(ctx, persistence.ListSessionsRequest{OriginSessionID: parent.ID, AllTenants: true})
	if err != nil || len(page.Sessions) != 2 || page.Sessions[0].ID != child.ID || page.Sessions[0].Origin != sub || page.Sessions[1].ID != fork.ID {
		t.Fatalf("ListSessions by origin with a subagent: %+v, %v", page, err)
	}
}

// testTenantIsolation: a session keeps its tenant through reopening, and
// listings show one tenant's sessions (the zero request: those of no
// tenant), all of them only when asked, with page tokens bound to the
// tenant.
func testTenantIsolation(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	byTenant := map[string][]string{}
	for i, tenant := range []string{"acme", "globex", "", "acme", "globex", "acme"} {
		sess := mustCreate(t, s, persistence.CreateSessionParams{Tenant: tenant, Labels: map[string]string{"n": strconv.Itoa(i)}})
		if sess.Tenant != tenant {
			t.Fatalf("created session has tenant %q, want %q", sess.Tenant, tenant)
		}
		byTenant[tenant] = append(byTenant[tenant], sess.ID)
	}
	if _, err := s.CreateSession(ctx, persistence.CreateSessionParams{Tenant: strings.Repeat("t", persistence.MaxIDLength+1)}); !errors.Is(err, persistence.ErrInvalid) {
		t.Fatalf("an overlong tenant: %v, want ErrInvalid", err)
	}
	s = h.Reopen(t, s)
	t.Cleanup(func() { _ = s.Close() })
	for tenant, want := range byTenant {
		for _, id := range want {
			got, err := s.GetSession(ctx, id)
			if err != nil {
				t.Fatalf("GetSession(%s) after reopen: %v", id, err)
			}
			if got.Tenant != tenant {
				t.Fatalf("GetSession(%s) after reopen: tenant %q, want %q", id, got.Tenant, tenant)
			}
		}
		var listed []string
		token := ""
		for {
			page, err := s.ListSessions(ctx, persistence.ListSessionsRequest{Tenant: tenant, PageSize: 2, PageToken: token})
			if err != nil {
				t.Fatalf("ListSessions(tenant %q): %v", tenant, err)
			}
			for _, sess := range page.Sessions {
				listed = append(listed, sess.ID)
				if sess.Tenant != tenant {
					t.Fatalf("ListSessions(tenant %q) returned a session of tenant %q", tenant, sess.Tenant)
				}
			}
			if page.NextPageToken == "" {
				break
			}
			if tenant == "acme" && token == "" {
				// A token of one tenant's listing does not page another's.
				_, err := s.ListSessions(ctx, persistence.ListSessionsRequest{Tenant: "globex", PageToken: page.NextPageToken})
				wantErr(t, "a token of another tenant's listing", err, persistence.ErrInvalid, "", "")
			}
			token = page.NextPageToken
		}
		slices.Sort(listed)
		slices.Sort(want)
		if !slices.Equal(listed, want) {
			t.Fatalf("tenant %q lists %v, want %v", tenant, listed, want)
		}
	}
	page, err := s.ListSessions(ctx, persistence.ListSessionsRequest{AllTenants: true, LabelFilter: map[string]string{"n": "3"}})
	if err != nil || len(page.Sessions) != 1 || page.Sessions[0].Tenant != "acme" {
		t.Fatalf("ListSessions(all tenants, n=3): %+v, %v", page, err)
	}
	page, err = s.ListSessions(ctx, persistence.ListSessionsRequest{AllTenants: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Sessions) != 6 {
		t.Fatalf("ListSessions(all tenants): %d sessions, want 6", len(page.Sessions))
	}
}

// testSpend: what assistant messages cost is summed per session (every
// branch) and per tenant since a time, survives a reopen, and a deleted
// session's spending stays its tenant's.
func testSpend(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	answer := func(tokens int64, cost float64) *agentdv1.Entry {
		return &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{
			Assistant: &agentdv1.AssistantMessage{Usage: &agentdv1.Usage{TotalTokens: tokens, Cost: &agentdv1.Cost{Total: cost}}}}}}}
	}
	start := time.Now().Add(-time.Second)
	a1 := mustCreate(t, s, persistence.CreateSessionParams{Tenant: "acme"})
	mustAppend(t, s, a1.ID, userEntry("q"), answer(10, 0.5))
	branchFrom := allEntries(t, s, a1.ID)[0].GetId()
	branch := answer(5, 0.25)
	branch.ParentId = branchFrom
	mustAppend(t, s, a1.ID, branch, answer(0, 0)) // an answer that used nothing counts nothing
	a2 := mustCreate(t, s, persistence.CreateSessionParams{Tenant: "acme"})
	mustAppend(t, s, a2.ID, answer(1, 1))
	g := mustCreate(t, s, persistence.CreateSessionParams{Tenant: "globex"})
	mustAppend(t, s, g.ID, answer(100, 2))

	check := func(when string) {
		t.Helper()
		if got, err := s.SessionSpend(ctx, a1.ID); err != nil || got != (persistence.Spend{Tokens: 15, CostUSD: 0.75}) {
			t.Fatalf("%s: SessionSpend(a1) = %+v, %v; want 15 tokens, $0.75 (both branches)", when, got, err)
		}
		if got, err := s.TenantSpend(ctx, "acme", start); err != nil || got != (persistence.Spend{Tokens: 16, CostUSD: 1.75}) {
			t.Fatalf("%s: TenantSpend(acme) = %+v, %v; want 16 tokens, $1.75", when, got, err)
		}
		if got, err := s.TenantSpend(ctx, "globex", start); err != nil || got.Tokens != 100 {
			t.Fatalf("%s: TenantSpend(globex) = %+v, %v", when, got, err)
		}
		if got, err := s.TenantSpend(ctx, "acme", time.Now().Add(time.Hour)); err != nil || got != (persistence.Spend{}) {
			t.Fatalf("%s: TenantSpend(acme, from an hour on) = %+v, %v; want nothing", when, got, err)
		}
	}
	check("before reopen")
	s = h.Reopen(t, s)
	t.Cleanup(func() { _ = s.Close() })
	check("after reopen")
	if err := s.DeleteSession(ctx, a2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SessionSpend(ctx, a2.ID); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("SessionSpend of a deleted session: %v, want ErrNotFound", err)
	}
	check("after deleting a2")
}

func testUpdateSession(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	sess := mustCreate(t, s, persistence.CreateSessionParams{Title: "old", Labels: map[string]string{"team": "a", "env": "dev"},
		Config: &agentdv1.SessionConfig{SystemPrompt: "old prompt", MaxTurns: 3}})
	title := "new"
	got, err := s.UpdateSession(ctx, sess.ID, persistence.SessionUpdate{Title: &title})
	if err != nil {
		t.Fatal(err)
	}
	if got.Title != "new" || got.Config.GetSystemPrompt() != "old prompt" || got.Labels["team"] != "a" || got.UpdateTime.Before(sess.UpdateTime) {
		t.Fatalf("after a title update: %+v", got)
	}
	got, err = s.UpdateSession(ctx, sess.ID, persistence.SessionUpdate{
		Config: &agentdv1.SessionConfig{SystemPrompt: "new prompt"}, Labels: map[string]string{"team": "b"}, SetLabels: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Title != "new" || got.Config.GetSystemPrompt() != "new prompt" || got.Config.GetMaxTurns() != 0 || len(got.Labels) != 1 || got.Labels["team"] != "b" {
		t.Fatalf("after a config and labels update: %+v", got)
	}
	again, err := s.GetSession(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(again.Config, got.Config) || again.Title != got.Title || len(again.Labels) != 1 {
		t.Fatalf("GetSession after update: %+v, want %+v", again, got)
	}
	page, err := s.ListSessions(ctx, persistence.ListSessionsRequest{LabelFilter: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Sessions) != 0 {
		t.Fatalf("the replaced label still matches: %d sessions", len(page.Sessions))
	}
	_, err = s.UpdateSession(ctx, "missing", persistence.SessionUpdate{Title: &title})
	wantErr(t, "update a missing session", err, persistence.ErrNotFound, "missing", "")
}

func testReopen(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	cfg := &agentdv1.SessionConfig{SystemPrompt: "persist me", MaxTurns: 3}
	sess := mustCreate(t, s, persistence.CreateSessionParams{Title: "t", Labels: map[string]string{"a": "b"}, Config: cfg})
	entries := transcriptgen.Transcript(4, 20)
	packed, err := anypb.New(structpb.NewStringValue("client payload"))
	if err != nil {
		t.Fatal(err)
	}
	details, _ := structpb.NewValue(map[string]any{"nested": []any{1.5, "x", true, nil}})
	entries = append(entries,
		&agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Extension{Extension: &agentdv1.Extension{Payload: packed, VisibleInUi: true}}}}},
		&agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Custom{Custom: &agentdv1.CustomMessage{
			CustomType: "job_done", Details: details,
			Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Image{Image: &agentdv1.ImageContent{Data: []byte{0, 1, 2, 0xff}, MimeType: "image/png"}}}},
		}}}}},
		&agentdv1.Entry{Payload: &agentdv1.Entry_ModelChange{ModelChange: &agentdv1.ModelChange{Provider: "openai", ModelId: "gpt-5"}}},
		&agentdv1.Entry{Payload: &agentdv1.Entry_Label{Label: &agentdv1.Label{TargetEntryId: "x", Label: "bookmark"}}},
	)
	for _, e := range entries {
		mustAppend(t, s, sess.ID, e)
	}
	if err := s.StartRun(ctx, sess.ID, "r1", nil); err != nil {
		t.Fatal(err)
	}
	before, err := s.GetSession(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	s = h.Reopen(t, s)
	t.Cleanup(func() { _ = s.Close() })

	after, err := s.GetSession(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(before, after); d != "" {
		t.Fatalf("session after reopen: %s", d)
	}
	path, err := s.Path(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	all := allEntries(t, s, sess.ID)
	if len(path) != len(entries) || len(all) != len(entries) {
		t.Fatalf("after reopen: path %d, entries %d, want %d", len(path), len(all), len(entries))
	}
	det := proto.MarshalOptions{Deterministic: true}
	for i, e := range entries {
		want, _ := det.Marshal(e)
		for what, got := range map[string]*agentdv1.Entry{"path": path[i], "entries": all[i]} {
			b, err := det.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != string(want) {
				t.Fatalf("entry %d (%s): %d bytes after reopen differ from the %d written", i, what, len(b), len(want))
			}
		}
	}
	if r, err := s.GetRun(ctx, "r1"); err != nil || r.Ended() {
		t.Fatalf("run after reopen = %+v, %v; want active", r, err)
	}
}

func testCorrupt(t *testing.T, h Harness) {
	if h.CorruptPayload == nil {
		t.Fatal("Harness.CorruptPayload is required")
	}
	ctx := context.Background()
	bad := []struct {
		name    string
		payload func(neighbour []byte) []byte
	}{
		{"truncated", func([]byte) []byte { return []byte{0x0a, 0x40, 'a', 'b'} }},
		{"invalid utf-8 in id", func([]byte) []byte { return []byte{0x0a, 0x02, 0xff, 0xfe} }},
		{"valid entry with another id", func(n []byte) []byte { return n }},
		{"no payload set", func([]byte) []byte { e, _ := proto.Marshal(&agentdv1.Entry{Id: "e2"}); return e }},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, h)
			sess := mustCreate(t, s, persistence.CreateSessionParams{})
			mk := func(id string) *agentdv1.Entry { e := userEntry(id); e.Id = id; return e }
			es := []*agentdv1.Entry{mk("e1"), mk("e2"), mk("e3")}
			mustAppend(t, s, sess.ID, es...)
			neighbour, _ := proto.Marshal(es[0])
			h.CorruptPayload(t, s, sess.ID, "e2", tc.payload(neighbour))
			reads := map[string]func() error{
				"Path":     func() error { _, err := s.Path(ctx, sess.ID); return err },
				"PathTo":   func() error { _, err := s.PathTo(ctx, sess.ID, "e3"); return err },
				"Entries":  func() error { _, err := s.Entries(ctx, sess.ID, persistence.EntriesRequest{}); return err },
				"GetEntry": func() error { _, err := s.GetEntry(ctx, sess.ID, "e2"); return err },
			}
			for name, read := range reads {
				err := read()
				var ce *persistence.CorruptEntryError
				if !errors.As(err, &ce) || !errors.Is(err, persistence.ErrCorrupt) {
					t.Fatalf("%s: got %v, want a *persistence.CorruptEntryError", name, err)
				}
				if ce.SessionID != sess.ID || ce.EntryID != "e2" {
					t.Fatalf("%s: error names session %q entry %q, want %q e2", name, ce.SessionID, ce.EntryID, sess.ID)
				}
			}
			if got, err := s.GetEntry(ctx, sess.ID, "e1"); err != nil || !proto.Equal(got, es[0]) {
				t.Fatalf("intact neighbour: %v, %v", got, err)
			}
		})
	}
}

// A compacted session's context is read from its latest summary's first
// kept entry on: an entry before that, even a damaged one, is never
// decoded, while Path still reports it.
func testContextPathReadsOnlyTheContext(t *testing.T, h Harness) {
	if h.CorruptPayload == nil {
		t.Fatal("Harness.CorruptPayload is required")
	}
	ctx := context.Background()
	s := open(t, h)
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	e := func(id string) *agentdv1.Entry { x := userEntry(id); x.Id = id; return x }
	sum := summaryEntry("c")
	sum.Id = "s1"
	mustAppend(t, s, sess.ID, e("a"), e("b"), e("c"), sum, e("d"))
	h.CorruptPayload(t, s, sess.ID, "b", []byte{0x0a, 0x40, 'a', 'b'})
	got, err := s.ContextPath(ctx, sess.ID)
	if err != nil {
		t.Fatalf("ContextPath read before its start: %v", err)
	}
	if g := strings.Join(ids(got), " "); g != "c s1 d" {
		t.Fatalf("ContextPath = %q, want %q", g, "c s1 d")
	}
	if _, err := s.Path(ctx, sess.ID); !errors.Is(err, persistence.ErrCorrupt) {
		t.Fatalf("Path of the damaged session: %v, want ErrCorrupt", err)
	}
}

// PathSinceAnswer is the context path from its latest assistant message
// on, and reads nothing before that message.
func testPathSinceAnswer(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	check := func(sessionID, want string) {
		t.Helper()
		got, err := s.PathSinceAnswer(ctx, sessionID)
		if err != nil {
			t.Fatal(err)
		}
		path, err := s.Path(ctx, sessionID)
		if err != nil {
			t.Fatal(err)
		}
		context := path[persistence.ContextStart(path):]
		if g, p := strings.Join(ids(got), " "), strings.Join(ids(context[persistence.AnswerStart(context):]), " "); g != p || g != want {
			t.Fatalf("PathSinceAnswer = %q, Path from AnswerStart = %q, want %q", g, p, want)
		}
	}
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	check(sess.ID, "")
	user := func(id string) *agentdv1.Entry { x := userEntry(id); x.Id = id; return x }
	answer := func(id string) *agentdv1.Entry {
		return &agentdv1.Entry{Id: id, Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{
			Assistant: &agentdv1.AssistantMessage{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: "call-" + id, Name: "read"}}}}}}}}}
	}
	result := func(id, call string) *agentdv1.Entry {
		return &agentdv1.Entry{Id: id, Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ToolResult{
			ToolResult: &agentdv1.ToolResultMessage{ToolCallId: call, ToolName: "read"}}}}}
	}
	// No answer yet: the whole (context) path.
	mustAppend(t, s, sess.ID, user("u1"), user("u2"))
	check(sess.ID, "u1 u2")
	mustAppend(t, s, sess.ID, answer("a1"), result("r1", "call-a1"))
	check(sess.ID, "a1 r1")
	mustAppend(t, s, sess.ID, user("u3"), answer("a2"))
	check(sess.ID, "a2")
	// The walk reads nothing older than the latest answer.
	if h.CorruptPayload != nil {
		h.CorruptPayload(t, s, sess.ID, "r1", []byte{0x0a, 0x40, 'a', 'b'})
	}
	mustAppend(t, s, sess.ID, result("r2", "call-a2"), user("u4"))
	got, err := s.PathSinceAnswer(ctx, sess.ID)
	if err != nil {
		t.Fatalf("PathSinceAnswer read before the latest answer: %v", err)
	}
	if g := strings.Join(ids(got), " "); g != "a2 r2 u4" {
		t.Fatalf("PathSinceAnswer = %q, want %q", g, "a2 r2 u4")
	}
	// A compaction after the answer: the context's start bounds it.
	other := mustCreate(t, s, persistence.CreateSessionParams{})
	sum := summaryEntry("v2")
	sum.Id = "s1"
	mustAppend(t, s, other.ID, answer("b1"), user("v2"), sum, user("v3"))
	check(other.ID, "v2 s1 v3")
	// Another branch has its own latest answer.
	if err := s.SetLeaf(ctx, other.ID, "b1"); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, other.ID, user("v4"))
	check(other.ID, "b1 v4")
	if _, err := s.PathSinceAnswer(ctx, "no-such-session"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("PathSinceAnswer of a missing session: %v, want ErrNotFound", err)
	}
}

// A path hundreds of entries long, with abandoned branches among them
// (more than one page of an engine that reads its tree in pages), is the
// chain from the root to the leaf, whole and from its context's start.
func testLongPathWithBranches(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	entries := transcriptgen.Transcript(11, 700)
	var chain []string
	for i, e := range entries {
		mustAppend(t, s, sess.ID, e)
		chain = append(chain, e.GetId())
		if i%150 == 149 {
			// A branch of three from two entries back, then back again.
			if err := s.SetLeaf(ctx, sess.ID, chain[len(chain)-3]); err != nil {
				t.Fatal(err)
			}
			mustAppend(t, s, sess.ID, userEntry("aside 1"), userEntry("aside 2"), userEntry("aside 3"))
			if err := s.SetLeaf(ctx, sess.ID, chain[len(chain)-1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	path, err := s.Path(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := strings.Join(ids(path), " "), strings.Join(chain, " "); g != w {
		t.Fatalf("Path holds %d entries, want the chain of %d", len(path), len(chain))
	}
	sum := summaryEntry(chain[100])
	mustAppend(t, s, sess.ID, sum)
	got, err := s.ContextPath(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := strings.Join(ids(got), " "), strings.Join(append(chain[100:], sum.GetId()), " "); g != w {
		t.Fatalf("ContextPath holds %d entries, want %d from the first kept", len(got), len(chain)-100+1)
	}
}

func testRuns(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	a := mustCreate(t, s, persistence.CreateSessionParams{})
	b := mustCreate(t, s, persistence.CreateSessionParams{})
	for _, r := range []struct{ sid, id string }{{a.ID, "ra1"}, {a.ID, "ra2"}, {b.ID, "rb1"}, {b.ID, "rb2"}} {
		if err := s.StartRun(ctx, r.sid, r.id, nil); err != nil {
			t.Fatalf("StartRun(%s): %v", r.id, err)
		}
	}
	if err := s.StartRun(ctx, b.ID, "ra1", nil); !errors.Is(err, persistence.ErrConflict) {
		t.Fatalf("reused run id: %v, want ErrConflict", err)
	}
	if err := s.StartRun(ctx, a.ID, "", nil); !errors.Is(err, persistence.ErrInvalid) {
		t.Fatalf("empty run id: %v, want ErrInvalid", err)
	}
	r, err := s.GetRun(ctx, "ra1")
	if err != nil || r.SessionID != a.ID || r.Ended() || r.Outcome != agentdv1.RunOutcome_RUN_OUTCOME_UNSPECIFIED || r.StartTime.IsZero() {
		t.Fatalf("GetRun(active) = %+v, %v", r, err)
	}
	if err := s.EndRun(ctx, "ra1", persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED}); err != nil {
		t.Fatal(err)
	}
	if err := s.EndRun(ctx, "rb1", persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_ERROR, ErrorMessage: "model exploded"}); err != nil {
		t.Fatal(err)
	}
	if err := s.EndRun(ctx, "ra1", persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_ABORTED}); !errors.Is(err, persistence.ErrConflict) {
		t.Fatalf("ending twice: %v, want ErrConflict", err)
	}
	if err := s.EndRun(ctx, "nope", persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED}); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("EndRun(unknown): %v, want ErrNotFound", err)
	}
	if err := s.EndRun(ctx, "ra2", persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_UNSPECIFIED}); !errors.Is(err, persistence.ErrInvalid) {
		t.Fatalf("EndRun(unspecified): %v, want ErrInvalid", err)
	}
	if _, err := s.GetRun(ctx, "nope"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("GetRun(unknown): %v, want ErrNotFound", err)
	}
	r, err = s.GetRun(ctx, "rb1")
	if err != nil || !r.Ended() || r.Outcome != agentdv1.RunOutcome_RUN_OUTCOME_ERROR || r.ErrorMessage != "model exploded" || r.EndTime.Before(r.StartTime) {
		t.Fatalf("GetRun(ended) = %+v, %v", r, err)
	}

	// A restart finds the runs that never ended.
	s = h.Reopen(t, s)
	t.Cleanup(func() { _ = s.Close() })
	closed, err := s.CloseInterruptedRuns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range closed {
		got = append(got, r.SessionID+"/"+r.ID)
		if r.Outcome != agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED || !r.Ended() {
			t.Fatalf("closed run %+v not marked interrupted", r)
		}
	}
	if d := diff([]string{a.ID + "/ra2", b.ID + "/rb2"}, got); d != "" {
		t.Fatalf("interrupted runs: %s", d)
	}
	if r, err := s.GetRun(ctx, "ra2"); err != nil || r.Outcome != agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED {
		t.Fatalf("GetRun(interrupted) = %+v, %v", r, err)
	}
	if again, err := s.CloseInterruptedRuns(ctx); err != nil || len(again) != 0 {
		t.Fatalf("second CloseInterruptedRuns = %v, %v; want none", again, err)
	}
	if r, err := s.GetRun(ctx, "ra1"); err != nil || r.Outcome != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("completed run changed: %+v, %v", r, err)
	}
}

// events makes a batch of events with seqs from..to whose data names the
// run and seq, so a mix-up between runs or positions shows.
func events(runID string, from, to uint64) []persistence.Event {
	var out []persistence.Event
	for seq := from; seq <= to; seq++ {
		out = append(out, persistence.Event{Seq: seq, Data: []byte(fmt.Sprintf("%s/%d", runID, seq))})
	}
	return out
}

func mustEvents(t *testing.T, s persistence.Store, runID string, after uint64, limit int) []persistence.Event {
	t.Helper()
	got, err := s.Events(context.Background(), runID, after, limit)
	if err != nil {
		t.Fatalf("Events(%s, after %d, limit %d): %v", runID, after, limit, err)
	}
	return got
}

func testEventLog(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	if err := s.StartRun(ctx, sess.ID, "r1", nil); err != nil {
		t.Fatal(err)
	}
	if got := mustEvents(t, s, "r1", 0, 10); len(got) != 0 {
		t.Fatalf("new run has events: %v", got)
	}
	for _, batch := range [][]persistence.Event{events("r1", 1, 3), events("r1", 4, 4), events("r1", 5, 9)} {
		if err := s.AppendEvents(ctx, "r1", batch); err != nil {
			t.Fatalf("AppendEvents(%d..%d): %v", batch[0].Seq, batch[len(batch)-1].Seq, err)
		}
	}
	tests := []struct {
		after      uint64
		limit      int
		wantFirst  uint64
		wantLength int
	}{
		{0, 100, 1, 9},
		{2, 2, 3, 2},  // across a batch boundary
		{3, 1, 4, 1},  // a batch of one
		{4, 3, 5, 3},  // inside a batch
		{8, 10, 9, 1}, // the last one
		{9, 10, 0, 0}, // nothing after the end
		{50, 10, 0, 0},
	}
	for _, tc := range tests {
		got := mustEvents(t, s, "r1", tc.after, tc.limit)
		want := []persistence.Event{}
		if tc.wantLength > 0 {
			want = events("r1", tc.wantFirst, tc.wantFirst+uint64(tc.wantLength)-1)
		}
		if d := diff(want, append([]persistence.Event{}, got...)); d != "" {
			t.Fatalf("Events(after %d, limit %d): %s", tc.after, tc.limit, d)
		}
	}
	if r, err := s.GetRun(ctx, "r1"); err != nil || r.LastSeq != 9 || r.EventsPruned {
		t.Fatalf("GetRun after appends = %+v, %v; want LastSeq 9", r, err)
	}

	// A batch that does not continue the log is refused whole.
	for name, batch := range map[string][]persistence.Event{
		"gap":            events("r1", 11, 12),
		"repeat":         events("r1", 9, 10),
		"gap in a batch": {{Seq: 10, Data: []byte("a")}, {Seq: 12, Data: []byte("b")}},
	} {
		if err := s.AppendEvents(ctx, "r1", batch); !errors.Is(err, persistence.ErrConflict) {
			t.Fatalf("%s: AppendEvents = %v, want ErrConflict", name, err)
		}
	}
	if err := s.AppendEvents(ctx, "r1", nil); !errors.Is(err, persistence.ErrInvalid) {
		t.Fatalf("empty batch: %v, want ErrInvalid", err)
	}
	if err := s.AppendEvents(ctx, "nope", events("nope", 1, 1)); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("unknown run: %v, want ErrNotFound", err)
	}
	if _, err := s.Events(ctx, "nope", 0, 10); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("Events(unknown run): %v, want ErrNotFound", err)
	}
	if _, err := s.Events(ctx, "r1", 0, 0); !errors.Is(err, persistence.ErrInvalid) {
		t.Fatalf("Events(limit 0): %v, want ErrInvalid", err)
	}
	if got := mustEvents(t, s, "r1", 0, 100); len(got) != 9 {
		t.Fatalf("refused batches changed the log: %d events", len(got))
	}

	// A run's last events (agent_end) come after its end is recorded.
	if err := s.EndRun(ctx, "r1", persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvents(ctx, "r1", events("r1", 10, 10)); err != nil {
		t.Fatalf("AppendEvents after EndRun: %v", err)
	}

	// The log survives a restart byte for byte.
	s = h.Reopen(t, s)
	t.Cleanup(func() { _ = s.Close() })
	if d := diff(events("r1", 1, 10), mustEvents(t, s, "r1", 0, 100)); d != "" {
		t.Fatalf("events after reopen: %s", d)
	}
	if r, err := s.GetRun(ctx, "r1"); err != nil || r.LastSeq != 10 {
		t.Fatalf("GetRun after reopen = %+v, %v", r, err)
	}

	// Deleting the session deletes its runs' logs.
	if err := s.DeleteSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events(ctx, "r1", 0, 10); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("Events of a deleted session's run: %v, want ErrNotFound", err)
	}
}

// testEventReservation: a run's reservation only grows, survives a
// restart and is returned by CloseInterruptedRuns; once the run is closed
// its log may continue after the reservation, leaving a gap that readers
// step over.
func testEventReservation(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	if err := s.StartRun(ctx, sess.ID, "r1", nil); err != nil {
		t.Fatal(err)
	}
	// A run starts with a reservation, so its log streams its first
	// events without waiting for a write.
	const r0 = persistence.StartReservedSeq
	if r, err := s.GetRun(ctx, "r1"); err != nil || r.ReservedSeq != r0 {
		t.Fatalf("GetRun of a new run = %+v, %v; want ReservedSeq %d", r, err, r0)
	}
	if err := s.AppendEvents(ctx, "r1", events("r1", 1, 3)); err != nil {
		t.Fatal(err)
	}
	for _, through := range []uint64{r0 + 20, r0 + 10} { // a smaller one changes nothing
		if err := s.ReserveEvents(ctx, "r1", through); err != nil {
			t.Fatalf("ReserveEvents(%d): %v", through, err)
		}
	}
	if r, err := s.GetRun(ctx, "r1"); err != nil || r.ReservedSeq != r0+20 || r.LastSeq != 3 {
		t.Fatalf("GetRun after ReserveEvents = %+v, %v; want ReservedSeq %d, LastSeq 3", r, err, r0+20)
	}
	if err := s.ReserveEvents(ctx, "nope", 5); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("ReserveEvents of an unknown run: %v, want ErrNotFound", err)
	}
	// While the run is active its log continues after its last event only.
	if err := s.AppendEvents(ctx, "r1", events("r1", r0+21, r0+21)); !errors.Is(err, persistence.ErrConflict) {
		t.Fatalf("AppendEvents after the reservation of an active run: %v, want ErrConflict", err)
	}
	if err := s.AppendEvents(ctx, "r1", events("r1", 4, 5)); err != nil {
		t.Fatalf("AppendEvents inside the reservation: %v", err)
	}

	s = h.Reopen(t, s)
	t.Cleanup(func() { _ = s.Close() })
	closed, err := s.CloseInterruptedRuns(ctx)
	if err != nil || len(closed) != 1 || closed[0].ReservedSeq != r0+20 || closed[0].LastSeq != 5 {
		t.Fatalf("CloseInterruptedRuns after reopen = %+v, %v; want r1 with ReservedSeq %d, LastSeq 5", closed, err, r0+20)
	}
	for name, batch := range map[string][]persistence.Event{
		"inside the gap":            events("r1", 7, 7),
		"beyond the reservation":    events("r1", r0+22, r0+22),
		"gap after the reservation": {{Seq: r0 + 21, Data: []byte("a")}, {Seq: r0 + 23, Data: []byte("b")}},
	} {
		if err := s.AppendEvents(ctx, "r1", batch); !errors.Is(err, persistence.ErrConflict) {
			t.Fatalf("%s: AppendEvents = %v, want ErrConflict", name, err)
		}
	}
	if err := s.AppendEvents(ctx, "r1", events("r1", r0+21, r0+22)); err != nil {
		t.Fatalf("AppendEvents right after the reservation of a closed run: %v", err)
	}
	if err := s.AppendEvents(ctx, "r1", events("r1", 6, 6)); !errors.Is(err, persistence.ErrConflict) {
		t.Fatalf("AppendEvents into the gap after the reservation was used: %v, want ErrConflict", err)
	}
	if err := s.AppendEvents(ctx, "r1", events("r1", r0+23, r0+23)); err != nil {
		t.Fatalf("AppendEvents after the closing batch: %v", err)
	}
	want := append(events("r1", 1, 5), events("r1", r0+21, r0+23)...)
	if d := diff(want, mustEvents(t, s, "r1", 0, 100)); d != "" {
		t.Fatalf("events of the closed run: %s", d)
	}
	for _, after := range []uint64{5, 12} {
		if d := diff(events("r1", r0+21, r0+22), mustEvents(t, s, "r1", after, 2)); d != "" {
			t.Fatalf("Events(after %d, limit 2) across the gap: %s", after, d)
		}
	}
	if r, err := s.GetRun(ctx, "r1"); err != nil || r.LastSeq != r0+23 || r.ReservedSeq != r0+20 {
		t.Fatalf("GetRun of the closed run = %+v, %v; want LastSeq %d, ReservedSeq %d", r, err, r0+23, r0+20)
	}
}

func testEventLogConcurrentRuns(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	const runs, batches, perBatch = 6, 20, 7
	for i := range runs {
		sess := mustCreate(t, s, persistence.CreateSessionParams{})
		if err := s.StartRun(ctx, sess.ID, fmt.Sprintf("run%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("run%d", i)
			for b := range uint64(batches) {
				if err := s.AppendEvents(ctx, id, events(id, b*perBatch+1, (b+1)*perBatch)); err != nil {
					errs <- fmt.Errorf("%s batch %d: %w", id, b, err)
					return
				}
				// A reader following the run sees a prefix of the log.
				got, err := s.Events(ctx, id, 0, batches*perBatch)
				if err != nil {
					errs <- err
					return
				}
				if d := diff(events(id, 1, (b+1)*perBatch), got); d != "" {
					errs <- fmt.Errorf("%s after batch %d: %s", id, b, d)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range runs {
		id := fmt.Sprintf("run%d", i)
		if d := diff(events(id, 1, batches*perBatch), mustEvents(t, s, id, 0, batches*perBatch+1)); d != "" {
			t.Fatalf("%s: %s", id, d)
		}
	}
}

func testEventRetention(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	for _, id := range []string{"old", "active", "recent"} {
		if err := s.StartRun(ctx, sess.ID, id, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendEvents(ctx, id, events(id, 1, 4)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.EndRun(ctx, "old", persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED}); err != nil {
		t.Fatal(err)
	}
	old, err := s.GetRun(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // "recent" ends strictly later
	if err := s.EndRun(ctx, "recent", persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_ERROR, ErrorMessage: "x"}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneEvents(ctx, old.EndTime); err != nil || n != 0 {
		t.Fatalf("PruneEvents(cutoff = the end itself) = %d, %v; want 0 (only runs that ended before the cutoff)", n, err)
	}
	if n, err := s.PruneEvents(ctx, old.EndTime.Add(time.Millisecond)); err != nil || n != 1 {
		t.Fatalf("PruneEvents = %d, %v; want 1", n, err)
	}
	if got := mustEvents(t, s, "old", 0, 10); len(got) != 0 {
		t.Fatalf("pruned run still has %d events", len(got))
	}
	r, err := s.GetRun(ctx, "old")
	if err != nil || !r.EventsPruned || r.LastSeq != 4 || r.Outcome != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("pruned run record = %+v, %v; want EventsPruned, LastSeq 4, outcome kept", r, err)
	}
	for _, id := range []string{"active", "recent"} {
		if d := diff(events(id, 1, 4), mustEvents(t, s, id, 0, 10)); d != "" {
			t.Fatalf("%s lost events to pruning: %s", id, d)
		}
		if r, err := s.GetRun(ctx, id); err != nil || r.EventsPruned {
			t.Fatalf("%s marked pruned: %+v, %v", id, r, err)
		}
	}
	// Pruning again finds nothing new; a later cutoff takes the rest of
	// the ended runs, never an active one.
	if n, err := s.PruneEvents(ctx, old.EndTime.Add(time.Millisecond)); err != nil || n != 0 {
		t.Fatalf("second PruneEvents = %d, %v; want 0", n, err)
	}
	if n, err := s.PruneEvents(ctx, time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("PruneEvents(later) = %d, %v; want 1 (recent)", n, err)
	}
	if d := diff(events("active", 1, 4), mustEvents(t, s, "active", 0, 10)); d != "" {
		t.Fatalf("active run lost events: %s", d)
	}
	// The transcript is untouched by pruning.
	mustAppend(t, s, sess.ID, userEntry("still here"))
	if got := allEntries(t, s, sess.ID); len(got) != 1 {
		t.Fatalf("entries after pruning: %d", len(got))
	}
}

func testPageTokenBinding(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	a := mustCreate(t, s, persistence.CreateSessionParams{Labels: map[string]string{"k": "v"}})
	b := mustCreate(t, s, persistence.CreateSessionParams{Labels: map[string]string{"k": "v"}})
	mustCreate(t, s, persistence.CreateSessionParams{Labels: map[string]string{"k": "w"}})
	mustAppend(t, s, a.ID, transcriptgen.Transcript(5, 4)...)
	mustAppend(t, s, b.ID, transcriptgen.Transcript(6, 4)...)

	page, err := s.Entries(ctx, a.ID, persistence.EntriesRequest{PageSize: 2})
	if err != nil || page.NextPageToken == "" {
		t.Fatalf("first page of entries: %v, %v", page, err)
	}
	if _, err := s.Entries(ctx, b.ID, persistence.EntriesRequest{PageSize: 2, PageToken: page.NextPageToken}); !errors.Is(err, persistence.ErrInvalid) {
		t.Fatalf("entry page token of session a used for session b: %v, want ErrInvalid", err)
	}
	list, err := s.ListSessions(ctx, persistence.ListSessionsRequest{PageSize: 1, LabelFilter: map[string]string{"k": "v"}})
	if err != nil || list.NextPageToken == "" {
		t.Fatalf("first page of sessions: %v, %v", list, err)
	}
	for name, req := range map[string]persistence.ListSessionsRequest{
		"another filter": {PageSize: 1, PageToken: list.NextPageToken, LabelFilter: map[string]string{"k": "w"}},
		"no filter":      {PageSize: 1, PageToken: list.NextPageToken},
	} {
		if _, err := s.ListSessions(ctx, req); !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("%s: session page token reused: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.Entries(ctx, a.ID, persistence.EntriesRequest{PageToken: list.NextPageToken}); !errors.Is(err, persistence.ErrInvalid) {
		t.Fatalf("session page token used for entries: %v, want ErrInvalid", err)
	}
	// The right listing still pages on.
	next, err := s.ListSessions(ctx, persistence.ListSessionsRequest{PageSize: 1, PageToken: list.NextPageToken, LabelFilter: map[string]string{"k": "v"}})
	if err != nil || len(next.Sessions) != 1 || next.Sessions[0].ID != a.ID {
		t.Fatalf("second page of sessions: %v, %v", next, err)
	}
}

func testRedact(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	mustAppend(t, s, sess.ID, userEntry("my card is 4111"), userEntry("fine"), userEntry("and the pin 1234"))
	before := allEntries(t, s, sess.ID)
	if err := s.StartRun(ctx, sess.ID, "rr1", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvents(ctx, "rr1", events("rr1", 1, 3)); err != nil {
		t.Fatal(err)
	}
	if err := s.EndRun(ctx, "rr1", persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED}); err != nil {
		t.Fatal(err)
	}
	tomb := func(e *agentdv1.Entry) *agentdv1.Entry {
		r := userEntry("[redacted]")
		r.Id = e.GetId()
		r.Redaction = &agentdv1.Redaction{Reason: "asked to forget"}
		return r
	}
	notice := func() *agentdv1.Entry {
		return &agentdv1.Entry{Payload: &agentdv1.Entry_RedactionNotice{RedactionNotice: &agentdv1.RedactionNotice{
			EntryIds: []string{before[0].GetId(), before[2].GetId()}, Reason: "asked to forget"}}}
	}

	// An unknown id changes nothing.
	missing := userEntry("x")
	missing.Id = "no-such-entry"
	if err := s.Redact(ctx, sess.ID, []*agentdv1.Entry{tomb(before[0]), missing}, notice()); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("Redact with an unknown id: %v, want ErrNotFound", err)
	}
	if got := allEntries(t, s, sess.ID); len(got) != 3 || !proto.Equal(got[0], before[0]) {
		t.Fatal("a refused Redact changed the session")
	}
	// A replacement must keep its entry's kind.
	other := &agentdv1.Entry{Id: before[1].GetId(), Payload: &agentdv1.Entry_Label{Label: &agentdv1.Label{TargetEntryId: before[0].GetId()}}}
	if err := s.Redact(ctx, sess.ID, []*agentdv1.Entry{other}, notice()); !errors.Is(err, persistence.ErrInvalid) {
		t.Fatalf("Redact changing a kind: %v, want ErrInvalid", err)
	}

	n := notice()
	if err := s.Redact(ctx, sess.ID, []*agentdv1.Entry{tomb(before[0]), tomb(before[2])}, n); err != nil {
		t.Fatal(err)
	}
	after := allEntries(t, s, sess.ID)
	if len(after) != 4 || after[3].GetId() != n.GetId() || n.GetParentId() != before[2].GetId() || after[3].GetRedactionNotice() == nil {
		t.Fatalf("after Redact: %d entries; notice %v", len(after), n)
	}
	for i, e := range after[:3] {
		if e.GetId() != before[i].GetId() || e.GetParentId() != before[i].GetParentId() || !proto.Equal(e.GetTime(), before[i].GetTime()) {
			t.Fatalf("entry %d moved: %v, was %v", i, e, before[i])
		}
	}
	if got := after[0].GetMessage().GetUser().GetContent()[0].GetText().GetText(); got != "[redacted]" || after[0].GetRedaction().GetReason() != "asked to forget" {
		t.Fatalf("redacted entry 0: %v", after[0])
	}
	if !proto.Equal(after[1], before[1]) {
		t.Fatal("an entry not named changed")
	}
	path, err := s.Path(ctx, sess.ID)
	if err != nil || len(path) != 4 || path[3].GetId() != n.GetId() {
		t.Fatalf("the path after Redact: %d entries, %v", len(path), err)
	}
	run, err := s.GetRun(ctx, "rr1")
	if err != nil || !run.EventsPruned {
		t.Fatalf("the session's run after Redact: %+v, %v", run, err)
	}
	if evs, err := s.Events(ctx, "rr1", 0, 10); err != nil || len(evs) != 0 {
		t.Fatalf("the run's events after Redact: %d, %v", len(evs), err)
	}
	tree, err := s.Tree(ctx, sess.ID, persistence.EntriesRequest{})
	if err != nil || strings.Contains(tree.Nodes[0].Preview, "4111") {
		t.Fatalf("the tree keeps the redacted preview: %+v, %v", tree, err)
	}
}

// StreamedEvents returns the events with seqs from..from+n-1 of a run
// that streams as runs do: a message_start, then text deltas, a thinking
// block's and a tool call's deltas (with their times out of order once,
// as clocks allow), another text block, a delta of another run mixed in
// and a message_end, repeating. Deltas carry their persistence.Delta
// facts as the run's log sets them.
func StreamedEvents(t testing.TB, sessionID, runID string, from uint64, n int) []persistence.Event {
	t.Helper()
	base := time.Date(2026, 12, 7, 4, 0, 0, 999_999_000, time.UTC)
	update := func(u *agentdv1.MessageUpdate) *agentdv1.AgentEvent {
		return &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_MessageUpdate{MessageUpdate: u}}
	}
	text := func(i uint32, s string) *agentdv1.AgentEvent {
		return update(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_TextDelta{TextDelta: &agentdv1.TextDelta{ContentIndex: i, Delta: s}}})
	}
	cycle := []func() *agentdv1.AgentEvent{
		func() *agentdv1.AgentEvent {
			return &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_MessageStart{MessageStart: &agentdv1.MessageStart{}}}
		},
		func() *agentdv1.AgentEvent { return text(0, "port ") },
		func() *agentdv1.AgentEvent { return text(0, "3000, 端口") },
		func() *agentdv1.AgentEvent { return text(0, "") },
		func() *agentdv1.AgentEvent {
			return update(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_ThinkingDelta{ThinkingDelta: &agentdv1.ThinkingDelta{ContentIndex: 1, Delta: "hmm"}}})
		},
		func() *agentdv1.AgentEvent {
			return update(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_ToolCallDelta{ToolCallDelta: &agentdv1.ToolCallDelta{ContentIndex: 2, Delta: `{"path":`}}})
		},
		func() *agentdv1.AgentEvent {
			return update(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_ToolCallDelta{ToolCallDelta: &agentdv1.ToolCallDelta{ContentIndex: 2, Delta: `"a.go"}`}}})
		},
		func() *agentdv1.AgentEvent { return text(3, "done") },
		func() *agentdv1.AgentEvent { ev := text(3, "!"); ev.RunId = "another-run"; return ev },
		func() *agentdv1.AgentEvent {
			return &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_MessageEnd{MessageEnd: &agentdv1.MessageEnd{}}}
		},
	}
	out := make([]persistence.Event, 0, n)
	for i := range n {
		seq := from + uint64(i)
		ev := cycle[i%len(cycle)]()
		if ev.RunId == "" {
			ev.RunId = runID
		}
		ev.SessionId, ev.Seq, ev.TraceId = sessionID, seq, []byte("0123456789abcdef")
		at := base.Add(time.Duration(i) * 1337 * time.Microsecond)
		if i%len(cycle) == 5 {
			at = at.Add(-time.Hour) // a clock that stepped back
		}
		ev.Time = timestamppb.New(at)
		data, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		e := persistence.Event{Seq: seq, Data: data}
		if d, ok := persistence.DeltaOf(ev); ok {
			e.Delta = &d
		}
		out = append(out, e)
	}
	return out
}

// testEventLogDeltas checks that a batch of streamed deltas reads back as
// the very bytes appended, whether the engine kept the bytes or the facts.
func testEventLogDeltas(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	t.Cleanup(func() { _ = s.Close() })
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	if err := s.StartRun(ctx, sess.ID, "rd1", nil); err != nil {
		t.Fatal(err)
	}
	want := StreamedEvents(t, sess.ID, "rd1", 1, 5000)
	for _, batch := range [][]persistence.Event{want[:7], want[7:4100], want[4100:]} {
		if err := s.AppendEvents(ctx, "rd1", batch); err != nil {
			t.Fatalf("AppendEvents(%d..%d): %v", batch[0].Seq, batch[len(batch)-1].Seq, err)
		}
	}
	for _, after := range []uint64{0, 3, 7, 4099, 4100, 4999} {
		got := mustEvents(t, s, "rd1", after, 10_000)
		if len(got) != len(want)-int(after) {
			t.Fatalf("Events(after %d) = %d events, want %d", after, len(got), len(want)-int(after))
		}
		for i, ev := range got {
			w := want[int(after)+i]
			if ev.Seq != w.Seq || !bytes.Equal(ev.Data, w.Data) {
				t.Fatalf("Events(after %d): event %d is seq %d, %x; want seq %d, %x", after, i, ev.Seq, ev.Data, w.Seq, w.Data)
			}
		}
	}
	if got := mustEvents(t, s, "rd1", 4095, 3); len(got) != 3 || got[0].Seq != 4096 || !bytes.Equal(got[2].Data, want[4097].Data) {
		t.Fatalf("Events(after 4095, limit 3) = %d events", len(got))
	}
}

// testLastSeq checks that Session.LastSeq counts the entries appended, a
// redaction's notice included, and that moving the leaf leaves it alone:
// the agent trusts a cached context only while leaf and LastSeq are
// unchanged.
func testLastSeq(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	lastSeq := func(id string) uint64 {
		t.Helper()
		got, err := s.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return got.LastSeq
	}
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	if sess.LastSeq != 0 || lastSeq(sess.ID) != 0 {
		t.Fatalf("a new session's LastSeq is %d, want 0", sess.LastSeq)
	}
	first, second := userEntry("one"), userEntry("two")
	mustAppend(t, s, sess.ID, first, second)
	mustAppend(t, s, sess.ID, userEntry("three"))
	if got := lastSeq(sess.ID); got != 3 {
		t.Fatalf("LastSeq after three entries: %d, want 3", got)
	}
	if err := s.SetLeaf(ctx, sess.ID, first.GetId()); err != nil {
		t.Fatal(err)
	}
	if got := lastSeq(sess.ID); got != 3 {
		t.Fatalf("LastSeq after SetLeaf: %d, want 3 (the leaf moved, no entry was added)", got)
	}
	tomb := userEntry("[redacted]")
	tomb.Id = second.GetId()
	notice := &agentdv1.Entry{Payload: &agentdv1.Entry_RedactionNotice{RedactionNotice: &agentdv1.RedactionNotice{EntryIds: []string{second.GetId()}}}}
	if err := s.Redact(ctx, sess.ID, []*agentdv1.Entry{tomb}, notice); err != nil {
		t.Fatal(err)
	}
	if got := lastSeq(sess.ID); got != 4 {
		t.Fatalf("LastSeq after a redaction: %d, want 4 (its notice)", got)
	}
	other := mustCreate(t, s, persistence.CreateSessionParams{})
	mustAppend(t, s, other.ID, userEntry("elsewhere"))
	if got := lastSeq(sess.ID); got != 4 {
		t.Fatalf("LastSeq after another session's append: %d, want 4", got)
	}
}
