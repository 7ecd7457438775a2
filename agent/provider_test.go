package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/catalog"
)

// anthropicWire serves recorded Anthropic Messages streams in order and
// keeps every request body.
type anthropicWire struct {
	mu      sync.Mutex
	streams []string
	bodies  []string
}

func (w *anthropicWire) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.mu.Lock()
	w.bodies = append(w.bodies, string(body))
	n := len(w.bodies)
	w.mu.Unlock()
	data, err := os.ReadFile(w.streams[min(n, len(w.streams))-1])
	if err != nil {
		http.Error(rw, err.Error(), 500)
		return
	}
	rw.Header().Set("Content-Type", "text/event-stream")
	rw.Write(data)
}

// anthropicRegistry is the built-in model catalog with the Anthropic
// provider pointed at wire, served over httptest for the test's life.
func anthropicRegistry(t *testing.T, wire *anthropicWire) *catalog.Registry {
	t.Helper()
	return wiredRegistry(t, "anthropic", wire)
}

// wiredRegistry is the built-in model catalog with one provider pointed
// at wire (recorded streams in order, any API's), served over httptest
// for the test's life.
func wiredRegistry(t *testing.T, name string, wire *anthropicWire) *catalog.Registry {
	t.Helper()
	srv := httptest.NewServer(wire)
	t.Cleanup(srv.Close)
	cfg := catalog.Builtin()
	p := cfg.Providers[name]
	p.BaseURL, p.APIKey, p.APIKeyEnv = srv.URL, "test-key", ""
	cfg.Providers[name] = p
	reg, err := catalog.NewRegistry(cfg, catalog.Options{Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestRealProviderStreamsThroughAgentd runs a session on the Anthropic
// adapter (official SDK, recorded wire stream over httptest) exactly like a
// faux session: thinking with its signature, a tool call, the tool, and a
// second model call that sends the signature back byte for byte.
func TestRealProviderStreamsThroughAgentd(t *testing.T) {
	wire := &anthropicWire{streams: []string{"../provider/anthropic/testdata/thinking_tool.sse", "../provider/anthropic/testdata/text.sse"}}
	reg := anthropicRegistry(t, wire)
	params, _ := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{
		"location": map[string]any{"type": "string"}, "unit": map[string]any{"type": "string"}}})
	weather := testkit.ReadOnlyTool{FuncTool: agentloop.FuncTool{
		Def: &agentdv1.Tool{Name: "get_weather", Description: "Weather for a place.", Parameters: params},
		Fn: func(_ context.Context, call agentloop.Call) (agentloop.Result, error) {
			return agentloop.Result{Content: texts("15 degrees in " + call.Args.GetFields()["location"].GetStringValue())}, nil
		},
	}}
	h := newHarness(t, agent.Options{Models: reg, Tools: []agentloop.Tool{weather}})
	id := h.session(&agentdv1.SessionConfig{
		Model: &agentdv1.ModelRef{Provider: "anthropic", Id: "claude-sonnet-4-5"},
		Tools: []*agentdv1.Tool{{Name: "get_weather"}},
	})
	evs := h.run(id, "What's the weather in San Francisco?")
	for _, want := range []string{"thinking_delta", "tool_call_delta", "text_delta"} {
		found := false
		for _, ev := range evs {
			u := ev.GetMessageUpdate()
			if (want == "thinking_delta" && u.GetThinkingDelta() != nil) || (want == "tool_call_delta" && u.GetToolCallDelta() != nil) ||
				(want == "text_delta" && u.GetTextDelta() != nil) {
				found = true
			}
		}
		if !found {
			t.Errorf("no %s streamed: %s", want, allKinds(evs))
		}
	}
	if end := evs[len(evs)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED || end.GetUsage().GetCost().GetTotal() == 0 {
		t.Fatalf("agent_end: %v", end)
	}
	entries := h.transcript(id)
	if got := testkit.MessageKinds(entries); got != "user assistant tool_result assistant" {
		t.Fatalf("transcript %q", got)
	}
	first := entries[1].GetMessage().GetAssistant()
	sig := first.GetContent()[0].GetThinking().GetThinkingSignature()
	if first.GetProvider() != "anthropic" || sig == "" || first.GetResponseId() == "" {
		t.Fatalf("first answer: %v", first)
	}
	if len(wire.bodies) != 2 {
		t.Fatalf("%d model calls, want 2", len(wire.bodies))
	}
	if !strings.Contains(wire.bodies[1], `"signature":"`+sig+`"`) || !strings.Contains(wire.bodies[1], "15 degrees in San Francisco") {
		t.Fatalf("second request does not replay the signature and the tool result:\n%s", wire.bodies[1])
	}
}

// An Anthropic stream that reports overloaded_error in the middle of an
// answer is retried like HTTP 529: the client sees the failed answer end,
// a provider_retry error, then the retry's answer; the transcript keeps the
// failed answer, which the next call leaves out.
func TestOverloadMidAnswerIsRetriedThroughAgentd(t *testing.T) {
	partial := filepath.Join(t.TempDir(), "overloaded.sse")
	if err := os.WriteFile(partial, []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":5}}}\n\n"+
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n"+
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wire := &anthropicWire{streams: []string{partial, "../provider/anthropic/testdata/text.sse"}}
	reg := anthropicRegistry(t, wire)
	h := newHarness(t, agent.Options{Models: reg, Retry: provider.RetryPolicy{BaseDelay: time.Millisecond}})
	id := h.session(&agentdv1.SessionConfig{Model: &agentdv1.ModelRef{Provider: "anthropic", Id: "claude-sonnet-4-5"}})
	evs := h.run(id, "hi")
	var retried bool
	for _, ev := range evs {
		if e := ev.GetError(); e.GetStage() == "provider_retry" && strings.Contains(e.GetMessage(), "overloaded_error") {
			retried = true
		}
	}
	if end := evs[len(evs)-1].GetAgentEnd(); !retried || end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("retried %v, %s, %v", retried, allKinds(evs), end)
	}
	entries := h.transcript(id)
	if got := testkit.MessageKinds(entries); got != "user assistant assistant" {
		t.Fatalf("transcript %q", got)
	}
	failed := entries[1].GetMessage().GetAssistant()
	if failed.GetStopReason() != agentdv1.StopReason_STOP_REASON_ERROR || failed.GetContent()[0].GetText().GetText() != "Hel" {
		t.Fatalf("failed answer %v", failed)
	}
	if c := h.context(id); len(c.GetMessages()) != 2 || c.GetMessages()[1].GetAssistant().GetContent()[0].GetText().GetText() != "Hello, world" {
		t.Fatalf("context %v", c.GetMessages())
	}
	if len(wire.bodies) != 2 || strings.Contains(wire.bodies[1], "Hel\"") {
		t.Fatalf("%d calls; the retry must not send the failed answer:\n%s", len(wire.bodies), wire.bodies[len(wire.bodies)-1])
	}
}

// UpdateSession switches a faux session to Anthropic mid-conversation: the
// change is a ModelChange entry, GetContext shows the replayed history
// (the faux model's thinking as plain text, since the model changed), and
// the Anthropic request body carries exactly that history and the prompt.
func TestUpdateSessionSwitchesFauxToAnthropic(t *testing.T) {
	wire := &anthropicWire{streams: []string{"../provider/anthropic/testdata/text.sse"}}
	reg := anthropicRegistry(t, wire)
	h := newHarness(t, agent.Options{Models: reg})
	thought := &agentdv1.AssistantMessage{Content: []*agentdv1.ContentBlock{
		{Block: &agentdv1.ContentBlock_Thinking{Thinking: &agentdv1.ThinkingContent{Thinking: "the port is in config.ts", ThinkingSignature: "faux-sig"}}},
		{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: "The default port is 3000."}}},
	}}
	id := h.session(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{thought}}})
	h.run(id, "What is the default port?")

	sess, err := h.store.GetSession(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	cfg := proto.CloneOf(sess.Config)
	cfg.Model = &agentdv1.ModelRef{Provider: "anthropic", Id: "claude-sonnet-4-5"}
	_, entries, err := h.a.UpdateSession(context.Background(), id, persistence.SessionUpdate{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].GetModelChange().GetModelId() != "claude-sonnet-4-5" {
		t.Fatalf("UpdateSession entries: %v", entries)
	}
	before := h.report(id, "")
	if before.ContextWindow == 0 {
		t.Fatal("the context reports no context window for the Anthropic model")
	}
	evs := h.run(id, "Change it to 8080.")
	if end := evs[len(evs)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("agent_end %v", end)
	}
	var body struct {
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal([]byte(wire.bodies[0]), &body); err != nil {
		t.Fatal(err)
	}
	want := append(before.Context.GetMessages(), &agentdv1.Message{Role: &agentdv1.Message_User{User: &agentdv1.UserMessage{Content: texts("Change it to 8080.")}}})
	if len(body.Messages) != len(want) {
		t.Fatalf("the request has %d messages, GetContext %d and the prompt", len(body.Messages), len(want)-1)
	}
	for i, m := range want {
		var role string
		var blocks []string
		switch r := m.GetRole().(type) {
		case *agentdv1.Message_User:
			role = "user"
			for _, b := range r.User.GetContent() {
				blocks = append(blocks, b.GetText().GetText())
			}
		case *agentdv1.Message_Assistant:
			role = "assistant"
			for _, b := range r.Assistant.GetContent() {
				if b.GetThinking() != nil {
					t.Fatalf("GetContext kept a thinking block across a model change: %v", b)
				}
				blocks = append(blocks, b.GetText().GetText())
			}
		}
		got := body.Messages[i]
		if got.Role != role || len(got.Content) != len(blocks) {
			t.Fatalf("message %d: request %+v, GetContext %v", i, got, m)
		}
		for j, text := range blocks {
			if got.Content[j].Type != "text" || got.Content[j].Text != text {
				t.Fatalf("message %d block %d: request %+v, GetContext %q", i, j, got.Content[j], text)
			}
		}
	}
	if !strings.Contains(wire.bodies[0], "the port is in config.ts") || strings.Contains(wire.bodies[0], "faux-sig") {
		t.Fatalf("the faux thinking must reach Anthropic as text, without its signature:\n%s", wire.bodies[0])
	}
}

// A program's run on a real adapter (Anthropic's SDK over a recorded wire
// stream): the per-run model settings and output schema reach the
// request body, the model's JSON answer arrives as structured_output, and
// a setting the API cannot send (temperature, which the pinned API
// version removed) is refused with SETTING_UNSUPPORTED naming the field
// and the model before any request is made or anything is stored.
func TestRunSettingsAndSchemaReachARealAdapter(t *testing.T) {
	answer := filepath.Join(t.TempDir(), "json.sse")
	if err := os.WriteFile(answer, []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":5}}}\n\n"+
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"{\\\"priority\\\": \"}}\n\n"+
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\\\"high\\\"}\"}}\n\n"+
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"+
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7}}\n\n"+
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wire := &anthropicWire{streams: []string{answer}}
	h := newHarness(t, agent.Options{Models: anthropicRegistry(t, wire)})
	id := h.session(&agentdv1.SessionConfig{Model: &agentdv1.ModelRef{Provider: "anthropic", Id: "claude-sonnet-4-5"}})
	schema, _ := structpb.NewStruct(map[string]any{"type": "object", "required": []any{"priority"},
		"properties": map[string]any{"priority": map[string]any{"type": "string", "enum": []any{"low", "high"}}}})
	options, _ := structpb.NewStruct(map[string]any{"metadata": map[string]any{"user_id": "u1"}})

	temperature := 0.3
	_, err := h.a.Start(context.Background(), agent.StartRequest{SessionID: id, Prompt: user("triage"),
		Run: &agentdv1.RunRequest{ModelSettings: &agentdv1.ModelSettings{Temperature: &temperature}}})
	var refused *agent.FieldError
	if !errors.As(err, &refused) || refused.Field != "model_settings.temperature" || refused.Reason != agentdv1.ErrorReason_ERROR_REASON_SETTING_UNSUPPORTED ||
		refused.Metadata["field"] != "model_settings.temperature" || refused.Metadata["model"] != "anthropic/claude-sonnet-4-5" {
		t.Fatalf("temperature on Anthropic: %v, want SETTING_UNSUPPORTED naming the field and model", err)
	}
	if len(wire.bodies) != 0 || len(h.transcript(id)) != 0 {
		t.Fatalf("a refused run made %d requests and stored %d entries", len(wire.bodies), len(h.transcript(id)))
	}

	evs, err := h.startRun(agent.StartRequest{SessionID: id, Prompt: user("triage"), Run: &agentdv1.RunRequest{OutputSchema: schema,
		ModelSettings: &agentdv1.ModelSettings{StopSequences: []string{"END"}, MaxOutputTokens: 512, ProviderOptions: options}}}, false).drain()
	if err != nil {
		t.Fatal(err)
	}
	end := evs[len(evs)-1].GetAgentEnd()
	if end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED || end.GetStructuredOutput().GetFields()["priority"].GetStringValue() != "high" {
		t.Fatalf("agent_end %v, want COMPLETED with priority high", end)
	}
	if len(wire.bodies) != 1 {
		t.Fatalf("%d requests, want 1", len(wire.bodies))
	}
	var body struct {
		MaxTokens     int64    `json:"max_tokens"`
		StopSequences []string `json:"stop_sequences"`
		Metadata      struct {
			UserID string `json:"user_id"`
		} `json:"metadata"`
		OutputConfig struct {
			Format struct {
				Type   string          `json:"type"`
				Schema json.RawMessage `json:"schema"`
			} `json:"format"`
		} `json:"output_config"`
	}
	if err := json.Unmarshal([]byte(wire.bodies[0]), &body); err != nil {
		t.Fatal(err)
	}
	if body.MaxTokens != 512 || len(body.StopSequences) != 1 || body.StopSequences[0] != "END" || body.Metadata.UserID != "u1" ||
		body.OutputConfig.Format.Type != "json_schema" || !strings.Contains(string(body.OutputConfig.Format.Schema), "priority") {
		t.Fatalf("the request does not carry the run's settings and schema:\n%s", wire.bodies[0])
	}
	final := h.transcript(id)[1].GetMessage().GetAssistant()
	if final.GetStructuredOutput().GetFields()["priority"].GetStringValue() != "high" {
		t.Fatalf("the stored answer: %v", final)
	}
}

// Gemini takes no response schema together with function calling, so a
// run with tools and an output schema offers it the finalizer tool: the
// request declares submit_output with the schema as its parameters (and
// no response schema), the model's call of it is the answer, and the run
// ends after accepting it, without another model call.
func TestFinalizerToolThroughARealAdapter(t *testing.T) {
	answer := filepath.Join(t.TempDir(), "submit.sse")
	if err := os.WriteFile(answer, []byte(`data: {"candidates":[{"content":{"parts":[{"functionCall":{"name":"submit_output","args":{"priority":"high"}}}],"role":"model"},"index":0,"finishReason":"STOP"}],`+
		`"usageMetadata":{"promptTokenCount":40,"candidatesTokenCount":8,"totalTokenCount":48},"modelVersion":"gemini-2.5-pro","responseId":"resp-1"}`+"\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wire := &anthropicWire{streams: []string{answer}}
	params, _ := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"location": map[string]any{"type": "string"}}})
	weather := testkit.ReadOnlyTool{FuncTool: agentloop.FuncTool{
		Def: &agentdv1.Tool{Name: "get_weather", Description: "Weather for a place.", Parameters: params},
		Fn: func(context.Context, agentloop.Call) (agentloop.Result, error) {
			return agentloop.Result{Content: texts("sunny")}, nil
		},
	}}
	h := newHarness(t, agent.Options{Models: wiredRegistry(t, "google", wire), Tools: []agentloop.Tool{weather}})
	schema, _ := structpb.NewStruct(map[string]any{"type": "object", "required": []any{"priority"},
		"properties": map[string]any{"priority": map[string]any{"type": "string", "enum": []any{"low", "high"}}}})
	id := h.session(&agentdv1.SessionConfig{Model: &agentdv1.ModelRef{Provider: "google", Id: "gemini-2.5-pro"},
		Tools: []*agentdv1.Tool{{Name: "get_weather"}}, OutputSchema: schema})
	evs := h.run(id, "triage")
	end := evs[len(evs)-1].GetAgentEnd()
	if end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED || end.GetStructuredOutput().GetFields()["priority"].GetStringValue() != "high" {
		t.Fatalf("agent_end %v, want COMPLETED with priority high", end)
	}
	if len(wire.bodies) != 1 {
		t.Fatalf("%d model calls, want 1: the accepted answer ends the run", len(wire.bodies))
	}
	var body struct {
		Tools []struct {
			FunctionDeclarations []struct {
				Name                 string          `json:"name"`
				ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema"`
			} `json:"functionDeclarations"`
		} `json:"tools"`
		GenerationConfig map[string]json.RawMessage `json:"generationConfig"`
	}
	if err := json.Unmarshal([]byte(wire.bodies[0]), &body); err != nil {
		t.Fatal(err)
	}
	declared := map[string]string{}
	for _, tool := range body.Tools {
		for _, f := range tool.FunctionDeclarations {
			declared[f.Name] = string(f.ParametersJSONSchema)
		}
	}
	if _, ok := declared["get_weather"]; !ok || !strings.Contains(declared[agent.SubmitOutputTool], "priority") {
		t.Fatalf("declared tools %v, want get_weather and submit_output with the schema:\n%s", declared, wire.bodies[0])
	}
	if _, native := body.GenerationConfig["responseJsonSchema"]; native {
		t.Fatalf("a response schema beside function calling:\n%s", wire.bodies[0])
	}
	entries := h.transcript(id)
	if got := testkit.MessageKinds(entries); got != "user assistant tool_result" {
		t.Fatalf("transcript %q", got)
	}
	if entries[1].GetMessage().GetAssistant().GetStructuredOutput().GetFields()["priority"].GetStringValue() != "high" {
		t.Fatalf("the stored answer: %v", entries[1])
	}
}
