package google_test

import (
	"context"
	"testing"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/internal/wiretest"
)

func TestModelSettingsReachTheRequest(t *testing.T) {
	temp, topP := 0.25, 0.5 // exact in float32
	wiretest.CheckSettings(t, flash, wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")}, []wiretest.SettingsCase{
		{Name: "unset", Tools: true, Want: map[string]string{
			"generationConfig.temperature": wiretest.Absent, "generationConfig.topP": wiretest.Absent,
			"generationConfig.stopSequences": wiretest.Absent, "generationConfig.responseMimeType": wiretest.Absent,
			"generationConfig.responseJsonSchema": wiretest.Absent, "toolConfig": wiretest.Absent, "safetySettings": wiretest.Absent,
		}},
		{Name: "everything", Tools: true, Opts: provider.Options{MaxTokens: 1000, Settings: &agentdv1.ModelSettings{
			Temperature: &temp, TopP: &topP, StopSequences: []string{"END", "STOP"},
			ToolChoice: &agentdv1.ToolChoice{Mode: agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "get_weather"},
			ProviderOptions: wiretest.Struct(t, map[string]any{
				"generationConfig": map[string]any{"topK": 40},
				"safetySettings":   []any{map[string]any{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}},
			}),
		}}, Want: map[string]string{
			"generationConfig.temperature": `0.25`, "generationConfig.topP": `0.5`, "generationConfig.maxOutputTokens": `1000`,
			"generationConfig.stopSequences": `["END","STOP"]`,
			// The caller's generationConfig key merged beside agentd's.
			"generationConfig.topK": `40`,
			"toolConfig":            `{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["get_weather"]}}`,
			"safetySettings":        `[{"category":"HARM_CATEGORY_HARASSMENT","threshold":"BLOCK_NONE"}]`,
			"httpOptions":           wiretest.Absent, "generationConfig.httpOptions": wiretest.Absent,
		}},
		// Gemini takes a schema only without tools (NativeStructuredOutput).
		{Name: "output schema", Opts: provider.Options{OutputSchema: wiretest.Schema()}, Want: map[string]string{
			"generationConfig.responseMimeType":   `"application/json"`,
			"generationConfig.responseJsonSchema": `{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"]}`,
		}},
		{Name: "auto", Tools: true, Opts: provider.Options{Settings: wiretest.Choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO, "")}, Want: map[string]string{"toolConfig": `{"functionCallingConfig":{"mode":"AUTO"}}`}},
		{Name: "none", Tools: true, Opts: provider.Options{Settings: wiretest.Choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE, "")}, Want: map[string]string{"toolConfig": `{"functionCallingConfig":{"mode":"NONE"}}`}},
		{Name: "required", Tools: true, Opts: provider.Options{Settings: wiretest.Choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED, "")}, Want: map[string]string{"toolConfig": `{"functionCallingConfig":{"mode":"ANY"}}`}},
		{Name: "tool choice without tools", Opts: provider.Options{Settings: wiretest.Choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED, "")}, Want: map[string]string{"toolConfig": wiretest.Absent}},
	}, func(s *wiretest.Server) provider.StreamFunc { return newProvider(t, s).Stream })
}

// TestProviderOptionsCannotOverwriteTheRequest builds the fullest request
// the adapter makes and checks that each of its fields is refused as a
// provider option.
func TestProviderOptionsCannotOverwriteTheRequest(t *testing.T) {
	s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")})
	c := ctxOf(wiretest.User("hi"))
	c.Tools = wiretest.Weather()
	temp := 0.5
	// Tools and a schema together only to see every field in one request.
	opts := provider.Options{ThinkingLevel: agentdv1.ThinkingLevel_THINKING_LEVEL_LOW, MaxTokens: 1000, OutputSchema: wiretest.Schema(),
		Settings: &agentdv1.ModelSettings{Temperature: &temp, TopP: &temp, StopSequences: []string{"END"}, ToolChoice: &agentdv1.ToolChoice{Mode: agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO}}}
	provider.Collect(newProvider(t, s).Stream(context.Background(), pro, c, opts))
	wiretest.ReservedCover(t, pro, s.Requests()[0].Body, "generationConfig")
}
