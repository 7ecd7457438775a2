package provider_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

var (
	claude45   = provider.Model{Provider: "anthropic", ID: "claude-sonnet-4-5", API: provider.APIAnthropicMessages, Reasoning: true, MaxOutputTokens: 64000}
	claude41   = provider.Model{Provider: "anthropic", ID: "claude-opus-4-1", API: provider.APIAnthropicMessages, Reasoning: true, MaxOutputTokens: 32000}
	gpt41Chat  = provider.Model{Provider: "openai", ID: "gpt-4.1", API: provider.APIOpenAICompletions, MaxOutputTokens: 32768}
	o4MiniChat = provider.Model{Provider: "openai", ID: "o4-mini", API: provider.APIOpenAICompletions, Reasoning: true}
	deepseek   = provider.Model{Provider: "deepseek", ID: "deepseek-reasoner", API: provider.APIOpenAICompletions, Reasoning: true, StructuredOutputTool: true}
	gpt5       = provider.Model{Provider: "openai", ID: "gpt-5", API: provider.APIOpenAIResponses, Reasoning: true}
	gpt41Resp  = provider.Model{Provider: "openai", ID: "gpt-4.1", API: provider.APIOpenAIResponses}
	flash      = provider.Model{Provider: "google", ID: "gemini-2.5-flash", API: provider.APIGoogleGenerativeAI, Reasoning: true}
	fauxModel  = provider.Model{Provider: "faux", ID: "faux-1", API: provider.APIFaux, MaxOutputTokens: 16384}
)

func f(v float64) *float64 { return &v }

func opts(s *agentdv1.ModelSettings) provider.Options { return provider.Options{Settings: s} }

func po(t *testing.T, m map[string]any) *agentdv1.ModelSettings {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return &agentdv1.ModelSettings{ProviderOptions: s}
}

func choice(mode agentdv1.ToolChoiceMode, name string) *agentdv1.ModelSettings {
	return &agentdv1.ModelSettings{ToolChoice: &agentdv1.ToolChoice{Mode: mode, ToolName: name}}
}

func stops(n int) *agentdv1.ModelSettings {
	s := &agentdv1.ModelSettings{}
	for i := range n {
		s.StopSequences = append(s.StopSequences, strings.Repeat("#", i+1))
	}
	return s
}

const (
	toolMode     = agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL
	requiredMode = agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED
	autoMode     = agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO
	noneMode     = agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE
	high         = agentdv1.ThinkingLevel_THINKING_LEVEL_HIGH
)

