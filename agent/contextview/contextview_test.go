package contextview_test

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent/contextview"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

func user(id, text string) *agentdv1.Entry {
	return &agentdv1.Entry{Id: id, Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{
		User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: text}}}}}}}}}
}

func answer(id string, usage int64) *agentdv1.Entry {
	return &agentdv1.Entry{Id: id, Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{
		Assistant: &agentdv1.AssistantMessage{StopReason: agentdv1.StopReason_STOP_REASON_STOP, Usage: &agentdv1.Usage{Input: usage},
			Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: "okay"}}}}}}}}}
}

func summary(id, firstKept string) *agentdv1.Entry {
	return &agentdv1.Entry{Id: id, Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_CompactionSummary{
		CompactionSummary: &agentdv1.CompactionSummary{Summary: "s", FirstKeptEntryId: firstKept}}}}}
}

func ids(items []contextview.Item) string {
	var out []string
	for _, it := range items {
		out = append(out, it.EntryID)
	}
	return strings.Join(out, " ")
}

func TestFromPath(t *testing.T) {
	model := &agentdv1.Entry{Id: "m", Payload: &agentdv1.Entry_ModelChange{ModelChange: &agentdv1.ModelChange{Provider: "faux", ModelId: "faux-1"}}}
	tests := []struct {
		name string
		path []*agentdv1.Entry
		want string
	}{
		{"no summary; non-messages left out", []*agentdv1.Entry{user("a", "x"), model, answer("b", 1)}, "a b"},
		{"summary first, then the kept entries, then the rest", []*agentdv1.Entry{user("a", "x"), answer("b", 1), user("c", "y"), answer("d", 1), summary("s", "c"), user("e", "z")}, "s c d e"},
		{"a missing first kept entry keeps what follows the summary", []*agentdv1.Entry{user("a", "x"), summary("s", "nope"), user("e", "z")}, "s e"},
		{"the latest summary wins; an earlier one among the kept is dropped", []*agentdv1.Entry{user("a", "x"), summary("s1", "a"), user("c", "y"), summary("s2", "a"), user("e", "z")}, "s2 a c e"},
	}
	for _, tc := range tests {
		if got := ids(contextview.FromPath(tc.path)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		b := contextview.NewBuilder(nil)
		for _, e := range tc.path {
			b.Append(e)
		}
		if got := ids(b.View()); got != tc.want {
			t.Errorf("%s: Builder %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestEstimate(t *testing.T) {
	// Without usage: chars/4 of each message.
	items := contextview.FromPath([]*agentdv1.Entry{user("a", strings.Repeat("x", 40)), user("b", "é😀")})
	if est := contextview.EstimateItems(items); est.Total != 10+1 || est.FromUsage {
		t.Fatalf("estimate without usage: %+v", est)
	}
	// With usage: the last answer's usage plus what follows it.
	items = contextview.FromPath([]*agentdv1.Entry{user("a", strings.Repeat("x", 400)), answer("b", 500), user("c", strings.Repeat("x", 40))})
	if est := contextview.EstimateItems(items); est.Total != 500+10 || !est.FromUsage {
		t.Fatalf("estimate with usage: %+v", est)
	}
	// An answer kept from before a summary measured a longer context: its
	// usage is not trusted.
	items = contextview.FromPath([]*agentdv1.Entry{user("a", "x"), answer("b", 5000), summary("s", "b"), user("c", strings.Repeat("x", 40))})
	if est := contextview.EstimateItems(items); est.FromUsage || est.Total != contextview.Sizes(items)[0]+1+10 {
		t.Fatalf("estimate after a summary: %+v (sizes %v)", est, contextview.Sizes(items))
	}
}

// A tool call counts its name and its arguments as compact JSON, like
// pi's JSON.stringify.
func TestToolCallTokens(t *testing.T) {
	args := map[string]any{"path": "src/config.ts", "limit": 20.0, "flags": []any{true, nil, "é"}, "nested": map[string]any{"a": 1.5}}
	st, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(args)
	m := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: &agentdv1.AssistantMessage{Content: []*agentdv1.ContentBlock{
		{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Name: "read_file", Arguments: st}}}}}}}
	want := (int64(len("read_file")+len([]rune(string(js)))) + 3) / 4
	if got := contextview.Tokens(m); got != want {
		t.Fatalf("Tokens = %d, want %d (JSON %s)", got, want, js)
	}
}
