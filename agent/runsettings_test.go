package agent_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/faux"
)

// seenCall is one model call as the model saw it.
type seenCall struct {
	model   provider.Model
	context *agentdv1.Context
	opts    provider.Options
}

// callRecorder offers two models, test/small (1000 output tokens at most)
// and test/big, which record each call and answer with a text, or fail
// when the last user message says "fail".
type callRecorder struct {
	mu    sync.Mutex
	calls []seenCall
}

func (r *callRecorder) Resolve(ref *agentdv1.ModelRef) (provider.Model, provider.StreamFunc, error) {
	model := provider.Model{Provider: "test", ID: ref.GetId(), API: "faux", ContextWindow: 200_000}
	switch ref.GetId() {
	case "small":
		model.MaxOutputTokens = 1000
	case "big":
		model.MaxOutputTokens = 64_000
	default:
		return provider.Model{}, nil, fmt.Errorf("unknown model %q", ref.GetId())
	}
	answer := func(_ context.Context, c *agentdv1.Context, call faux.Call) (*agentdv1.AssistantMessage, error) {
		r.mu.Lock()
		r.calls = append(r.calls, seenCall{model: call.Model, context: proto.CloneOf(c), opts: call.Options})
		r.mu.Unlock()
		msgs := c.GetMessages()
		if last := msgs[len(msgs)-1].GetUser(); last != nil && last.GetContent()[0].GetText().GetText() == "fail" {
			return nil, fmt.Errorf("the model fell over")
		}
		return faux.Message(faux.Text("done")), nil
	}
	return model, func(ctx context.Context, m provider.Model, c *agentdv1.Context, o provider.Options) provider.Stream {
		return faux.New(faux.Options{}, answer).Stream(ctx, m, c, o)
	}, nil
}

func (r *callRecorder) List() []*agentdv1.Model { return nil }

func (r *callRecorder) last(t *testing.T) seenCall {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 {
		t.Fatal("the model was never called")
	}
	return r.calls[len(r.calls)-1]
}

// settingsSession is a session on test/small with two client tools, a
// system prompt, a thinking level and model settings of its own.
func settingsSession(t *testing.T, h *harness) string {
	params := mustStruct(t, map[string]any{"type": "object"})
	temp := 0.3
	return h.session(&agentdv1.SessionConfig{
		Model:         &agentdv1.ModelRef{Provider: "test", Id: "small"},
		SystemPrompt:  "You are terse.",
		ThinkingLevel: agentdv1.ThinkingLevel_THINKING_LEVEL_LOW,
		Tools: []*agentdv1.Tool{
			{Name: "alpha", Description: "First.", Parameters: params, Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT},
			{Name: "beta", Description: "Second.", Parameters: params, Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT},
		},
		ModelSettings: &agentdv1.ModelSettings{Temperature: &temp, StopSequences: []string{"STOP-A"},
			ProviderOptions: mustStruct(t, map[string]any{"seed": 1, "top_k": 40})},
	})
}

func toolNames(c *agentdv1.Context) []string {
	var out []string
	for _, d := range c.GetTools() {
		out = append(out, d.GetName())
	}
	return out
}

