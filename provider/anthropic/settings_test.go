package anthropic_test

import (
	"context"
	"testing"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/internal/wiretest"
)

func TestModelSettingsReachTheRequest(t *testing.T) {
	wiretest.CheckSettings(t, model, wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")}, []wiretest.SettingsCase{
		{Name: "unset", Tools: true, Want: map[string]string{
			"stop_sequences": wiretest.Absent, "tool_choice": wiretest.Absent, "output_config": wiretest.Absent,
			"temperature": wiretest.Absent, "top_p": wiretest.Absent, "max_tokens": `32000`,
		}},
		{Name: "everything", Tools: true, Opts: provider.Options{MaxTokens: 1000, OutputSchema: wiretest.Schema(), Settings: &agentdv1.ModelSettings{
			StopSequences:   []string{"END", "STOP"},
			ToolChoice:      &agentdv1.ToolChoice{Mode: agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "get_weather"},
			ProviderOptions: wiretest.Struct(t, map[string]any{"metadata": map[string]any{"user_id": "u1"}, "output_config": map[string]any{"effort": "high"}}),
		}}, Want: map[string]string{
			"max_tokens":     `1000`,
			"stop_sequences": `["END","STOP"]`,
			"tool_choice":    `{"type":"tool","name":"get_weather"}`,
			"metadata":       `{"user_id":"u1"}`,
			// The caller's key of output_config and agentd's format, side by side.
			"output_config.effort":      `"high"`,
			"output_config.format.type": `"json_schema"`,
			// The SDK's transform closes objects and moves minimum into the
			// description.
			"output_config.format.schema.additionalProperties": `false`,
			"output_config.format.schema.required":             `["n"]`,
			"output_config.format.schema.properties.n.type":    `"integer"`,
			"output_config.format.schema.properties.n.minimum": wiretest.Absent,
			"stream": `true`, "model": `"claude-sonnet-4-5"`,
		}},
		{Name: "auto", Tools: true, Opts: provider.Options{Settings: wiretest.Choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO, "")}, Want: map[string]string{"tool_choice": `{"type":"auto"}`}},
		{Name: "none", Tools: true, Opts: provider.Options{Settings: wiretest.Choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE, "")}, Want: map[string]string{"tool_choice": `{"type":"none"}`}},
		{Name: "required", Tools: true, Opts: provider.Options{Settings: wiretest.Choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED, "")}, Want: map[string]string{"tool_choice": `{"type":"any"}`}},
		{Name: "tool choice without tools", Opts: provider.Options{Settings: wiretest.Choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED, "")}, Want: map[string]string{"tool_choice": wiretest.Absent, "tools": wiretest.Absent}},
	}, func(s *wiretest.Server) provider.StreamFunc { return newProvider(s).Stream })
}

// TestProviderOptionsCannotOverwriteTheRequest builds the fullest request
// the adapter makes and checks that each of its fields is refused as a
// provider option.
func TestProviderOptionsCannotOverwriteTheRequest(t *testing.T) {
	s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")})
	c := ctxOf(wiretest.User("hi"))
	c.Tools = wiretest.Weather()
	opts := provider.Options{ThinkingLevel: agentdv1.ThinkingLevel_THINKING_LEVEL_LOW, MaxTokens: 1000, OutputSchema: wiretest.Schema(), Settings: &agentdv1.ModelSettings{
		StopSequences: []string{"END"}, ToolChoice: &agentdv1.ToolChoice{Mode: agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO},
	}}
	provider.Collect(newProvider(s).Stream(context.Background(), model, c, opts))
	wiretest.ReservedCover(t, model, s.Requests()[0].Body, "output_config")
}
