package openairesponses_test

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
	temp, topP := 0.2, 0.9
	for _, tc := range []struct {
		name  string
		tools bool
		opts  provider.Options
		want  map[string]string
	}{
		{"unset", true, provider.Options{}, map[string]string{
			"temperature": wiretest.Absent, "top_p": wiretest.Absent, "tool_choice": wiretest.Absent, "text": wiretest.Absent,
			"max_output_tokens": wiretest.Absent, "service_tier": wiretest.Absent,
		}},
		{"everything", true, provider.Options{MaxTokens: 1000, OutputSchema: wiretest.Schema(), Settings: &agentdv1.ModelSettings{
			Temperature: &temp, TopP: &topP,
			ToolChoice:      &agentdv1.ToolChoice{Mode: agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL, ToolName: "get_weather"},
			ProviderOptions: wiretest.Struct(t, map[string]any{"service_tier": "flex", "text": map[string]any{"verbosity": "low"}}),
		}}, map[string]string{
			"temperature": `0.2`, "top_p": `0.9`, "max_output_tokens": `1000`,
			"tool_choice": `{"type":"function","name":"get_weather"}`,
			// Not strict, and the schema exactly as the caller gave it; the
			// caller's key of text beside it.
			"text.format":    `{"type":"json_schema","name":"output","strict":false,"schema":{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"]}}`,
			"text.verbosity": `"low"`,
			"service_tier":   `"flex"`, "stream": `true`, "store": `false`, "model": `"gpt-4.1"`,
		}},
		{"auto", true, provider.Options{Settings: choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO, "")}, map[string]string{"tool_choice": `"auto"`}},
		{"none", true, provider.Options{Settings: choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE, "")}, map[string]string{"tool_choice": `"none"`}},
		{"required", true, provider.Options{Settings: choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED, "")}, map[string]string{"tool_choice": `"required"`}},
		{"tool choice without tools", false, provider.Options{Settings: choice(agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED, "")}, map[string]string{"tool_choice": wiretest.Absent}},
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
			if m := provider.Collect(newProvider(s).Stream(context.Background(), gpt, c, tc.opts)); m.GetStopReason() != agentdv1.StopReason_STOP_REASON_STOP {
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
	opts := provider.Options{ThinkingLevel: agentdv1.ThinkingLevel_THINKING_LEVEL_LOW, MaxTokens: 1000, SessionID: "s1", OutputSchema: wiretest.Schema(),
		Settings: &agentdv1.ModelSettings{Temperature: &temp, TopP: &temp, ToolChoice: &agentdv1.ToolChoice{Mode: agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO}}}
	// A reasoning model that takes sampling parameters, so every field is
	// in one request.
	m := o4
	m.ID = "gpt-4.1"
	provider.Collect(newProvider(s).Stream(context.Background(), m, c, opts))
	wiretest.ReservedCover(t, m, s.Requests()[0].Body, "text")
}
