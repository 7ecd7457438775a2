package compaction_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent/compaction"
	"github.com/agentd/agentd/agent/contextview"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

func text(s string) []*agentdv1.ContentBlock {
	return []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}}
}

// view builds items from a notation: u=user, a=answer calling a tool,
// t=its result, s=plain answer, c=compaction summary (first kept: the
// next entry). Every text is 400 characters (100 tokens).
func view(spec string) []contextview.Item {
	long := strings.Repeat("x", 400)
	var items []contextview.Item
	for i, c := range spec {
		id := string(rune('A' + i))
		var m *agentdv1.AgentMessage
		switch c {
		case 'u':
			m = &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: text(long)}}}
		case 'a':
			args, _ := structpb.NewStruct(map[string]any{"path": "f" + id + ".go"})
			m = &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: &agentdv1.AssistantMessage{Content: append(text(long),
				&agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: "c" + id, Name: "edit_file", Arguments: args}}})}}}
		case 't':
			m = &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: &agentdv1.ToolResultMessage{ToolCallId: "c", ToolName: "edit_file", Content: text(long)}}}
		case 's':
			m = &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: &agentdv1.AssistantMessage{Content: text(long)}}}
		case 'c':
			m = &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_CompactionSummary{CompactionSummary: &agentdv1.CompactionSummary{
				Summary: "earlier", ReadFiles: []string{"old.go"}}}}
		}
		items = append(items, contextview.NewItem(id, m))
	}
	return items
}

func TestPrepare(t *testing.T) {
	tests := []struct {
		name      string
		spec      string
		keep      int64
		firstKept string // "" when nothing can be compacted
		summarize int
	}{
		// Walking back from the newest, the cut is the first cut point at or
		// after the message where keep is reached, as in pi.
		{"keeps at least keep tokens, cutting at an answer", "usususus", 250, "F", 5},
		{"never cuts at a tool result: moves on to the next answer", "uatsuats", 150, "H", 7},
		{"cuts at an answer inside a long turn, never between a call and its result", "uatatatat", 250, "H", 7},
		{"a previous summary is not summarized again", "cusus", 150, "D", 2},
		{"nothing before the kept part", "us", 1000, "", 0},
	}
	for _, tc := range tests {
		p, ok := compaction.Prepare(view(tc.spec), tc.keep)
		if ok != (tc.firstKept != "") || (ok && (p.FirstKeptEntryID != tc.firstKept || len(p.Summarize) != tc.summarize)) {
			t.Errorf("%s: ok %v, first kept %q, %d summarized; want %q, %d", tc.name, ok, p.FirstKeptEntryID, len(p.Summarize), tc.firstKept, tc.summarize)
		}
		for _, m := range p.Summarize {
			if m.GetCompactionSummary() != nil {
				t.Errorf("%s: the previous summary is among the summarized messages", tc.name)
			}
		}
	}
}

func TestRequestUpdatesThePreviousSummaryAndKeepsFiles(t *testing.T) {
	items := view("cuatsus")
	p, ok := compaction.Prepare(items, 150)
	if !ok || p.PreviousSummary == nil {
		t.Fatalf("plan %+v", p)
	}
	req := compaction.Request(p, "focus on the API")
	prompt := req.GetMessages()[0].GetUser().GetContent()[0].GetText().GetText()
	for _, want := range []string{"<conversation>\n[User]: ", "[Assistant tool calls]: edit_file(path=\"fC.go\")", "[Tool result]: ", "<previous-summary>\nearlier\n</previous-summary>", "merge into the earlier summary", "Also focus on: focus on the API"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("the request lacks %q", want)
		}
	}
	if req.GetSystemPrompt() != compaction.SystemPrompt {
		t.Error("the request has not the summarization system prompt")
	}
	files := compaction.Files(p.PreviousSummary, p.Summarize)
	if strings.Join(files.Read, ",") != "old.go" || strings.Join(files.Modified, ",") != "fC.go" {
		t.Fatalf("files %+v", files)
	}
	if got := compaction.WithFiles("S", files); got != "S\n\n<read-files>\nold.go\n</read-files>\n\n<modified-files>\nfC.go\n</modified-files>" {
		t.Fatalf("WithFiles: %q", got)
	}
}

func TestSerializeCutsLongToolResults(t *testing.T) {
	long := strings.Repeat("y", 2500)
	msgs := []*agentdv1.Message{{Role: &agentdv1.Message_ToolResult{ToolResult: &agentdv1.ToolResultMessage{Content: text(long)}}}}
	got := compaction.Serialize(msgs)
	if !strings.HasPrefix(got, "[Tool result]: "+strings.Repeat("y", 2000)) || !strings.Contains(got, "[... 500 more characters cut]") {
		t.Fatalf("serialized: %.80q…", got)
	}
}
