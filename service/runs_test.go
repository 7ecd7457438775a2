package service_test

import (
	"fmt"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service"
)

// runsFixture is a session with three runs, oldest first: two that
// completed and one that failed (the faux script has two answers), with
// metadata job=1, job=2 tag=x, job=1.
func runsFixture(t *testing.T) (h *harness, sessionID string, runs []*agentdv1.Run) {
	h = newHarness(t, agent.Options{}, service.ServerOptions{})
	sessionID = h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{textAnswer("one"), textAnswer("two")}}})
	for i, md := range []map[string]string{{"job": "1"}, {"job": "2", "tag": "x"}, {"job": "1"}} {
		evs := h.promptWith(&agentdv1.PromptRequest{SessionId: sessionID, Content: texts(fmt.Sprint("prompt ", i)), Metadata: md})
		for _, ev := range []*agentdv1.AgentEvent{evs[0], evs[len(evs)-1]} {
			got := ev.GetAgentStart().GetMetadata()
			if ev.GetAgentEnd() != nil {
				got = ev.GetAgentEnd().GetMetadata()
			}
			if len(got) != len(md) || got["job"] != md["job"] {
				t.Fatalf("run %d: %s metadata = %v, want %v", i, eventKind(ev), got, md)
			}
		}
		resp, err := h.client.GetRun(h.ctx(), &agentdv1.GetRunRequest{SessionId: sessionID, RunId: evs[0].GetRunId()})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, resp.GetRun())
	}
	return h, sessionID, runs
}

func runIDs(runs []*agentdv1.Run) []string {
	out := []string{}
	for _, r := range runs {
		out = append(out, r.GetId())
	}
	return out
}

// GetRun shows how a run went: its times, outcome, the request with its
// prompt entry and metadata, its usage and error.
func TestGetRun(t *testing.T) {
	h, sid, runs := runsFixture(t)
	first, failed := runs[0], runs[2]
	prompt := h.transcript(sid)[0]
	if first.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED || first.GetEndTime() == nil || first.GetStartTime() == nil ||
		first.GetSessionId() != sid || first.GetUsage() == nil || first.GetLastSeq() == 0 {
		t.Fatalf("first run = %v", first)
	}
	if r := first.GetRequest(); r.GetMethod() != "prompt" || r.GetPromptEntryId() != prompt.GetId() || r.GetMetadata()["job"] != "1" {
		t.Fatalf("first run's request = %v (prompt entry %s)", r, prompt.GetId())
	}
	if failed.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_ERROR || failed.GetErrorMessage() == "" {
		t.Fatalf("failed run = %v", failed)
	}
	other := h.createSession(&agentdv1.SessionConfig{})
	for name, req := range map[string]*agentdv1.GetRunRequest{
		"run of another session": {SessionId: other, RunId: first.GetId()},
		"unknown run":            {SessionId: sid, RunId: "run-nope"},
		"unknown session":        {SessionId: "nope", RunId: first.GetId()},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := h.client.GetRun(h.ctx(), req)
			wantCode(t, err, codes.NotFound, "not found")
		})
	}
	_, err := h.client.GetRun(h.ctx(), &agentdv1.GetRunRequest{SessionId: sid})
	wantCode(t, err, codes.InvalidArgument, "run_id")
}

// ListRuns pages a session's runs newest first and filters them by
// outcome, start time and metadata.
func TestListRuns(t *testing.T) {
	h, sid, runs := runsFixture(t)
	r1, r2, r3 := runs[0].GetId(), runs[1].GetId(), runs[2].GetId()
	cases := []struct {
		name string
		req  *agentdv1.ListRunsRequest
		want []string
	}{
		{"all", &agentdv1.ListRunsRequest{}, []string{r3, r2, r1}},
		{"failed", &agentdv1.ListRunsRequest{Outcomes: []agentdv1.RunOutcome{agentdv1.RunOutcome_RUN_OUTCOME_ERROR}}, []string{r3}},
		{"active", &agentdv1.ListRunsRequest{Outcomes: []agentdv1.RunOutcome{agentdv1.RunOutcome_RUN_OUTCOME_UNSPECIFIED}}, []string{}},
		{"metadata value", &agentdv1.ListRunsRequest{MetadataFilter: map[string]string{"job": "1"}}, []string{r3, r1}},
		{"metadata key", &agentdv1.ListRunsRequest{MetadataFilter: map[string]string{"tag": ""}}, []string{r2}},
		{"started from the second", &agentdv1.ListRunsRequest{StartTimeAfter: runs[1].GetStartTime()}, []string{r3, r2}},
		{"started before the second", &agentdv1.ListRunsRequest{StartTimeBefore: runs[1].GetStartTime()}, []string{r1}},
		{"completed job 1", &agentdv1.ListRunsRequest{Outcomes: []agentdv1.RunOutcome{agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED},
			MetadataFilter: map[string]string{"job": "1"}}, []string{r1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, size := range []int32{0, 1} {
				req := tc.req
				req.SessionId, req.PageSize, req.PageToken = sid, size, ""
				got := []string{}
				for range 5 {
					resp, err := h.client.ListRuns(h.ctx(), req)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, runIDs(resp.GetRuns())...)
					if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
						break
					}
				}
				if !slices.Equal(got, tc.want) {
					t.Fatalf("page size %d: %v, want %v", size, got, tc.want)
				}
			}
		})
	}
	first, err := h.client.ListRuns(h.ctx(), &agentdv1.ListRunsRequest{SessionId: sid, PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		req   *agentdv1.ListRunsRequest
		field string
	}{
		"page size":       {&agentdv1.ListRunsRequest{PageSize: -1}, "page_size"},
		"outcome":         {&agentdv1.ListRunsRequest{Outcomes: []agentdv1.RunOutcome{agentdv1.RunOutcome_RUN_OUTCOME_ERROR, 99}}, "outcomes[1]"},
		"metadata key":    {&agentdv1.ListRunsRequest{MetadataFilter: map[string]string{"no spaces": ""}}, "metadata_filter"},
		"empty range":     {&agentdv1.ListRunsRequest{StartTimeAfter: runs[1].GetStartTime(), StartTimeBefore: runs[0].GetStartTime()}, "start_time_before"},
		"bad time":        {&agentdv1.ListRunsRequest{StartTimeAfter: &timestamppb.Timestamp{Nanos: -1}}, "start_time_after"},
		"garbage token":   {&agentdv1.ListRunsRequest{PageToken: "garbage!"}, "page_token"},
		"token of filter": {&agentdv1.ListRunsRequest{PageToken: first.GetNextPageToken(), MetadataFilter: map[string]string{"job": "1"}}, "page_token"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.req.SessionId = sid
			_, err := h.client.ListRuns(h.ctx(), tc.req)
			wantCode(t, err, codes.InvalidArgument, tc.field)
		})
	}
	_, err = h.client.ListRuns(h.ctx(), &agentdv1.ListRunsRequest{SessionId: "nope"})
	wantCode(t, err, codes.NotFound, "nope")
}

