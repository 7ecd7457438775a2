package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// testRunRecords: a run keeps the request that started it, the entry of
// its prompt, and its usage and structured output, across a reopen; a run
// stored without a request reads fine.
func testRunRecords(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	mustAppend(t, s, sess.ID, userEntry("hi"))
	prompt := allEntries(t, s, sess.ID)[0].GetId()
	schema, err := structpb.NewStruct(map[string]any{"type": "object"})
	if err != nil {
		t.Fatal(err)
	}
	temp := 0.5
	req := &agentdv1.RunRequest{
		Method: "prompt", RequestId: "req-1", PromptEntryId: "ignored until SetRunPrompt",
		Model:         &agentdv1.ModelRef{Provider: "faux", Id: "faux-1"},
		ThinkingLevel: agentdv1.ThinkingLevel_THINKING_LEVEL_HIGH, SystemPromptAppend: "be brief", Tools: []string{"read"},
		ModelSettings: &agentdv1.ModelSettings{Temperature: &temp, StopSequences: []string{"END"}},
		OutputSchema:  schema, Metadata: map[string]string{"ticket": "T-1", "team": "ops"},
	}
	if err := s.StartRun(ctx, sess.ID, "with-request", req); err != nil {
		t.Fatal(err)
	}
	if err := s.StartRun(ctx, sess.ID, "without-request", nil); err != nil {
		t.Fatal(err)
	}
	r, err := s.GetRun(ctx, "with-request")
	if err != nil {
		t.Fatal(err)
	}
	want := proto.CloneOf(req)
	want.PromptEntryId = ""
	if !proto.Equal(r.Request, want) {
		t.Fatalf("stored request = %v, want %v", r.Request, want)
	}
	if err := s.SetRunPrompt(ctx, "with-request", prompt); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRunPrompt(ctx, "nope", prompt); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("SetRunPrompt(unknown): %v, want ErrNotFound", err)
	}
	usage := &agentdv1.Usage{Input: 10, Output: 5, TotalTokens: 15, Cost: &agentdv1.Cost{Total: 0.25}}
	output, err := structpb.NewStruct(map[string]any{"label": "bug"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EndRun(ctx, "with-request", persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED, Usage: usage, StructuredOutput: output}); err != nil {
		t.Fatal(err)
	}
	if err := s.EndRun(ctx, "without-request", persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_ERROR, ErrorMessage: "boom"}); err != nil {
		t.Fatal(err)
	}
	s = h.Reopen(t, s)
	t.Cleanup(func() { _ = s.Close() })
	r, err = s.GetRun(ctx, "with-request")
	if err != nil {
		t.Fatal(err)
	}
	want.PromptEntryId = prompt
	if !proto.Equal(r.Request, want) || !proto.Equal(r.Usage, usage) || !proto.Equal(r.StructuredOutput, output) {
		t.Fatalf("after reopen: request %v usage %v output %v", r.Request, r.Usage, r.StructuredOutput)
	}
	bare, err := s.GetRun(ctx, "without-request")
	if err != nil || bare.Request != nil || bare.Usage != nil || bare.StructuredOutput != nil || bare.ErrorMessage != "boom" {
		t.Fatalf("run without request = %+v, %v", bare, err)
	}
}