// Each per-run override reaches the model call of that run only: the
// model, the thinking level, the system prompt addition, the tool subset
// and the model settings merged field by field over the session's; the
// metadata is echoed on agent_start and agent_end and stored with the
// run's request, with the prompt's entry and the run's usage.
func TestRunSettingsReachTheModel(t *testing.T) {
	rec := &callRecorder{}
	h := newHarness(t, agent.Options{Models: rec})
	id := settingsSession(t, h)
	topP := 0.9
	run := &agentdv1.RunRequest{
		Model:              &agentdv1.ModelRef{Provider: "test", Id: "big"},
		ThinkingLevel:      agentdv1.ThinkingLevel_THINKING_LEVEL_HIGH,
		SystemPromptAppend: "Answer in French.",
		Tools:              []string{"beta"},
		ModelSettings: &agentdv1.ModelSettings{TopP: &topP, MaxOutputTokens: 5000, StopSequences: []string{"STOP-B"},
			ToolChoice:      &agentdv1.ToolChoice{Mode: agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "beta"},
			ProviderOptions: mustStruct(t, map[string]any{"top_k": 10})},
		Metadata: map[string]string{"ticket": "T-7"},
	}
	s := h.startRun(agent.StartRequest{SessionID: id, Prompt: user("hello"), Run: run}, false)
	evs, err := s.drain()
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []*agentdv1.AgentEvent{evs[0], evs[len(evs)-1]} {
		var md map[string]string
		if st := ev.GetAgentStart(); st != nil {
			md = st.GetMetadata()
		} else if end := ev.GetAgentEnd(); end != nil {
			md = end.GetMetadata()
			if end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
				t.Fatalf("agent_end = %v", end)
			}
		} else {
			t.Fatalf("event %v is neither agent_start nor agent_end", ev)
		}
		if md["ticket"] != "T-7" || len(md) != 1 {
			t.Errorf("%T metadata = %v, want ticket=T-7", ev.GetEvent(), md)
		}
	}
	call := rec.last(t)
	if call.model.ID != "big" || call.opts.ThinkingLevel != agentdv1.ThinkingLevel_THINKING_LEVEL_HIGH {
		t.Errorf("model %s thinking %v, want big and HIGH", call.model.ID, call.opts.ThinkingLevel)
	}
	if got := call.context.GetSystemPrompt(); got != "You are terse.\n\nAnswer in French." {
		t.Errorf("system prompt = %q", got)
	}
	if got := toolNames(call.context); !slices.Equal(got, []string{"beta"}) {
		t.Errorf("tools = %v, want [beta]", got)
	}
	ms := call.opts.Settings
	if call.opts.MaxTokens != 5000 || ms.GetTemperature() != 0.3 || ms.GetTopP() != 0.9 || !slices.Equal(ms.GetStopSequences(), []string{"STOP-B"}) ||
		ms.GetToolChoice().GetToolName() != "beta" {
		t.Errorf("settings = %v, max tokens %d", ms, call.opts.MaxTokens)
	}
	if po := ms.GetProviderOptions().AsMap(); po["seed"] != 1.0 || po["top_k"] != 10.0 || len(po) != 2 {
		t.Errorf("provider options = %v, want seed from the session and top_k from the run", po)
	}

	stored, err := h.store.GetRun(context.Background(), s.runID)
	if err != nil {
		t.Fatal(err)
	}
	prompt := h.transcript(id)[0]
	if r := stored.Request; r.GetMethod() != "prompt" || r.GetPromptEntryId() != prompt.GetId() || r.GetMetadata()["ticket"] != "T-7" ||
		r.GetModel().GetId() != "big" || !slices.Equal(r.GetTools(), []string{"beta"}) || r.GetSystemPromptAppend() != "Answer in French." {
		t.Errorf("stored request = %v (prompt entry %s)", r, prompt.GetId())
	}
	if stored.Usage == nil {
		t.Error("the run's usage was not stored")
	}

	// The next run without overrides is the session's again.
	s = h.startRun(agent.StartRequest{SessionID: id, Prompt: user("again")}, false)
	evs, err = s.drain()
	if err != nil {
		t.Fatal(err)
	}
	if md := evs[0].GetAgentStart().GetMetadata(); len(md) != 0 {
		t.Errorf("agent_start of a run without metadata = %v", md)
	}
	call = rec.last(t)
	if call.model.ID != "small" || call.opts.ThinkingLevel != agentdv1.ThinkingLevel_THINKING_LEVEL_LOW || call.context.GetSystemPrompt() != "You are terse." ||
		!slices.Equal(toolNames(call.context), []string{"alpha", "beta"}) || call.opts.MaxTokens != 0 ||
		!slices.Equal(call.opts.Settings.GetStopSequences(), []string{"STOP-A"}) || call.opts.Settings.TopP != nil {
		t.Errorf("second run: model %s opts %+v prompt %q tools %v", call.model.ID, call.opts, call.context.GetSystemPrompt(), toolNames(call.context))
	}
}

// A per-run setting the run cannot use is refused before anything is
// stored, naming the request's field.
func TestRunSettingsRefused(t *testing.T) {
	rec := &callRecorder{}
	h := newHarness(t, agent.Options{Models: rec})
	id := settingsSession(t, h)
	cases := []struct {
		name  string
		run   *agentdv1.RunRequest
		field string
	}{
		{"unknown tool", &agentdv1.RunRequest{Tools: []string{"beta", "gamma"}}, "tools[1]"},
		{"tool twice", &agentdv1.RunRequest{Tools: []string{"beta", "beta"}}, "tools[1]"},
		{"model without id", &agentdv1.RunRequest{Model: &agentdv1.ModelRef{Provider: "test"}}, "model.id"},
		{"unknown model", &agentdv1.RunRequest{Model: &agentdv1.ModelRef{Provider: "test", Id: "huge"}}, "model"},
		{"unknown faux model", &agentdv1.RunRequest{Model: &agentdv1.ModelRef{Provider: "faux", Id: "other"}}, "model.id"},
		{"faux model without id", &agentdv1.RunRequest{Model: &agentdv1.ModelRef{Provider: "faux"}}, "model.id"},
		{"too many output tokens", &agentdv1.RunRequest{ModelSettings: &agentdv1.ModelSettings{MaxOutputTokens: 1001}}, "model_settings.max_output_tokens"},
		{"tool choice outside the subset", &agentdv1.RunRequest{Tools: []string{"beta"},
			ModelSettings: &agentdv1.ModelSettings{ToolChoice: &agentdv1.ToolChoice{Mode: agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "alpha"}}},
			"model_settings.tool_choice.tool_name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.a.Start(context.Background(), agent.StartRequest{SessionID: id, Prompt: user("hello"), Run: tc.run})
			wantField(t, err, tc.field)
		})
	}
	page, err := h.store.ListRuns(context.Background(), persistence.ListRunsRequest{SessionID: id})
	if err != nil || len(page.Runs) != 0 {
		t.Fatalf("runs after refusals: %+v, %v", page, err)
	}
	if n := len(h.transcript(id)); n != 0 {
		t.Fatalf("the transcript has %d entries after refusals", n)
	}
}

