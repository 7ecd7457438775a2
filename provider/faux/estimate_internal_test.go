package faux

import (
	"strings"
	"testing"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

// TestContextIsMeasuredAsSerialized: the input estimate measures the
// context without building it, and counts what pi's faux provider builds:
// every role, images, thinking, tool calls and tools, in UTF-16 units
// (an emoji is two, é one).
func TestContextIsMeasuredAsSerialized(t *testing.T) {
	image := &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Image{Image: &agentdv1.ImageContent{Data: []byte{1, 2, 3}, MimeType: "image/png"}}}
	cases := []struct {
		name string
		c    *agentdv1.Context
		want string
	}{
		{"empty", &agentdv1.Context{}, ""},
		{"system only", &agentdv1.Context{SystemPrompt: "sys é"}, "system:sys é"},
		{"every part", &agentdv1.Context{
			SystemPrompt: "sys",
			Messages: []*agentdv1.Message{
				{Role: &agentdv1.Message_User{User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{Text("héllo 👋"), image}}}},
				{Role: &agentdv1.Message_Assistant{Assistant: Message(Thinking("hm", "sig"), Text("ok"), ToolCall("c1", "edit", map[string]any{"a": 1}))}},
				{Role: &agentdv1.Message_ToolResult{ToolResult: &agentdv1.ToolResultMessage{ToolName: "edit", Content: []*agentdv1.ContentBlock{Text("done")}}}},
			},
			Tools: []*agentdv1.Tool{{Name: "edit", Description: "Edits."}, {Name: "ls", Description: "Lists."}},
		}, "system:sys\n\nuser:héllo 👋\n[image:image/png:3]\n\nassistant:hm\nok\nedit:{\"a\":1}\n\ntoolResult:edit\ndone\n\ntools:edit:Edits.,ls:Lists."},
		{"no system prompt", &agentdv1.Context{Messages: []*agentdv1.Message{
			{Role: &agentdv1.Message_User{User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{Text(strings.Repeat("端口", 10))}}}},
		}}, "user:" + strings.Repeat("端口", 10)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var built strings.Builder
			writeContext(&built, tc.c)
			if built.String() != tc.want {
				t.Fatalf("serialized as\n%q\nwant\n%q", built.String(), tc.want)
			}
			var n utf16Counter
			writeContext(&n, tc.c)
			if int64(n) != provider.UTF16Len(tc.want) {
				t.Fatalf("measured %d UTF-16 units, the serialization has %d", n, provider.UTF16Len(tc.want))
			}
		})
	}
}