func TestCheckOptions(t *testing.T) {
	schema, _ := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}})
	thinking := func(o provider.Options) provider.Options { o.ThinkingLevel = high; return o }
	withSchema := provider.Options{OutputSchema: schema}
	big := map[string]any{"pad": strings.Repeat("x", provider.MaxProviderOptionsBytes)}
	for _, tc := range []struct {
		name  string
		model provider.Model
		opts  provider.Options
		field string // "" accepted
	}{
		{"no settings", claude45, provider.Options{}, ""},
		{"empty settings", gpt5, opts(&agentdv1.ModelSettings{}), ""},

		// Anthropic: API version 2026-10-21 has no sampling parameters.
		{"anthropic temperature", claude45, opts(&agentdv1.ModelSettings{Temperature: f(0.5)}), "model_settings.temperature"},
		{"anthropic top_p", claude45, opts(&agentdv1.ModelSettings{TopP: f(0.9)}), "model_settings.top_p"},
		{"anthropic stop sequences", claude45, opts(stops(8)), ""},
		{"anthropic max tokens at limit", claude45, opts(&agentdv1.ModelSettings{MaxOutputTokens: 64000}), ""},
		{"anthropic max tokens over limit", claude45, opts(&agentdv1.ModelSettings{MaxOutputTokens: 64001}), "model_settings.max_output_tokens"},
		{"anthropic required without thinking", claude45, opts(choice(requiredMode, "")), ""},
		{"anthropic named tool without thinking", claude45, opts(choice(toolMode, "get_weather")), ""},
		{"anthropic required with thinking", claude45, thinking(opts(choice(requiredMode, ""))), "model_settings.tool_choice"},
		{"anthropic named tool with thinking", claude45, thinking(opts(choice(toolMode, "get_weather"))), "model_settings.tool_choice"},
		{"anthropic none with thinking", claude45, thinking(opts(choice(noneMode, ""))), ""},
		{"anthropic auto with thinking", claude45, thinking(opts(choice(autoMode, ""))), ""},
		{"anthropic forced choice, thinking level but no reasoning model", provider.Model{Provider: "anthropic", ID: "claude-x", API: provider.APIAnthropicMessages}, thinking(opts(choice(requiredMode, ""))), ""},
		{"anthropic option top_k", claude45, opts(po(t, map[string]any{"top_k": 40})), "model_settings.provider_options.top_k"},
		{"anthropic option mcp_servers (provider-side tools)", claude45, opts(po(t, map[string]any{"mcp_servers": []any{map[string]any{"type": "url", "url": "https://example.invalid"}}})), "model_settings.provider_options.mcp_servers"},
		{"anthropic option context_management", claude45, opts(po(t, map[string]any{"context_management": map[string]any{}})), "model_settings.provider_options.context_management"},
		{"anthropic option max_tokens", claude45, opts(po(t, map[string]any{"max_tokens": 10})), "model_settings.provider_options.max_tokens"},
		{"anthropic option thinking", claude45, opts(po(t, map[string]any{"thinking": map[string]any{"type": "adaptive"}})), "model_settings.provider_options.thinking"},
		{"anthropic option output_config.format", claude45, opts(po(t, map[string]any{"output_config": map[string]any{"format": map[string]any{}}})), "model_settings.provider_options.output_config.format"},
		{"anthropic option output_config not an object", claude45, opts(po(t, map[string]any{"output_config": "high"})), "model_settings.provider_options.output_config"},
		{"anthropic options of its own", claude45, opts(po(t, map[string]any{"output_config": map[string]any{"effort": "high"}, "metadata": map[string]any{"user_id": "u1"}, "service_tier": "auto"})), ""},
		{"anthropic schema from Claude 4.5", claude45, withSchema, ""},
		{"anthropic schema before Claude 4.5", claude41, withSchema, "output_schema"},

		// Chat Completions.
		{"chat sampling", gpt41Chat, opts(&agentdv1.ModelSettings{Temperature: f(0.2), TopP: f(1)}), ""},
		{"chat temperature 0", gpt41Chat, opts(&agentdv1.ModelSettings{Temperature: f(0)}), ""},
		{"chat temperature out of range", gpt41Chat, opts(&agentdv1.ModelSettings{Temperature: f(2.5)}), "model_settings.temperature"},
		{"chat negative temperature", gpt41Chat, opts(&agentdv1.ModelSettings{Temperature: f(-0.1)}), "model_settings.temperature"},
		{"chat top_p 0", gpt41Chat, opts(&agentdv1.ModelSettings{TopP: f(0)}), "model_settings.top_p"},
		{"chat four stop sequences", gpt41Chat, opts(stops(4)), ""},
		{"chat five stop sequences", gpt41Chat, opts(stops(5)), "model_settings.stop_sequences"},
		{"chat every tool choice", gpt41Chat, opts(choice(toolMode, "get_weather")), ""},
		{"chat o4-mini temperature", o4MiniChat, opts(&agentdv1.ModelSettings{Temperature: f(1)}), "model_settings.temperature"},
		{"chat o4-mini top_p", o4MiniChat, opts(&agentdv1.ModelSettings{TopP: f(0.5)}), "model_settings.top_p"},
		{"chat o4-mini stop", o4MiniChat, opts(stops(1)), "model_settings.stop_sequences"},
		{"chat gpt-5.1 temperature", provider.Model{Provider: "openai", ID: "gpt-5.1", API: provider.APIOpenAICompletions}, opts(&agentdv1.ModelSettings{Temperature: f(1)}), "model_settings.temperature"},
		{"chat gpt-5-chat-latest temperature", provider.Model{Provider: "openai", ID: "gpt-5-chat-latest", API: provider.APIOpenAICompletions}, opts(&agentdv1.ModelSettings{Temperature: f(0.3)}), ""},
		{"chat other server's reasoning model takes temperature", provider.Model{Provider: "groq", ID: "openai/gpt-oss-120b", API: provider.APIOpenAICompletions, Reasoning: true}, opts(&agentdv1.ModelSettings{Temperature: f(0.3)}), ""},
		{"chat option seed", gpt41Chat, opts(po(t, map[string]any{"seed": 7, "logit_bias": map[string]any{"50256": -100}})), ""},
		{"chat option stream", gpt41Chat, opts(po(t, map[string]any{"stream": false})), "model_settings.provider_options.stream"},
		{"chat option web_search_options (provider-side tool)", gpt41Chat, opts(po(t, map[string]any{"web_search_options": map[string]any{}})), "model_settings.provider_options.web_search_options"},
		{"chat option n", gpt41Chat, opts(po(t, map[string]any{"n": 2})), "model_settings.provider_options.n"},
		{"chat option response_format", gpt41Chat, opts(po(t, map[string]any{"response_format": map[string]any{"type": "json_object"}})), "model_settings.provider_options.response_format"},
		{"chat option max_completion_tokens", gpt41Chat, opts(po(t, map[string]any{"max_completion_tokens": 5})), "model_settings.provider_options.max_completion_tokens"},
		{"chat option reasoning", gpt41Chat, opts(po(t, map[string]any{"reasoning": map[string]any{"effort": "low"}})), "model_settings.provider_options.reasoning"},
		{"chat option path syntax", gpt41Chat, opts(po(t, map[string]any{"a.b": 1})), "model_settings.provider_options.a.b"},
		{"chat schema", gpt41Chat, withSchema, ""},
		{"chat schema on a server without json_schema", deepseek, withSchema, "output_schema"},

		// Responses.
		{"responses stop", gpt41Resp, opts(stops(1)), "model_settings.stop_sequences"},
		{"responses sampling", gpt41Resp, opts(&agentdv1.ModelSettings{Temperature: f(0.7), TopP: f(0.9)}), ""},
		{"responses reasoning temperature", gpt5, opts(&agentdv1.ModelSettings{Temperature: f(0.7)}), "model_settings.temperature"},
		{"responses reasoning top_p", gpt5, opts(&agentdv1.ModelSettings{TopP: f(0.7)}), "model_settings.top_p"},
		{"responses option text.verbosity", gpt5, opts(po(t, map[string]any{"text": map[string]any{"verbosity": "low"}, "service_tier": "flex"})), ""},
		{"responses option text.format", gpt5, opts(po(t, map[string]any{"text": map[string]any{"format": map[string]any{"type": "text"}}})), "model_settings.provider_options.text.format"},
		{"responses option store", gpt5, opts(po(t, map[string]any{"store": true})), "model_settings.provider_options.store"},
		{"responses option previous_response_id (provider-side history)", gpt5, opts(po(t, map[string]any{"previous_response_id": "resp_1"})), "model_settings.provider_options.previous_response_id"},
		{"responses option conversation", gpt5, opts(po(t, map[string]any{"conversation": "conv_1"})), "model_settings.provider_options.conversation"},
		{"responses option input", gpt5, opts(po(t, map[string]any{"input": "hi"})), "model_settings.provider_options.input"},
		{"responses schema", gpt5, withSchema, ""},

		// Gemini.
		{"gemini sampling", flash, opts(&agentdv1.ModelSettings{Temperature: f(1.5), TopP: f(0.95)}), ""},
		{"gemini five stop sequences", flash, opts(stops(5)), ""},
		{"gemini six stop sequences", flash, opts(stops(6)), "model_settings.stop_sequences"},
		{"gemini named tool", flash, opts(choice(toolMode, "get_weather")), ""},
		{"gemini option topK", flash, opts(po(t, map[string]any{"generationConfig": map[string]any{"topK": 40}, "safetySettings": []any{}})), ""},
		{"gemini option cachedContent (provider-side context)", flash, opts(po(t, map[string]any{"cachedContent": "cachedContents/1"})), "model_settings.provider_options.cachedContent"},
		{"gemini option candidateCount", flash, opts(po(t, map[string]any{"generationConfig": map[string]any{"candidateCount": 2}})), "model_settings.provider_options.generationConfig.candidateCount"},
		{"gemini option generationConfig.temperature", flash, opts(po(t, map[string]any{"generationConfig": map[string]any{"temperature": 1}})), "model_settings.provider_options.generationConfig.temperature"},
		{"gemini option snake_case top_p", flash, opts(po(t, map[string]any{"generation_config": map[string]any{"top_p": 1}})), "model_settings.provider_options.generation_config.top_p"},
		{"gemini option toolConfig", flash, opts(po(t, map[string]any{"toolConfig": map[string]any{}})), "model_settings.provider_options.toolConfig"},
		{"gemini option contents", flash, opts(po(t, map[string]any{"contents": []any{}})), "model_settings.provider_options.contents"},
		{"gemini schema", flash, withSchema, ""},

		// Every API.
		{"named tool without a name", gpt41Chat, opts(choice(toolMode, "")), "model_settings.tool_choice.tool_name"},
		{"tool name without mode TOOL", flash, opts(choice(autoMode, "get_weather")), "model_settings.tool_choice.tool_name"},
		{"unknown tool choice mode", gpt5, opts(choice(agentdv1.ToolChoiceMode(99), "")), "model_settings.tool_choice.mode"},
		{"negative max tokens", gpt41Chat, opts(&agentdv1.ModelSettings{MaxOutputTokens: -1}), "model_settings.max_output_tokens"},
		{"max tokens, model without a limit", gpt5, opts(&agentdv1.ModelSettings{MaxOutputTokens: 1 << 20}), ""},
		{"provider options too large", gpt41Chat, opts(po(t, big)), "model_settings.provider_options"},
		{"faux options too large", fauxModel, opts(po(t, big)), "model_settings.provider_options"},

		// Faux records everything.
		{"faux everything", fauxModel, provider.Options{ThinkingLevel: high, OutputSchema: schema, Settings: &agentdv1.ModelSettings{
			Temperature: f(0.3), TopP: f(0.5), MaxOutputTokens: 100, StopSequences: stops(8).StopSequences,
			ToolChoice: &agentdv1.ToolChoice{Mode: toolMode, ToolName: "x"}, ProviderOptions: po(t, map[string]any{"model": "m", "seed": 1}).ProviderOptions}}, ""},
		{"faux schema with the finalizer tool", provider.Model{Provider: "faux", ID: "faux-1", API: provider.APIFaux, StructuredOutputTool: true}, withSchema, "output_schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := provider.CheckOptions(tc.model, tc.opts)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var se *provider.SettingError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a SettingError on %s", err, tc.field)
			}
			if se.Field != tc.field || se.Model != tc.model.Provider+"/"+tc.model.ID || se.Reason == "" {
				t.Fatalf("refusal = %+v, want field %s", se, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), se.Model) {
				t.Fatalf("message %q names neither field nor model", err)
			}
		})
	}
}

