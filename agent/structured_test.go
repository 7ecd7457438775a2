package agent_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/faux"
)

// triageSchema is the output schema of the tests: a ticket's label and
// priority.
func triageSchema(t testing.TB) *structpb.Struct {
	return mustStruct(t, map[string]any{
		"type": "object",
		"properties": map[string]any{
			"label":    map[string]any{"type": "string", "enum": []any{"bug", "feature"}},
			"priority": map[string]any{"type": "integer", "minimum": 1, "maximum": 3},
		},
		"required":             []any{"label", "priority"},
		"additionalProperties": false,
	})
}

func submit(t testing.TB, id string, args map[string]any) *agentdv1.AssistantMessage {
	return toolCall(t, id, agent.SubmitOutputTool, args)
}

// typedRun is what a test reads of a run with an output schema.
type typedRun struct {
	evs        []*agentdv1.AgentEvent
	end        *agentdv1.AgentEnd
	errs       []*agentdv1.AgentError
	assistants []*agentdv1.AssistantMessage // at their message_end
	users      []string                     // the texts of user messages after the prompt
}

func readTyped(t testing.TB, evs []*agentdv1.AgentEvent) typedRun {
	t.Helper()
	var r typedRun
	r.evs = evs
	prompts := 0
	for _, ev := range evs {
		if e := ev.GetError(); e != nil {
			r.errs = append(r.errs, e)
		}
		if e := ev.GetAgentEnd(); e != nil {
			r.end = e
		}
		m := ev.GetMessageEnd().GetMessage()
		if a := m.GetAssistant(); a != nil {
			r.assistants = append(r.assistants, a)
		}
		if u := m.GetUser(); u != nil {
			if prompts++; prompts > 1 {
				r.users = append(r.users, u.GetContent()[0].GetText().GetText())
			}
		}
	}
	if r.end == nil {
		t.Fatalf("no agent_end in %s", kinds(evs))
	}
	return r
}

func (h *harness) typed(sessionID string, run *agentdv1.RunRequest) typedRun {
	h.t.Helper()
	s := h.startRun(agent.StartRequest{SessionID: sessionID, Prompt: user("Triage: the app crashes on start."), Run: run}, false)
	return readTyped(h.t, s.rest())
}

