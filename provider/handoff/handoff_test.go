// Package handoff_test runs one conversation through every real adapter in
// turn (Anthropic → OpenAI Responses → Gemini → Chat Completions →
// Anthropic), each against its recorded wire stream, and checks the body
// each hop sends: foreign tool call ids normalized and remapped in their
// results, foreign thinking as plain text, foreign signatures gone, and the
// model's own signatures kept.
package handoff_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/anthropic"
	"github.com/agentd/agentd/provider/google"
	"github.com/agentd/agentd/provider/internal/wiretest"
	"github.com/agentd/agentd/provider/openai"
	"github.com/agentd/agentd/provider/openairesponses"
)

// The genai SDK's dependencies start an opencensus worker at init.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

var (
	claude = provider.Model{Provider: "anthropic", ID: "claude-sonnet-4-5", API: provider.APIAnthropicMessages, Reasoning: true}
	gpt    = provider.Model{Provider: "openai", ID: "o4-mini", API: provider.APIOpenAIResponses, Reasoning: true}
	gemini = provider.Model{Provider: "google", ID: "gemini-2.5-pro", API: provider.APIGoogleGenerativeAI, Reasoning: true}
	qwen   = provider.Model{Provider: "ollama", ID: "qwen3", API: provider.APIOpenAICompletions, Reasoning: true}
)

// Opaque values each model produced in its recorded stream.
const (
	claudeSig   = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/=="
	gptItem     = "gAAAAABoEncRyPtEd+/reasoning=="
	gptTextSig  = "msg_M1"
	geminiSig   = "Q2FsbFNpZy0wMDMrLz0/"
	geminiThink = "VGhpbmtTaWctMDAx"
)