func TestCheckOptionsDoesNotChangeSettings(t *testing.T) {
	s := po(t, map[string]any{"text": map[string]any{"verbosity": "low"}})
	s.Temperature = f(0.5)
	before := proto.Clone(s)
	if err := provider.CheckOptions(gpt41Resp, opts(s)); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(before, s) {
		t.Fatalf("settings changed: %v", s)
	}
}

func TestNativeStructuredOutput(t *testing.T) {
	anthropic := func(id string) provider.Model {
		return provider.Model{Provider: "anthropic", ID: id, API: provider.APIAnthropicMessages}
	}
	for _, tc := range []struct {
		name               string
		model              provider.Model
		noTools, withTools bool
	}{
		{"faux", fauxModel, true, true},
		{"faux with structured_output_tool", provider.Model{API: provider.APIFaux, StructuredOutputTool: true}, false, false},
		{"chat completions", gpt41Chat, true, true},
		{"chat server without json_schema", deepseek, false, false},
		{"responses", gpt5, true, true},
		{"claude sonnet 4.5", claude45, true, true},
		{"claude haiku 4.5 dated", anthropic("claude-haiku-4-5-20251001"), true, true},
		{"claude opus 4.6", anthropic("claude-opus-4-6"), true, true},
		{"claude sonnet 5", anthropic("claude-sonnet-5"), true, true},
		{"claude bedrock id", anthropic("anthropic.claude-sonnet-4-5-20250929-v1:0"), true, true},
		{"claude opus 4.1", claude41, false, false},
		{"claude opus 4 dated", anthropic("claude-opus-4-20250514"), false, false},
		{"claude 3.7", anthropic("claude-3-7-sonnet-latest"), false, false},
		{"unversioned anthropic id", anthropic("my-proxy-model"), false, false},
		{"anthropic with structured_output_tool", provider.Model{ID: "claude-sonnet-4-5", API: provider.APIAnthropicMessages, StructuredOutputTool: true}, false, false},
		{"gemini", flash, true, false},
		{"unknown api", provider.Model{API: "smoke-signals"}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := provider.NativeStructuredOutput(tc.model, false); got != tc.noTools {
				t.Errorf("without tools = %v, want %v", got, tc.noTools)
			}
			if got := provider.NativeStructuredOutput(tc.model, true); got != tc.withTools {
				t.Errorf("with tools = %v, want %v", got, tc.withTools)
			}
		})
	}
}

