package service_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service"
)

func labelSchema(t *testing.T) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(map[string]any{
		"type":       "object",
		"properties": map[string]any{"label": map[string]any{"type": "string", "enum": []any{"bug", "feature"}}},
		"required":   []any{"label"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Over gRPC a client reads the typed answer of a run with an output
// schema on the final assistant message's message_end, on agent_end and
// in the transcript, in native mode and through submit_output; an answer
// that never validates ends the run OUTPUT_INVALID with a fatal
// output_schema error.
func TestStructuredOutputOverGRPC(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	want, _ := structpb.NewStruct(map[string]any{"label": "feature"})
	cases := []struct {
		name      string
		script    *agentdv1.FauxScript
		retries   *uint32
		outcome   agentdv1.RunOutcome
		wantFinal bool
	}{
		{"native", &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{textAnswer(`{"label": "feature"}`)}},
			nil, agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED, true},
		{"finalizer", &agentdv1.FauxScript{StructuredOutputTool: true, Responses: []*agentdv1.AssistantMessage{
			toolCallAnswer(t, "c1", agent.SubmitOutputTool, map[string]any{"label": "feature"})}},
			nil, agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED, true},
		{"invalid", &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{textAnswer(`{"label": "chore"}`), textAnswer(`{"label": "chore"}`)}},
			proto.Uint32(1), agentdv1.RunOutcome_RUN_OUTCOME_OUTPUT_INVALID, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := h.createSession(&agentdv1.SessionConfig{Faux: tc.script})
			evs := h.promptWith(&agentdv1.PromptRequest{SessionId: id, Content: texts("Triage: add dark mode."),
				OutputSchema: labelSchema(t), MaxOutputRetries: tc.retries})
			end := evs[len(evs)-1].GetAgentEnd()
			if end.GetOutcome() != tc.outcome {
				t.Fatalf("outcome %v (%q), want %v: %s", end.GetOutcome(), end.GetErrorMessage(), tc.outcome, kinds(evs))
			}
			var final *agentdv1.AssistantMessage
			var finalID string
			var errs []*agentdv1.AgentError
			for _, ev := range evs {
				if a := ev.GetMessageEnd().GetMessage().GetAssistant(); a != nil {
					final, finalID = a, ev.GetMessageEnd().GetEntryId()
				}
				if e := ev.GetError(); e != nil {
					errs = append(errs, e)
				}
			}
			var stored *agentdv1.AssistantMessage
			for _, e := range h.transcript(id) {
				if e.GetId() == finalID {
					stored = e.GetMessage().GetAssistant()
				}
			}
			if !tc.wantFinal {
				if end.GetStructuredOutput() != nil || final.GetStructuredOutput() != nil || stored.GetStructuredOutput() != nil {
					t.Errorf("an invalid answer carries structured output: %v / %v", end.GetStructuredOutput(), final.GetStructuredOutput())
				}
				if len(errs) != 1 || errs[0].GetStage() != "output_schema" || !errs[0].GetFatal() || end.GetErrorMessage() != errs[0].GetMessage() {
					t.Errorf("error events %v, agent_end %q; want one fatal output_schema error with agent_end's text", errs, end.GetErrorMessage())
				}
				return
			}
			for name, got := range map[string]*structpb.Struct{"agent_end": end.GetStructuredOutput(),
				"message_end": final.GetStructuredOutput(), "GetTranscript": stored.GetStructuredOutput()} {
				if !proto.Equal(got, want) {
					t.Errorf("%s: structured_output %v, want %v", name, got, want)
				}
			}
		})
	}
}

// A schema or retry bound that cannot work is refused with
// INVALID_ARGUMENT naming the field, at CreateSession, UpdateSession,
// Prompt and Continue, and changes nothing.
func TestStructuredOutputRefusalsOverGRPC(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	notObject, _ := structpb.NewStruct(map[string]any{"type": "string"})
	params, _ := structpb.NewStruct(map[string]any{"type": "object"})
	_, err := h.client.CreateSession(h.ctx(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{OutputSchema: notObject}})
	wantCode(t, err, codes.InvalidArgument, "object schema")
	wantField(t, err, "config.output_schema")
	_, err = h.client.CreateSession(h.ctx(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{MaxOutputRetries: proto.Uint32(11)}})
	wantField(t, err, "config.max_output_retries")
	_, err = h.client.CreateSession(h.ctx(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{Tools: []*agentdv1.Tool{
		{Name: agent.SubmitOutputTool, Description: "Mine.", Parameters: params, Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT}}}})
	wantCode(t, err, codes.InvalidArgument, "reserved")
	wantField(t, err, "config.tools[0].name")

	id := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
	_, err = h.client.UpdateSession(h.ctx(), &agentdv1.UpdateSessionRequest{SessionId: id, Config: &agentdv1.SessionConfig{OutputSchema: notObject},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"config.output_schema"}}})
	wantField(t, err, "config.output_schema")
	if _, err := h.client.UpdateSession(h.ctx(), &agentdv1.UpdateSessionRequest{SessionId: id, Config: &agentdv1.SessionConfig{OutputSchema: labelSchema(t)},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"config.output_schema"}}}); err != nil {
		t.Fatalf("UpdateSession with a valid schema: %v", err)
	}

	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("hi"), OutputSchema: notObject})
	if err == nil {
		_, err = drain(stream)
	}
	wantField(t, err, "output_schema")
	stream, err = h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("hi"), MaxOutputRetries: proto.Uint32(11)})
	if err == nil {
		_, err = drain(stream)
	}
	wantField(t, err, "max_output_retries")
	cont, err := h.client.Continue(h.ctx(), &agentdv1.ContinueRequest{SessionId: id, OutputSchema: notObject})
	if err == nil {
		_, err = drain(cont)
	}
	wantField(t, err, "output_schema")
	if n := len(h.transcript(id)); n != 0 {
		t.Fatalf("refused requests left %d entries", n)
	}
}
