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
	choice := func(mode agentdv1.ToolChoiceMode, name string) *agentdv1.ModelSettings {
		return &agentdv1.ModelSettings{ToolChoice: &agentdv1.ToolChoice{Mode: mode, ToolName: name}}
	}
	temp, topP := 0.2, 0.9
	for _, tc := range []struct {
		name   string
		tools  bool
		compat openai.Compat
		opts   provider.Options
		want   map[string]string
	}{
		{"unset", true, openai.Compat{}, provider.Options{}, map[string]string{
			"temperature": wiretest.Absent, "top_p": wiretest.Absent, "stop": wiretest.Absent, "tool_choice": wiretest.Absent,
			"response_format": wiretest.Absent, "max_completion_tokens": wiretest.Absent, "seed": wiretest.Absent,
		}},
		{"everything", true, openai.Compat{}, provider.Options{MaxTokens: 1000, OutputSchema: wiretest.Schema(), Settings: &agentdv1.ModelSettings{
			Temperature: &temp, TopP: &topP, StopSequences: []string{"END", "STOP"},
			ToolChoice:      &agentdv1.ToolChoice{Mode: agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "get_weather"},
			ProviderOptions: wiretest.Struct(t, map[string]any{"seed": 7, "logit_bias": map[string]any{"50256": -100}}),
		}}, map[string]string{
			"temperature": `0.2`, "top_p": `0.9`, "stop": `["END","STOP"]`, "max_completion_tokens": `1000`,
			"tool_choice": `{"type":"function","function":{"name":"get_weather"}}`,
			// Not strict, and the schema exactly as the caller gave it.
			"response_format": `{"type":"json_schema","json_schema":{"name":"output","strict":false,"schema":{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"]}}}`,
			"seed":            `7`, "logit_bias": `{"50256":-100}`, "stream": `true`, "model": `"gpt-4.1"`,
		}},
		{"auto", true, openai.Compat{}, provider.Options{Settings: choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO, "")}, map[string]string{"tool_choice": `"auto"`}},
		{"none", true, openai.Compat{}, provider.Options{Settings: choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE, "")}, map[string]string{"tool_choice": `"none"`}},
		{"required", true, openai.Compat{}, provider.Options{Settings: choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED, "")}, map[string]string{"tool_choice": `"required"`}},
		{"tool choice without tools", false, openai.Compat{}, provider.Options{Settings: choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED, "")}, map[string]string{"tool_choice": wiretest.Absent}},
		{"max_tokens server", false, openai.Profiles()["vllm"], provider.Options{MaxTokens: 50, Settings: &agentdv1.ModelSettings{Temperature: &temp}},
			map[string]string{"max_tokens": `50`, "max_completion_tokens": wiretest.Absent, "temperature": `0.2`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := provider.CheckOptions(gpt, tc.opts); err != nil {
				t.Fatalf("CheckOptions refused what the test sends: %v", err)
			}
			s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")})
			c := ctxOf(wiretest.User("hi"))
			if tc.tools {
				c.Tools = wiretest.Weather()
			}
			if m := provider.Collect(newProvider(s, tc.compat).Stream(context.Background(), gpt, c, tc.opts)); m.GetStopReason() != agentdv1.StopReason_STOP_REASON_STOP {
				t.Fatalf("call failed: %v", m)
			}
			wiretest.AssertJSON(t, s.Requests()[0].Body, tc.want)
		})
	}
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