func TestBodyOptions(t *testing.T) {
	for _, tc := range []struct {
		api     string
		options map[string]any
		want    []provider.BodyOption
	}{
		{provider.APIAnthropicMessages, map[string]any{"output_config": map[string]any{"effort": "high"}, "metadata": map[string]any{"user_id": "u"}, "service_tier": "auto"},
			[]provider.BodyOption{{Path: "metadata", Value: map[string]any{"user_id": "u"}}, {Path: "output_config.effort", Value: "high"}, {Path: "service_tier", Value: "auto"}}},
		{provider.APIOpenAIResponses, map[string]any{"text": map[string]any{"verbosity": "low"}, "service_tier": "flex"},
			[]provider.BodyOption{{Path: "service_tier", Value: "flex"}, {Path: "text.verbosity", Value: "low"}}},
		// Chat Completions has no partly reserved object: text is a value.
		{provider.APIOpenAICompletions, map[string]any{"seed": 7, "text": map[string]any{"a": 1}},
			[]provider.BodyOption{{Path: "seed", Value: float64(7)}, {Path: "text", Value: map[string]any{"a": float64(1)}}}},
	} {
		t.Run(tc.api, func(t *testing.T) {
			if got := provider.BodyOptions(tc.api, po(t, tc.options)); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("BodyOptions = %#v\nwant %#v", got, tc.want)
			}
		})
	}
	if got := provider.BodyOptions(provider.APIOpenAICompletions, nil); got != nil {
		t.Fatalf("no settings gave %v", got)
	}
}
