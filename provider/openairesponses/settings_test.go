package openairesponses_test

import (
	"context"
	"testing"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/internal/wiretest"
)

func TestModelSettingsReachTheRequest(t *testing.T) {
	temp, topP := 0.2, 0.9
	wiretest.CheckSettings(t, gpt, wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")}, []wiretest.SettingsCase{
		{Name: "unset", Tools: true, Want: map[string]string{
			"temperature": wiretest.Absent, "top_p": wiretest.Absent, "tool_choice": wiretest.Absent, "text": wiretest.Absent,
			"max_output_tokens": wiretest.Absent, "service_tier": wiretest.Absent,
		}},
		{Name: "everything", Tools: true, Opts: provider.Options{MaxTokens: 1000, OutputSchema: wiretest.Schema(), Settings: &agentdv1.ModelSettings{
			Temperature: &temp, TopP: &topP,
			ToolChoice:      &agentdv1.ToolChoice{Mode: agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "get_weather"},
			ProviderOptions: wiretest.Struct(t, map[string]any{"service_tier": "flex", "text": map[string]any{"verbosity": "low"}}),
		}}, Want: map[string]string{
			"temperature": `0.2`, "top_p": `0.9`, "max_output_tokens": `1000`,
			"tool_choice": `{"type":"function","name":"get_weather"}`,
			// Not strict, and the schema exactly as the caller gave it; the
			// caller's key of text beside it.
			"text.format":    `{"type":"json_schema","name":"output","strict":false,"schema":{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"]}}`,
			"text.verbosity": `"low"`,
			"service_tier":   `"flex"`, "stream": `true`, "store": `false`, "model": `"gpt-4.1"`,
		}},
		{Name: "auto", Tools: true, Opts: provider.Options{Settings: wiretest.Choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO, "")}, Want: map[string]string{"tool_choice": `"auto"`}},
		{Name: "none", Tools: true, Opts: provider.Options{Settings: wiretest.Choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE, "")}, Want: map[string]string{"tool_choice": `"none"`}},
		{Name: "required", Tools: true, Opts: provider.Options{Settings: wiretest.Choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED, "")}, Want: map[string]string{"tool_choice": `"required"`}},
		{Name: "tool choice without tools", Opts: provider.Options{Settings: wiretest.Choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED, "")}, Want: map[string]string{"tool_choice": wiretest.Absent}},
	}, func(s *wiretest.Server) provider.StreamFunc { return newProvider(s).Stream })
}

// TestProviderOptionsCannotOverwriteTheRequest builds the fullest request
// the adapter makes and checks that each of its fields is refused as a
// provider option.
func TestProviderOptionsCannotOverwriteTheRequest(t *testing.T) {
	s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")})
	c := ctxOf(wiretest.User("hi"))
	c.Tools = wiretest.Weather()
	temp := 0.5
	opts := provider.Options{ThinkingLevel: agentdv1.ThinkingLevel_THINKING_LEVEL_LOW, MaxTokens: 1000, SessionID: "s1", OutputSchema: wiretest.Schema(),
		Settings: &agentdv1.ModelSettings{Temperature: &temp, TopP: &temp, ToolChoice: &agentdv1.ToolChoice{Mode: agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO}}}
	// A reasoning model that takes sampling parameters, so every field is
	// in one request.
	m := o4
	m.ID = "gpt-4.1"
	provider.Collect(newProvider(s).Stream(context.Background(), m, c, opts))
	wiretest.ReservedCover(t, m, s.Requests()[0].Body, "text")
}