// A run with an output schema ends with its answer as structured_output
// on the final assistant message (as stored) and on agent_end, in native
// mode (the answer's text is the JSON object) and in finalizer mode (the
// arguments of submit_output), also after corrections; when the
// corrections are used up it ends OUTPUT_INVALID with the errors in a
// fatal error event and in agent_end.
func TestStructuredOutput(t *testing.T) {
	valid := map[string]any{"label": "bug", "priority": 1.0}
	unknownLabel := map[string]any{"label": "crash", "priority": 1}
	cases := []struct {
		name      string
		tool      bool    // FauxScript.structured_output_tool
		retries   *uint32 // the request's max_output_retries
		responses []*agentdv1.AssistantMessage
		// want: the outcome, the corrections the model got (in order, a
		// part of each), the problem the agent_end names.
		outcome     agentdv1.RunOutcome
		corrections []string
		problem     string
	}{
		{name: "native", responses: []*agentdv1.AssistantMessage{text(`{"label": "bug", "priority": 1}`)},
			outcome: agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED},
		{name: "native in a code fence", responses: []*agentdv1.AssistantMessage{text("```json\n{\"label\": \"bug\", \"priority\": 1}\n```")},
			outcome: agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED},
		{name: "native retry succeeds", responses: []*agentdv1.AssistantMessage{
			text("It is a bug."), text(`{"label": "crash", "priority": 1}`), text(`{"label": "bug", "priority": 1}`)},
			outcome:     agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED,
			corrections: []string{"root: the answer is not a JSON object", "label: must be equal to one of the allowed values"}},
		{name: "native retries exhausted", retries: proto.Uint32(1), responses: []*agentdv1.AssistantMessage{
			text(`{"label": "bug"}`), text(`{"label": "bug", "priority": 9}`), text(`{"label": "bug", "priority": 1}`)},
			outcome:     agentdv1.RunOutcome_RUN_OUTCOME_OUTPUT_INVALID,
			corrections: []string{"priority: must have required properties priority"}, problem: "priority: must be <= 3"},
		{name: "finalizer", tool: true, responses: []*agentdv1.AssistantMessage{submit(t, "c1", valid)},
			outcome: agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED},
		{name: "finalizer retry succeeds", tool: true, responses: []*agentdv1.AssistantMessage{
			submit(t, "c1", unknownLabel), text(`{"label": "bug", "priority": 1}`), submit(t, "c2", valid)},
			outcome:     agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED,
			corrections: []string{"by calling the submit_output tool"}},
		{name: "finalizer retries exhausted", tool: true, retries: proto.Uint32(0), responses: []*agentdv1.AssistantMessage{
			submit(t, "c1", unknownLabel), submit(t, "c2", valid)},
			outcome: agentdv1.RunOutcome_RUN_OUTCOME_OUTPUT_INVALID, problem: "label: must be equal to one of the allowed values"},
		{name: "finalizer plain text exhausted", tool: true, retries: proto.Uint32(1), responses: []*agentdv1.AssistantMessage{
			text("bug"), text("bug, priority 1"), submit(t, "c1", valid)},
			outcome:     agentdv1.RunOutcome_RUN_OUTCOME_OUTPUT_INVALID,
			corrections: []string{"by calling the submit_output tool"}, problem: "not a call of submit_output"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, agent.Options{})
			id := h.session(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Responses: tc.responses, StructuredOutputTool: tc.tool}})
			r := h.typed(id, &agentdv1.RunRequest{OutputSchema: triageSchema(t), MaxOutputRetries: tc.retries})
			if r.end.GetOutcome() != tc.outcome {
				t.Fatalf("outcome %v (%q), want %v; events %s", r.end.GetOutcome(), r.end.GetErrorMessage(), tc.outcome, kinds(r.evs))
			}
			if len(r.users) != len(tc.corrections) {
				t.Fatalf("corrections %q, want %d", r.users, len(tc.corrections))
			}
			for i, c := range tc.corrections {
				if !strings.Contains(r.users[i], c) {
					t.Errorf("correction %d %q does not mention %q", i, r.users[i], c)
				}
			}
			final := r.assistants[len(r.assistants)-1]
			stored := storedAssistants(h, id)
			if len(stored) != len(r.assistants) {
				t.Fatalf("%d assistant messages stored, %d streamed", len(stored), len(r.assistants))
			}
			if tc.outcome == agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
				want := mustStruct(t, valid)
				for name, got := range map[string]*structpb.Struct{"agent_end": r.end.GetStructuredOutput(),
					"the final message_end": final.GetStructuredOutput(), "the stored final message": stored[len(stored)-1].GetStructuredOutput()} {
					if !proto.Equal(got, want) {
						t.Errorf("%s: structured_output %v, want %v", name, got, want)
					}
				}
				for i, a := range stored[:len(stored)-1] {
					if a.GetStructuredOutput() != nil {
						t.Errorf("stored answer %d that did not validate carries structured_output %v", i, a.GetStructuredOutput())
					}
				}
				if len(r.errs) != 0 {
					t.Errorf("error events %v", r.errs)
				}
				if len(r.assistants) != len(tc.responses) {
					t.Errorf("%d answers, want %d: the run must end with the valid one", len(r.assistants), len(tc.responses))
				}
				return
			}
			if r.end.GetStructuredOutput() != nil {
				t.Errorf("agent_end of an invalid answer carries %v", r.end.GetStructuredOutput())
			}
			for _, a := range stored {
				if a.GetStructuredOutput() != nil {
					t.Errorf("a stored answer carries %v", a.GetStructuredOutput())
				}
			}
			if len(r.errs) != 1 || r.errs[0].GetStage() != "output_schema" || !r.errs[0].GetFatal() || !strings.Contains(r.errs[0].GetMessage(), tc.problem) {
				t.Fatalf("error events %v, want one fatal output_schema error naming %q", r.errs, tc.problem)
			}
			if !strings.Contains(r.end.GetErrorMessage(), tc.problem) {
				t.Errorf("agent_end error_message %q does not name %q", r.end.GetErrorMessage(), tc.problem)
			}
			// The last scripted answer (a valid one) was never asked for.
			if len(r.assistants) != len(tc.responses)-1 {
				t.Errorf("%d answers, want %d", len(r.assistants), len(tc.responses)-1)
			}
			// The run's record holds the outcome.
			run, err := h.store.GetRun(context.Background(), r.evs[0].GetRunId())
			if err != nil || run.Outcome != agentdv1.RunOutcome_RUN_OUTCOME_OUTPUT_INVALID {
				t.Errorf("run record %+v, %v; want outcome OUTPUT_INVALID", run, err)
			}
		})
	}
}

func storedAssistants(h *harness, sessionID string) []*agentdv1.AssistantMessage {
	var out []*agentdv1.AssistantMessage
	for _, e := range h.transcript(sessionID) {
		if a := e.GetMessage().GetAssistant(); a != nil {
			out = append(out, a)
		}
	}
	return out
}