func TestHandoffChainThroughRealAdapters(t *testing.T) {
	now := func() time.Time { return time.Unix(1700000000, 0) }
	type hop struct {
		name   string
		model  provider.Model
		reply  string
		stream func(s *wiretest.Server) provider.StreamFunc
		// check inspects the request body of this hop.
		check func(t *testing.T, body []byte)
	}
	var geminiCallID string
	hops := []hop{
		{"anthropic", claude, "../anthropic/testdata/thinking_tool.sse",
			func(s *wiretest.Server) provider.StreamFunc {
				return anthropic.New(anthropic.Config{APIKey: "k", BaseURL: s.URL, Now: now}).Stream
			},
			func(t *testing.T, body []byte) {}},
		{"openai-responses", gpt, "../openairesponses/testdata/reasoning_tool.sse",
			func(s *wiretest.Server) provider.StreamFunc {
				return openairesponses.New(openairesponses.Config{APIKey: "k", BaseURL: s.URL, Now: now}).Stream
			},
			func(t *testing.T, body []byte) {
				var req struct{ Input []map[string]any }
				mustJSON(t, body, &req)
				var types []string
				ids := map[string]bool{}
				for _, it := range req.Input {
					types = append(types, str(it["type"]))
					if id := str(it["id"]); id != "" {
						if ids[id] {
							t.Fatalf("duplicate item id %q: %s", id, body)
						}
						ids[id] = true
					}
					if it["type"] == "function_call" && (it["call_id"] != "toolu_01A09q90qw90lq917835lq9" || it["id"] != nil) {
						t.Fatalf("foreign call: %v", it)
					}
					if it["type"] == "function_call_output" && it["call_id"] != "toolu_01A09q90qw90lq917835lq9" {
						t.Fatalf("result not paired: %v", it)
					}
				}
				if got := strings.Join(types, ","); got != ",,message,message,function_call,function_call_output" {
					t.Fatalf("item types = %q\n%s", got, body)
				}
				if !strings.Contains(string(body), `"text":"The user wants the weather. I will call get_weather."`) {
					t.Fatalf("claude thinking not sent as text: %s", body)
				}
			}},
		{"gemini", gemini, "../google/testdata/thinking_tool.sse",
			func(s *wiretest.Server) provider.StreamFunc {
				p, err := google.New(context.Background(), google.Config{APIKey: "k", BaseURL: s.URL, Now: now})
				if err != nil {
					t.Fatal(err)
				}
				return p.Stream
			},
			func(t *testing.T, body []byte) {
				var req struct {
					Contents []struct {
						Role  string
						Parts []map[string]any
					}
				}
				mustJSON(t, body, &req)
				var shape []string
				for _, c := range req.Contents {
					for _, p := range c.Parts {
						for k := range p {
							shape = append(shape, c.Role+":"+k)
						}
					}
				}
				want := "user:text,model:text,model:text,model:functionCall,user:functionResponse,model:text,model:text,model:functionCall,user:functionResponse"
				if got := strings.Join(shape, ","); got != want {
					t.Fatalf("parts = %s, want %s\n%s", got, want, body)
				}
				if strings.Contains(string(body), `"thought":true`) || strings.Contains(string(body), "thoughtSignature") {
					t.Fatalf("foreign thinking or signature sent to gemini: %s", body)
				}
				if !strings.Contains(string(body), `"text":"Need the weather.\n\nCall the tool."`) {
					t.Fatalf("gpt reasoning summary not sent as text: %s", body)
				}
			}},
		{"chat-completions", qwen, "../openai/testdata/reasoning_tool.sse",
			func(s *wiretest.Server) provider.StreamFunc {
				return openai.New(openai.Config{Endpoint: provider.Endpoint{APIKey: "k", BaseURL: s.URL, Now: now}, Compat: openai.Profiles()["vllm"]}).Stream
			},
			func(t *testing.T, body []byte) {
				var req struct {
					Messages []struct {
						Role             string
						ReasoningContent string                `json:"reasoning_content"`
						ToolCallID       string                `json:"tool_call_id"`
						ToolCalls        []struct{ ID string } `json:"tool_calls"`
					}
				}
				mustJSON(t, body, &req)
				var calls, results []string
				for _, m := range req.Messages {
					if m.ReasoningContent != "" {
						t.Fatalf("foreign reasoning sent in reasoning_content: %s", body)
					}
					for _, c := range m.ToolCalls {
						calls = append(calls, c.ID)
					}
					if m.Role == "tool" {
						results = append(results, m.ToolCallID)
					}
				}
				want := []string{"toolu_01A09q90qw90lq917835lq9", "call_abc123", geminiCallID}
				if strings.Join(calls, ",") != strings.Join(want, ",") || strings.Join(results, ",") != strings.Join(want, ",") {
					t.Fatalf("calls %v results %v, want %v", calls, results, want)
				}
			}},
		{"anthropic-again", claude, "../anthropic/testdata/text.sse",
			func(s *wiretest.Server) provider.StreamFunc {
				return anthropic.New(anthropic.Config{APIKey: "k", BaseURL: s.URL, Now: now}).Stream
			},
			func(t *testing.T, body []byte) {
				var req struct {
					Messages []struct {
						Role    string
						Content json.RawMessage
					}
				}
				mustJSON(t, body, &req)
				var ids, results, thinking []string
				for _, m := range req.Messages {
					var blocks []map[string]any
					if json.Unmarshal(m.Content, &blocks) != nil {
						continue
					}
					for _, b := range blocks {
						switch b["type"] {
						case "tool_use":
							ids = append(ids, str(b["id"]))
						case "tool_result":
							results = append(results, str(b["tool_use_id"]))
						case "thinking":
							thinking = append(thinking, str(b["signature"]))
						}
					}
				}
				want := []string{"toolu_01A09q90qw90lq917835lq9", "call_abc123_fc_F1", geminiCallID, "call_abc123"}
				if strings.Join(ids, ",") != strings.Join(want, ",") || strings.Join(results, ",") != strings.Join(want, ",") {
					t.Fatalf("tool_use %v tool_result %v, want %v\n%s", ids, results, want, body)
				}
				// Claude's own thinking keeps its signature; nobody else's
				// thinking comes back as thinking.
				if strings.Join(thinking, ",") != claudeSig {
					t.Fatalf("thinking signatures = %v", thinking)
				}
			}},
	}

	conv := []*agentdv1.Message{wiretest.User("Weather in Paris?")}
	for i, h := range hops {
		s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, h.reply)})
		final := provider.Collect(wiretest.Replayed(h.stream(s))(context.Background(), h.model, &agentdv1.Context{SystemPrompt: "Be brief.", Messages: conv},
			provider.Options{ThinkingLevel: agentdv1.ThinkingLevel_THINKING_LEVEL_MEDIUM}))
		if final.GetStopReason() == agentdv1.StopReason_STOP_REASON_ERROR {
			t.Fatalf("hop %s failed: %v", h.name, final)
		}
		body := s.Requests()[0].Body
		// Opaque values of other models never leave their model.
		for _, foreign := range foreignSecrets(h.model) {
			if strings.Contains(string(body), foreign) {
				t.Fatalf("hop %s: foreign opaque value %q sent:\n%s", h.name, foreign, body)
			}
		}
		h.check(t, body)
		if i == len(hops)-1 {
			break
		}
		conv = append(conv, wiretest.Assistant(final))
		var call *agentdv1.ToolCall
		for _, b := range final.GetContent() {
			if tc := b.GetToolCall(); tc != nil {
				call = tc
			}
		}
		if call == nil {
			t.Fatalf("hop %s made no tool call: %v", h.name, final)
		}
		if h.model.API == provider.APIGoogleGenerativeAI {
			geminiCallID = call.GetId()
		}
		conv = append(conv, wiretest.ToolResult(call.GetId(), call.GetName(), "18C"))
	}
}

// foreignSecrets are the opaque values the target must not receive.
func foreignSecrets(target provider.Model) []string {
	var out []string
	if target.API != provider.APIAnthropicMessages {
		out = append(out, claudeSig)
	}
	if target.API != provider.APIOpenAIResponses {
		out = append(out, gptItem, gptTextSig)
	}
	if target.API != provider.APIGoogleGenerativeAI {
		out = append(out, geminiSig, geminiThink)
	}
	return out
}

func mustJSON(t *testing.T, body []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