// Per-run settings out of range are refused before a run starts, naming
// the field; so are a session's model settings.
func TestRunSettingsValidation(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	sid := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{textAnswer("one")}}})
	hot, zero := 2.5, 0.0
	many := map[string]string{}
	for i := range 33 {
		many[fmt.Sprint("k", i)] = "v"
	}
	long := make([]byte, 513)
	for i := range long {
		long[i] = 'x'
	}
	for name, tc := range map[string]struct {
		req   *agentdv1.PromptRequest
		field string
	}{
		"temperature":      {&agentdv1.PromptRequest{ModelSettings: &agentdv1.ModelSettings{Temperature: &hot}}, "model_settings.temperature"},
		"top_p":            {&agentdv1.PromptRequest{ModelSettings: &agentdv1.ModelSettings{TopP: &zero}}, "model_settings.top_p"},
		"stop sequences":   {&agentdv1.PromptRequest{ModelSettings: &agentdv1.ModelSettings{StopSequences: []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}}}, "model_settings.stop_sequences"},
		"empty stop":       {&agentdv1.PromptRequest{ModelSettings: &agentdv1.ModelSettings{StopSequences: []string{"a", ""}}}, "model_settings.stop_sequences[1]"},
		"tool choice":      {&agentdv1.PromptRequest{ModelSettings: &agentdv1.ModelSettings{ToolChoice: &agentdv1.ToolChoice{Mode: agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL}}}, "model_settings.tool_choice.tool_name"},
		"too much meta":    {&agentdv1.PromptRequest{Metadata: many}, "metadata"},
		"metadata key":     {&agentdv1.PromptRequest{Metadata: map[string]string{"a b": "v"}}, "metadata"},
		"metadata value":   {&agentdv1.PromptRequest{Metadata: map[string]string{"k": string(long)}}, `metadata["k"]`},
		"unknown tool":     {&agentdv1.PromptRequest{Tools: []string{"read"}}, "tools[0]"},
		"model":            {&agentdv1.PromptRequest{Model: &agentdv1.ModelRef{Provider: "faux", Id: "other"}}, "model.id"},
		"model without id": {&agentdv1.PromptRequest{Model: &agentdv1.ModelRef{Provider: "faux"}}, "model.id"},
		"system addition":  {&agentdv1.PromptRequest{SystemPromptAppend: string(make([]byte, agent.MaxSystemPromptAppendBytes+1))}, "system_prompt_append"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.req.SessionId, tc.req.Content = sid, texts("hi")
			stream, err := h.client.Prompt(h.ctx(), tc.req)
			if err == nil {
				_, err = drain(stream)
			}
			wantCode(t, err, codes.InvalidArgument, tc.field)
		})
	}
	stream, err := h.client.Continue(h.ctx(), &agentdv1.ContinueRequest{SessionId: sid, Metadata: map[string]string{"": "v"}})
	if err == nil {
		_, err = drain(stream)
	}
	wantCode(t, err, codes.InvalidArgument, "metadata")
	_, err = h.client.CreateSession(h.ctx(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{ModelSettings: &agentdv1.ModelSettings{TopP: &zero}}})
	wantCode(t, err, codes.InvalidArgument, "config.model_settings.top_p")
	if n := len(h.transcript(sid)); n != 0 {
		t.Fatalf("refused prompts stored %d entries", n)
	}
}