// The session's output_schema and max_output_retries are its runs'
// defaults; a request's own replace them.
func TestStructuredOutputSessionDefault(t *testing.T) {
	h := newHarness(t, agent.Options{})
	other := mustStruct(t, map[string]any{"type": "object", "required": []any{"answer"}})
	id := h.session(&agentdv1.SessionConfig{OutputSchema: triageSchema(t), MaxOutputRetries: proto.Uint32(0),
		Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{text(`{"answer": 42}`), text(`{"answer": 42}`), text(`{"answer": 42}`)}}})
	if r := h.typed(id, nil); r.end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_OUTPUT_INVALID || len(r.users) != 0 {
		t.Fatalf("with the session's schema and no retries: outcome %v after corrections %q", r.end.GetOutcome(), r.users)
	}
	if hasTool(h.context(id), agent.SubmitOutputTool) {
		t.Error("GetContext offers submit_output to a model with a native mode")
	}
	finalizer := h.session(&agentdv1.SessionConfig{OutputSchema: triageSchema(t), Faux: &agentdv1.FauxScript{StructuredOutputTool: true}})
	if !hasTool(h.context(finalizer), agent.SubmitOutputTool) {
		t.Error("GetContext does not show the submit_output tool the next run offers")
	}
	r := h.typed(id, &agentdv1.RunRequest{OutputSchema: other})
	if r.end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED || r.end.GetStructuredOutput().GetFields()["answer"].GetNumberValue() != 42 {
		t.Fatalf("with the request's schema: %v %q %v", r.end.GetOutcome(), r.end.GetErrorMessage(), r.end.GetStructuredOutput())
	}
}

// Schemas and retry bounds that cannot work are refused naming the field,
// in a session's configuration and in a run's request; a session tool may
// not take the finalizer's name.
func TestStructuredOutputRefusals(t *testing.T) {
	h := newHarness(t, agent.Options{})
	big := map[string]any{}
	for i := range 1000 {
		big[fmt.Sprintf("property_%d", i)] = map[string]any{"type": "string", "description": strings.Repeat("d", 80)}
	}
	cases := []struct {
		name   string
		schema map[string]any
		want   string
	}{
		{"not an object schema", map[string]any{"type": "array"}, "object schema"},
		{"no type", map[string]any{"properties": map[string]any{}}, "object schema"},
		{"does not compile", map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "nope"}}}, "JSON Schema"},
		{"reference to a file", map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"$ref": "file:///etc/passwd"}}}, "outside the schema"},
		{"too big", map[string]any{"type": "object", "properties": big}, "exceed the limit of 65536"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := mustStruct(t, tc.schema)
			err := h.a.CheckConfig("", &agentdv1.SessionConfig{OutputSchema: s})
			wantField(t, err, "config.output_schema")
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v does not mention %q", err, tc.want)
			}
			wantField(t, agent.CheckOutputSchema("output_schema", s), "output_schema")
			id := h.session(script(text("{}")))
			_, err = h.a.Start(context.Background(), agent.StartRequest{SessionID: id, Prompt: user("hi"), Run: &agentdv1.RunRequest{OutputSchema: s}})
			wantField(t, err, "output_schema")
		})
	}
	wantField(t, h.a.CheckConfig("", &agentdv1.SessionConfig{MaxOutputRetries: proto.Uint32(11)}), "config.max_output_retries")
	wantField(t, agent.CheckMaxOutputRetries("max_output_retries", proto.Uint32(11)), "max_output_retries")
	if err := agent.CheckMaxOutputRetries("max_output_retries", proto.Uint32(10)); err != nil {
		t.Errorf("10 retries refused: %v", err)
	}
	params := mustStruct(t, map[string]any{"type": "object"})
	wantField(t, h.a.CheckConfig("", &agentdv1.SessionConfig{Tools: []*agentdv1.Tool{
		{Name: "lookup", Description: "Looks up.", Parameters: params, Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT},
		{Name: agent.SubmitOutputTool, Description: "Mine.", Parameters: params, Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT},
	}}), "config.tools[1].name")
}

// typedModel is a model of another API whose run calls (those that are
// not a compaction's summary) get the scripted answers in order; it
// records each run call's context and options.
type typedModel struct {
	tool    bool // StructuredOutputTool
	answers []*agentdv1.AssistantMessage

	mu        sync.Mutex
	contexts  []*agentdv1.Context
	options   []provider.Options
	summaries int
}

