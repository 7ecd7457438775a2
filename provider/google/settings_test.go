package google_test

import (
	"context"
	"testing"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/internal/wiretest"
)

func TestModelSettingsReachTheRequest(t *testing.T) {
	choice := func(mode agentdv1.ToolChoiceMode, name string) *agentdv1.ModelSettings {
		return &agentdv1.ModelSettings{ToolChoice: &agentdv1.ToolChoice{Mode: mode, ToolName: name}}
	}
	temp, topP := 0.25, 0.5 // exact in float32
	for _, tc := range []struct {
		name  string
		tools bool
		opts  provider.Options
		want  map[string]string
	}{
		{"unset", true, provider.Options{}, map[string]string{
			"generationConfig.temperature": wiretest.Absent, "generationConfig.topP": wiretest.Absent,
			"generationConfig.stopSequences": wiretest.Absent, "generationConfig.responseMimeType": wiretest.Absent,
			"generationConfig.responseJsonSchema": wiretest.Absent, "toolConfig": wiretest.Absent, "safetySettings": wiretest.Absent,
		}},
		{"everything", true, provider.Options{MaxTokens: 1000, Settings: &agentdv1.ModelSettings{
			Temperature: &temp, TopP: &topP, StopSequences: []string{"END", "STOP"},
			ToolChoice: &agentdv1.ToolChoice{Mode: agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "get_weather"},
			ProviderOptions: wiretest.Struct(t, map[string]any{
				"generationConfig": map[string]any{"topK": 40},
				"safetySettings":   []any{map[string]any{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}},
			}),
		}}, map[string]string{
			"generationConfig.temperature": `0.25`, "generationConfig.topP": `0.5`, "generationConfig.maxOutputTokens": `1000`,
			"generationConfig.stopSequences": `["END","STOP"]`,
			// The caller's generationConfig key merged beside agentd's.
			"generationConfig.topK": `40`,
			"toolConfig":            `{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["get_weather"]}}`,
			"safetySettings":        `[{"category":"HARM_CATEGORY_HARASSMENT","threshold":"BLOCK_NONE"}]`,
			"httpOptions":           wiretest.Absent, "generationConfig.httpOptions": wiretest.Absent,
		}},
		// Gemini takes a schema only without tools (NativeStructuredOutput).
		{"output schema", false, provider.Options{OutputSchema: wiretest.Schema()}, map[string]string{
			"generationConfig.responseMimeType":   `"application/json"`,
			"generationConfig.responseJsonSchema": `{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"]}`,
		}},
		{"auto", true, provider.Options{Settings: choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO, "")}, map[string]string{"toolConfig": `{"functionCallingConfig":{"mode":"AUTO"}}`}},
		{"none", true, provider.Options{Settings: choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE, "")}, map[string]string{"toolConfig": `{"functionCallingConfig":{"mode":"NONE"}}`}},
		{"required", true, provider.Options{Settings: choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED, "")}, map[string]string{"toolConfig": `{"functionCallingConfig":{"mode":"ANY"}}`}},
		{"tool choice without tools", false, provider.Options{Settings: choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED, "")}, map[string]string{"toolConfig": wiretest.Absent}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := provider.CheckOptions(flash, tc.opts); err != nil {
				t.Fatalf("CheckOptions refused what the test sends: %v", err)
			}
			s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")})
			c := ctxOf(wiretest.User("hi"))
			if tc.tools {
				c.Tools = wiretest.Weather()
			}
			if m := provider.Collect(newProvider(t, s).Stream(context.Background(), flash, c, tc.opts)); m.GetStopReason() != agentdv1.StopReason_STOP_REASON_STOP {
				t.Fatalf("call failed: %v", m)
			}
			wiretest.AssertJSON(t, s.Requests()[0].Body, tc.want)
		})
	}
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