// A model beyond the tenant's ceiling is refused for a run as it is for
// the session, naming the request's field.
func TestRunModelWithinTheCeiling(t *testing.T) {
	h := newHarness(t, agent.Options{Models: &callRecorder{}, Ceilings: agent.Ceilings{Default: agent.Ceiling{
		Models: agent.Limit{Values: []string{"test/small"}, Setting: "default.models"},
	}}})
	id := settingsSession(t, h)
	_, err := h.a.Start(context.Background(), agent.StartRequest{SessionID: id, Prompt: user("hello"),
		Run: &agentdv1.RunRequest{Model: &agentdv1.ModelRef{Provider: "test", Id: "big"}}})
	wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_TENANT_CEILING, "(model allows")
}

// A Continue without an output schema keeps the schema of the run before
// it on the path when that run did not deliver its answer, and not after
// one that completed.
func TestContinueKeepsTheSchemaOfAFailedRun(t *testing.T) {
	h := newHarness(t, agent.Options{Models: &callRecorder{}})
	id := settingsSession(t, h)
	schema := mustStruct(t, map[string]any{"type": "object", "required": []any{"label"}})
	record := func(s *stream) *persistence.Run {
		t.Helper()
		if _, err := s.drain(); err != nil {
			t.Fatal(err)
		}
		r, err := h.store.GetRun(context.Background(), s.runID)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	failed := record(h.startRun(agent.StartRequest{SessionID: id, Prompt: user("fail"), Run: &agentdv1.RunRequest{OutputSchema: schema}}, false))
	if failed.Outcome != agentdv1.RunOutcome_RUN_OUTCOME_ERROR {
		t.Fatalf("first run ended %v, want ERROR", failed.Outcome)
	}
	// Its prompt still says "fail": the Continue fails as well, and keeps
	// the schema again.
	cont := record(h.startRun(agent.StartRequest{SessionID: id}, false))
	if cont.Request.GetMethod() != "continue" || !proto.Equal(cont.Request.GetOutputSchema(), schema) {
		t.Fatalf("Continue after a failed run: request %v, want the failed run's schema", cont.Request)
	}
	other := mustStruct(t, map[string]any{"type": "object"})
	own := record(h.startRun(agent.StartRequest{SessionID: id, Run: &agentdv1.RunRequest{OutputSchema: other}}, false))
	if !proto.Equal(own.Request.GetOutputSchema(), other) {
		t.Fatalf("Continue with its own schema stored %v", own.Request.GetOutputSchema())
	}
	done := record(h.startRun(agent.StartRequest{SessionID: id, Prompt: user("fine")}, false))
	if done.Outcome != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED || done.Request.GetOutputSchema() != nil {
		t.Fatalf("plain prompt: %v %v", done.Outcome, done.Request)
	}
	if _, err := h.a.AppendMessages(context.Background(), id, []*agentdv1.AgentMessage{user("more")}); err != nil {
		t.Fatal(err)
	}
	after := record(h.startRun(agent.StartRequest{SessionID: id}, false))
	if after.Request.GetOutputSchema() != nil {
		t.Fatalf("Continue after a completed run kept schema %v", after.Request.GetOutputSchema())
	}
	if !strings.HasPrefix(after.ID, "run-") {
		t.Fatalf("run id %q", after.ID)
	}
}

// The run record of a Continue names the call's fields.
func TestRunRecordOfAContinue(t *testing.T) {
	h := newHarness(t, agent.Options{Models: &callRecorder{}})
	id := settingsSession(t, h)
	if _, err := h.a.AppendMessages(context.Background(), id, []*agentdv1.AgentMessage{user("hi")}); err != nil {
		t.Fatal(err)
	}
	s := h.startRun(agent.StartRequest{SessionID: id, RequestID: "req-9", Run: &agentdv1.RunRequest{Method: "continue", Metadata: map[string]string{"k": "v"}}}, false)
	if _, err := s.drain(); err != nil {
		t.Fatal(err)
	}
	r, err := h.store.GetRun(context.Background(), s.runID)
	if err != nil {
		t.Fatal(err)
	}
	want := &agentdv1.RunRequest{Method: "continue", RequestId: "req-9", Metadata: map[string]string{"k": "v"}}
	if !proto.Equal(r.Request, want) {
		t.Fatalf("record = %v, want %v", r.Request, want)
	}
}