func (m *typedModel) Resolve(*agentdv1.ModelRef) (provider.Model, provider.StreamFunc, error) {
	model := provider.Model{Provider: "test", ID: "typed", API: "faux", ContextWindow: 200_000, StructuredOutputTool: m.tool}
	return model, func(ctx context.Context, pm provider.Model, c *agentdv1.Context, o provider.Options) provider.Stream {
		m.mu.Lock()
		answer := text("They triaged a crash.")
		if o.OutputSchema != nil || hasTool(c, agent.SubmitOutputTool) {
			if n := len(m.contexts); n < len(m.answers) {
				answer = m.answers[n]
			} else {
				answer = faux.Errored("no answer scripted")
			}
			m.contexts, m.options = append(m.contexts, proto.CloneOf(c)), append(m.options, o)
		} else {
			m.summaries++
		}
		m.mu.Unlock()
		return faux.New(faux.Options{}, faux.Reply(agent.ScriptedAnswer(answer))).Stream(ctx, pm, c, o)
	}, nil
}

func (m *typedModel) List() []*agentdv1.Model { return nil }

func hasTool(c *agentdv1.Context, name string) bool {
	for _, t := range c.GetTools() {
		if t.GetName() == name {
			return true
		}
	}
	return false
}

// Native mode sends the schema with every model call of the run, also
// after a compaction in the middle of the run (a context overflow
// recovered); finalizer mode offers submit_output, with the schema as its
// parameters, beside the session's tools, and never the native option.
func TestStructuredOutputReachesTheModel(t *testing.T) {
	overflow := faux.Errored(provider.ContextOverflowPrefix + "prompt is too long")
	for _, tool := range []bool{false, true} {
		name := map[bool]string{false: "native", true: "finalizer"}[tool]
		t.Run(name, func(t *testing.T) {
			final := text(`{"label": "bug", "priority": 2}`)
			if tool {
				final = submit(t, "c1", map[string]any{"label": "bug", "priority": 2})
			}
			m := &typedModel{tool: tool, answers: []*agentdv1.AssistantMessage{text("a bug"), overflow, final}}
			h := newHarness(t, agent.Options{Models: m})
			params := mustStruct(t, map[string]any{"type": "object"})
			id := h.session(&agentdv1.SessionConfig{Model: &agentdv1.ModelRef{Provider: "test", Id: "typed"},
				Compaction: &agentdv1.CompactionSettings{KeepRecentTokens: 100},
				Tools:      []*agentdv1.Tool{{Name: "lookup", Description: "Looks up.", Parameters: params, Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT}}})
			history := []*agentdv1.AgentMessage{user(strings.Repeat("an old question ", 300)), {Kind: &agentdv1.AgentMessage_Assistant{Assistant: &agentdv1.AssistantMessage{
				Content: texts(strings.Repeat("an old answer ", 300)), Provider: "test", Api: "faux", Model: "typed", StopReason: agentdv1.StopReason_STOP_REASON_STOP}}}}
			if _, err := h.a.AppendMessages(context.Background(), id, history); err != nil {
				t.Fatal(err)
			}
			schema := triageSchema(t)
			r := h.typed(id, &agentdv1.RunRequest{OutputSchema: schema})
			if r.end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED || r.end.GetStructuredOutput().GetFields()["priority"].GetNumberValue() != 2 {
				t.Fatalf("outcome %v %q, output %v; events %s", r.end.GetOutcome(), r.end.GetErrorMessage(), r.end.GetStructuredOutput(), kinds(r.evs))
			}
			compacted := false
			for _, ev := range r.evs {
				compacted = compacted || ev.GetCompactionEnd().GetEntryId() != ""
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			if !compacted || m.summaries != 1 || len(m.contexts) != 3 {
				t.Fatalf("compacted %v, %d summaries, %d run calls; want a compaction and 3 run calls", compacted, m.summaries, len(m.contexts))
			}
			for i, c := range m.contexts {
				if tool {
					if m.options[i].OutputSchema != nil {
						t.Errorf("call %d: native schema sent in finalizer mode", i)
					}
					var def *agentdv1.Tool
					for _, d := range c.GetTools() {
						if d.GetName() == agent.SubmitOutputTool {
							def = d
						}
					}
					if !proto.Equal(def.GetParameters(), schema) || !hasTool(c, "lookup") || def.GetDescription() == "" {
						t.Errorf("call %d: tools %v, want lookup and submit_output with the schema", i, c.GetTools())
					}
					continue
				}
				if !proto.Equal(m.options[i].OutputSchema, schema) || hasTool(c, agent.SubmitOutputTool) {
					t.Errorf("call %d: options schema %v, tools %v", i, m.options[i].OutputSchema, c.GetTools())
				}
			}
		})
	}
}
