package openai_test

import (
	"context"
	"testing"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/internal/wiretest"
	"github.com/agentd/agentd/provider/openai"
)

func TestModelSettingsReachTheRequest(t *testing.T) {
	temp, topP := 0.2, 0.9
	reply := wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")}
	wiretest.CheckSettings(t, gpt, reply, []wiretest.SettingsCase{
		{Name: "unset", Tools: true, Want: map[string]string{
			"temperature": wiretest.Absent, "top_p": wiretest.Absent, "stop": wiretest.Absent, "tool_choice": wiretest.Absent,
			"response_format": wiretest.Absent, "max_completion_tokens": wiretest.Absent, "seed": wiretest.Absent,
		}},
		{Name: "everything", Tools: true, Opts: provider.Options{MaxTokens: 1000, OutputSchema: wiretest.Schema(), Settings: &agentdv1.ModelSettings{
			Temperature: &temp, TopP: &topP, StopSequences: []string{"END", "STOP"},
			ToolChoice:      &agentdv1.ToolChoice{Mode: agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "get_weather"},
			ProviderOptions: wiretest.Struct(t, map[string]any{"seed": 7, "logit_bias": map[string]any{"50256": -100}}),
		}}, Want: map[string]string{
			"temperature": `0.2`, "top_p": `0.9`, "stop": `["END","STOP"]`, "max_completion_tokens": `1000`,
			"tool_choice": `{"type":"function","function":{"name":"get_weather"}}`,
			// Not strict, and the schema exactly as the caller gave it.
			"response_format": `{"type":"json_schema","json_schema":{"name":"output","strict":false,"schema":{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"]}}}`,
			"seed":            `7`, "logit_bias": `{"50256":-100}`, "stream": `true`, "model": `"gpt-4.1"`,
		}},
		{Name: "auto", Tools: true, Opts: provider.Options{Settings: wiretest.Choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO, "")}, Want: map[string]string{"tool_choice": `"auto"`}},
		{Name: "none", Tools: true, Opts: provider.Options{Settings: wiretest.Choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE, "")}, Want: map[string]string{"tool_choice": `"none"`}},
		{Name: "required", Tools: true, Opts: provider.Options{Settings: wiretest.Choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED, "")}, Want: map[string]string{"tool_choice": `"required"`}},
		{Name: "tool choice without tools", Opts: provider.Options{Settings: wiretest.Choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED, "")}, Want: map[string]string{"tool_choice": wiretest.Absent}},
	}, func(s *wiretest.Server) provider.StreamFunc { return newProvider(s, openai.Compat{}).Stream })
	// A server profile that takes max_tokens for max_completion_tokens. A
	// profile is set on the adapter, not per call, so its rows run on an
	// adapter of their own.
	wiretest.CheckSettings(t, gpt, reply, []wiretest.SettingsCase{
		{Name: "max_tokens server", Opts: provider.Options{MaxTokens: 50, Settings: &agentdv1.ModelSettings{Temperature: &temp}},
			Want: map[string]string{"max_tokens": `50`, "max_completion_tokens": wiretest.Absent, "temperature": `0.2`}},
	}, func(s *wiretest.Server) provider.StreamFunc { return newProvider(s, openai.Profiles()["vllm"]).Stream })
}

// TestProviderOptionsCannotOverwriteTheRequest builds the fullest requests
// the adapter makes (OpenAI's, and OpenRouter's reasoning field) and
// checks that each of their fields is refused as a provider option.
func TestProviderOptionsCannotOverwriteTheRequest(t *testing.T) {
	temp := 0.5
	for _, compat := range []openai.Compat{{}, openai.Profiles()["openrouter"]} {
		s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")})
		c := ctxOf(wiretest.User("hi"))
		c.Tools = wiretest.Weather()
		m := qwen
		m.ID = "gpt-4.1" // a reasoning model that takes sampling parameters
		opts := provider.Options{ThinkingLevel: agentdv1.ThinkingLevel_THINKING_LEVEL_LOW, MaxTokens: 1000, OutputSchema: wiretest.Schema(), Settings: &agentdv1.ModelSettings{
			Temperature: &temp, TopP: &temp, StopSequences: []string{"END"}, ToolChoice: &agentdv1.ToolChoice{Mode: agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO},
		}}
		provider.Collect(newProvider(s, compat).Stream(context.Background(), m, c, opts))
		wiretest.ReservedCover(t, m, s.Requests()[0].Body)
	}
}