// testListRuns: a session's runs newest first, a page at a time, by
// outcome, start time and metadata; tokens are bound to their filters.
func testListRuns(t *testing.T, h Harness) {
	ctx := context.Background()
	s := open(t, h)
	sess := mustCreate(t, s, persistence.CreateSessionParams{})
	other := mustCreate(t, s, persistence.CreateSessionParams{})
	outcomes := []agentdv1.RunOutcome{
		agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED, agentdv1.RunOutcome_RUN_OUTCOME_ERROR, agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED,
		agentdv1.RunOutcome_RUN_OUTCOME_ABORTED, agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED, agentdv1.RunOutcome_RUN_OUTCOME_UNSPECIFIED,
	}
	var runs []*persistence.Run
	for i, o := range outcomes {
		id := fmt.Sprintf("run-%d", i)
		md := map[string]string{"job": fmt.Sprint(i % 2)}
		if i == 2 {
			md["flag"] = "x"
		}
		if err := s.StartRun(ctx, sess.ID, id, &agentdv1.RunRequest{Method: "prompt", Metadata: md}); err != nil {
			t.Fatal(err)
		}
		if o != agentdv1.RunOutcome_RUN_OUTCOME_UNSPECIFIED {
			if err := s.EndRun(ctx, id, persistence.RunEnd{Outcome: o}); err != nil {
				t.Fatal(err)
			}
		}
		r, err := s.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	if err := s.StartRun(ctx, other.ID, "elsewhere", &agentdv1.RunRequest{Metadata: map[string]string{"job": "0"}}); err != nil {
		t.Fatal(err)
	}
	// Newest first: by start time, then id, descending.
	newest := slices.Clone(runs)
	slices.SortFunc(newest, func(a, b *persistence.Run) int {
		return -cmp.Or(a.StartTime.Compare(b.StartTime), cmp.Compare(a.ID, b.ID))
	})
	runIDs := func(rs []*persistence.Run) []string {
		out := []string{}
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	pick := func(keep func(i int, r *persistence.Run) bool) []string {
		out := []string{}
		for _, r := range newest {
			if keep(slices.Index(runIDs(runs), r.ID), r) {
				out = append(out, r.ID)
			}
		}
		return out
	}
	cases := []struct {
		name string
		req  persistence.ListRunsRequest
		want []string
	}{
		{"all", persistence.ListRunsRequest{}, pick(func(int, *persistence.Run) bool { return true })},
		{"completed", persistence.ListRunsRequest{Outcomes: []agentdv1.RunOutcome{agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED}},
			pick(func(i int, _ *persistence.Run) bool { return outcomes[i] == agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED })},
		{"active or aborted", persistence.ListRunsRequest{Outcomes: []agentdv1.RunOutcome{agentdv1.RunOutcome_RUN_OUTCOME_UNSPECIFIED, agentdv1.RunOutcome_RUN_OUTCOME_ABORTED}},
			pick(func(i int, _ *persistence.Run) bool { return i == 3 || i == 5 })},
		{"start range", persistence.ListRunsRequest{StartAfter: runs[1].StartTime, StartBefore: runs[4].StartTime},
			pick(func(_ int, r *persistence.Run) bool {
				return !r.StartTime.Before(runs[1].StartTime) && r.StartTime.Before(runs[4].StartTime)
			})},
		{"metadata value", persistence.ListRunsRequest{Metadata: map[string]string{"job": "1"}}, pick(func(i int, _ *persistence.Run) bool { return i%2 == 1 })},
		{"metadata key", persistence.ListRunsRequest{Metadata: map[string]string{"flag": ""}}, []string{"run-2"}},
		{"metadata both", persistence.ListRunsRequest{Metadata: map[string]string{"flag": "x", "job": "1"}}, []string{}},
		{"outcome and metadata", persistence.ListRunsRequest{Outcomes: []agentdv1.RunOutcome{agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED}, Metadata: map[string]string{"job": "0"}},
			pick(func(i int, _ *persistence.Run) bool {
				return i%2 == 0 && outcomes[i] == agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED
			})},
	}
	for _, tc := range cases {
		for _, size := range []int{0, 1, 2} {
			t.Run(fmt.Sprintf("%s/page%d", tc.name, size), func(t *testing.T) {
				req := tc.req
				req.SessionID, req.PageSize = sess.ID, size
				got := []string{}
				for pages := 0; ; pages++ {
					if pages > len(runs)+1 {
						t.Fatal("the listing does not end")
					}
					page, err := s.ListRuns(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					if size > 0 && len(page.Runs) > size {
						t.Fatalf("page of %d runs, asked for %d", len(page.Runs), size)
					}
					got = append(got, runIDs(page.Runs)...)
					if page.NextPageToken == "" {
						break
					}
					req.PageToken = page.NextPageToken
				}
				if !slices.Equal(got, tc.want) {
					t.Fatalf("ListRuns = %v, want %v", got, tc.want)
				}
			})
		}
	}
	page, err := s.ListRuns(ctx, persistence.ListRunsRequest{SessionID: sess.ID, PageSize: 1})
	if err != nil || len(page.Runs) != 1 || !proto.Equal(page.Runs[0].Request, runs[slices.Index(runIDs(runs), page.Runs[0].ID)].Request) {
		t.Fatalf("first page = %+v, %v", page, err)
	}
	for name, req := range map[string]persistence.ListRunsRequest{
		"another session":  {SessionID: other.ID, PageToken: page.NextPageToken},
		"another filter":   {SessionID: sess.ID, PageToken: page.NextPageToken, Outcomes: []agentdv1.RunOutcome{agentdv1.RunOutcome_RUN_OUTCOME_ERROR}},
		"not a token":      {SessionID: sess.ID, PageToken: "garbage!"},
		"a sessions token": {SessionID: sess.ID, PageToken: persistence.EncodePageToken(persistence.ListingSessions, "", 5)},
		"negative size":    {SessionID: sess.ID, PageSize: -1},
	} {
		if _, err := s.ListRuns(ctx, req); !errors.Is(err, persistence.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.ListRuns(ctx, persistence.ListRunsRequest{SessionID: "nope"}); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("unknown session: %v, want ErrNotFound", err)
	}
	if err := s.DeleteSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	page, err = s.ListRuns(ctx, persistence.ListRunsRequest{SessionID: other.ID, Metadata: map[string]string{"job": "0"}})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].ID != "elsewhere" {
		t.Fatalf("the other session's runs = %+v, %v", page, err)
	}
}

// testClaimedRunRecords: a claimed run keeps its request as StartRun's
// does; its prompt entry and end are written under its fence, and a lost
// fence writes neither.
func testClaimedRunRecords(t *testing.T, e *sharedEnv) {
	ctx := context.Background()
	s := e.s
	sid := e.session(s)
	req := &agentdv1.RunRequest{Method: "continue", Metadata: map[string]string{"job": "7"}}
	f, err := s.ClaimRun(ctx, sid, "claimed", "a", time.Minute, req)
	if err != nil {
		t.Fatal(err)
	}
	w := s.Fenced(f)
	if err := w.SetRunPrompt(ctx, "other", "e1"); !errors.Is(err, persistence.ErrInvalid) {
		t.Fatalf("SetRunPrompt of another run: %v, want ErrInvalid", err)
	}
	if err := w.SetRunPrompt(ctx, "claimed", "e1"); err != nil {
		t.Fatal(err)
	}
	usage := &agentdv1.Usage{Input: 3, Output: 4, TotalTokens: 7}
	if err := w.EndRun(ctx, "claimed", persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED, Usage: usage}); err != nil {
		t.Fatal(err)
	}
	r, err := s.GetRun(ctx, "claimed")
	want := proto.CloneOf(req)
	want.PromptEntryId = "e1"
	if err != nil || !proto.Equal(r.Request, want) || !proto.Equal(r.Usage, usage) {
		t.Fatalf("claimed run = %+v, %v", r, err)
	}
	page, err := s.ListRuns(ctx, persistence.ListRunsRequest{SessionID: sid, Metadata: map[string]string{"job": "7"}})
	if err != nil || len(page.Runs) != 1 {
		t.Fatalf("ListRuns by the claimed run's metadata = %+v, %v", page, err)
	}
	if err := w.SetRunPrompt(ctx, "claimed", "e2"); !errors.Is(err, persistence.ErrFenced) {
		t.Fatalf("SetRunPrompt after the end: %v, want ErrFenced", err)
	}
}
