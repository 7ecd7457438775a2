package contextpolicy_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/agent/contextpolicy"
	"github.com/agentd/agentd/agent/contextview"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

func text(s string) *agentdv1.ContentBlock {
	return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}
}

func image() *agentdv1.ContentBlock {
	return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Image{Image: &agentdv1.ImageContent{MimeType: "image/png", Data: []byte{1}}}}
}

// conv builds a view from a compact notation: u=user, a=answer with a
// tool call, t=tool result, s=plain answer, b=bash execution, i=user
// message with an image. Entry ids are e1, e2, ...; every text is 40
// characters (10 tokens).
func conv(spec string) []contextview.Item {
	var items []contextview.Item
	pad := strings.Repeat("x", 38)
	for i, c := range spec {
		id := fmt.Sprintf("e%d", i+1)
		var m *agentdv1.AgentMessage
		switch c {
		case 'u':
			m = &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{text(id + pad[len(id):] + "  ")}}}}
		case 'i':
			m = &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{text(id), image()}}}}
		case 'a':
			m = &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: &agentdv1.AssistantMessage{Content: []*agentdv1.ContentBlock{
				{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: "c" + id, Name: "read_file"}}}}}}}
		case 's':
			m = &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: &agentdv1.AssistantMessage{Content: []*agentdv1.ContentBlock{text(id + pad[len(id):] + "  ")}}}}
		case 't':
			m = &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: &agentdv1.ToolResultMessage{ToolCallId: "c" + id, ToolName: "read_file",
				Content: []*agentdv1.ContentBlock{text(id + pad[len(id):] + "  ")}}}}
		case 'b':
			m = &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_BashExecution{BashExecution: &agentdv1.BashExecution{Command: "ls", IncludeInModelContext: true}}}
		}
		items = append(items, contextview.NewItem(id, m))
	}
	return items
}

// ids renders a view as its entry ids, marking rewritten messages with *.
func ids(items, orig []contextview.Item) string {
	byID := map[string]*agentdv1.AgentMessage{}
	for _, it := range orig {
		byID[it.EntryID] = it.Message
	}
	var parts []string
	for _, it := range items {
		p := it.EntryID
		if !proto.Equal(byID[it.EntryID], it.Message) {
			p += "*"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

func TestPolicies(t *testing.T) {
	budget := func(max int64, pinned uint32) *agentdv1.ContextRule {
		return &agentdv1.ContextRule{Rule: &agentdv1.ContextRule_TokenBudget{TokenBudget: &agentdv1.TokenBudgetRule{MaxTokens: max, PinnedMessages: pinned}}}
	}
	elide := func(keep uint32) *agentdv1.ContextRule {
		return &agentdv1.ContextRule{Rule: &agentdv1.ContextRule_ElideToolResults{ElideToolResults: &agentdv1.ElideToolResultsRule{KeepTurns: keep}}}
	}
	drop := func(k ...agentdv1.MessageKind) *agentdv1.ContextRule {
		return &agentdv1.ContextRule{Rule: &agentdv1.ContextRule_DropKinds{DropKinds: &agentdv1.DropKindsRule{Kinds: k}}}
	}
	capImages := func(n uint32) *agentdv1.ContextRule {
		return &agentdv1.ContextRule{Rule: &agentdv1.ContextRule_CapImages{CapImages: &agentdv1.CapImagesRule{MaxImages: n}}}
	}
	tests := []struct {
		name  string
		spec  string
		rules []*agentdv1.ContextRule
		want  string
	}{
		{"no rules", "uatsu", nil, "e1 e2 e3 e4 e5"},
		// Every message is 10 tokens except a bare tool call (5).
		{"budget fits", "uatsu", []*agentdv1.ContextRule{budget(45, 0)}, "e1 e2 e3 e4 e5"},
		{"budget drops the oldest turn whole", "uatsuatsu", []*agentdv1.ContextRule{budget(60, 0)}, "e5 e6 e7 e8 e9"},
		{"budget keeps the last user message and after", "uatsuatat", []*agentdv1.ContextRule{budget(1, 0)}, "e5 e6 e7 e8 e9"},
		{"budget keeps pinned messages with their tool results", "uatsuatsuatsu", []*agentdv1.ContextRule{budget(70, 2)}, "e1 e2 e3 e9 e10 e11 e12 e13"},
		{"budget never splits a call from its results", "uattsuats", []*agentdv1.ContextRule{budget(40, 0)}, "e6 e7 e8 e9"},
		{"elide all but the current turn", "uatsuatsuat", []*agentdv1.ContextRule{elide(0)}, "e1 e2 e3* e4 e5 e6 e7* e8 e9 e10 e11"},
		{"elide keeps the newest turns", "uatsuatsuat", []*agentdv1.ContextRule{elide(1)}, "e1 e2 e3* e4 e5 e6 e7 e8 e9 e10 e11"},
		{"elide with fewer turns than kept", "uats", []*agentdv1.ContextRule{elide(3)}, "e1 e2 e3 e4"},
		{"drop bash executions", "ubsub", []*agentdv1.ContextRule{drop(agentdv1.MessageKind_MESSAGE_KIND_BASH_EXECUTION)}, "e1 e3 e4"},
		{"cap images keeps the newest", "isisi", []*agentdv1.ContextRule{capImages(1)}, "e1* e2 e3* e4 e5"},
		{"cap images zero", "isu", []*agentdv1.ContextRule{capImages(0)}, "e1* e2 e3"},
		{"rules in order: elide then budget", "uatsuatsuat", []*agentdv1.ContextRule{elide(0), budget(90, 0)}, "e5 e6 e7* e8 e9 e10 e11"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := conv(tc.spec)
			before := make([]*agentdv1.AgentMessage, len(in))
			for i, it := range in {
				before[i] = proto.CloneOf(it.Message)
			}
			out, err := contextpolicy.Apply(&agentdv1.ContextPolicy{Rules: tc.rules}, in, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(out, in); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			for i, it := range in {
				if !proto.Equal(it.Message, before[i]) {
					t.Fatalf("input message %d was changed", i)
				}
			}
		})
	}
}

func TestElidedAndOmittedTexts(t *testing.T) {
	in := conv("uatsuisu")
	out := contextpolicy.ElideToolResults(in, 0, nil)
	got := out[2].Message.GetToolResult()
	want := fmt.Sprintf(contextpolicy.ElidedToolResultText, "read_file", "e3")
	if len(got.GetContent()) != 1 || got.GetContent()[0].GetText().GetText() != want || got.GetToolCallId() != "ce3" {
		t.Fatalf("elided result: %v", got)
	}
	out = contextpolicy.CapImages(in, 0)
	if b := out[5].Message.GetUser().GetContent()[1].GetText().GetText(); b != fmt.Sprintf(contextpolicy.OmittedImageText, "image/png", "e6") {
		t.Fatalf("omitted image: %q", b)
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		rule  *agentdv1.ContextRule
		field string
	}{
		{&agentdv1.ContextRule{}, "p.rules[0]"},
		{&agentdv1.ContextRule{Rule: &agentdv1.ContextRule_TokenBudget{TokenBudget: &agentdv1.TokenBudgetRule{}}}, "p.rules[0].token_budget.max_tokens"},
		{&agentdv1.ContextRule{Rule: &agentdv1.ContextRule_DropKinds{DropKinds: &agentdv1.DropKindsRule{}}}, "p.rules[0].drop_kinds.kinds"},
		{&agentdv1.ContextRule{Rule: &agentdv1.ContextRule_DropKinds{DropKinds: &agentdv1.DropKindsRule{Kinds: []agentdv1.MessageKind{agentdv1.MessageKind_MESSAGE_KIND_TOOL_RESULT}}}}, "p.rules[0].drop_kinds.kinds[0]"},
		{&agentdv1.ContextRule{Rule: &agentdv1.ContextRule_DropKinds{DropKinds: &agentdv1.DropKindsRule{Kinds: []agentdv1.MessageKind{99}}}}, "p.rules[0].drop_kinds.kinds[0]"},
		{&agentdv1.ContextRule{Rule: &agentdv1.ContextRule_CapImages{CapImages: &agentdv1.CapImagesRule{}}}, ""},
	}
	for _, tc := range tests {
		field, err := contextpolicy.Check("p", &agentdv1.ContextPolicy{Rules: []*agentdv1.ContextRule{tc.rule}})
		if field != tc.field || (err != nil) != (tc.field != "") {
			t.Errorf("%v: field %q, err %v; want field %q", tc.rule, field, err, tc.field)
		}
	}
}

func TestKindIsTheOneofFieldNumber(t *testing.T) {
	m := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_CompactionSummary{CompactionSummary: &agentdv1.CompactionSummary{}}}
	if k := contextpolicy.Kind(m); k != agentdv1.MessageKind_MESSAGE_KIND_COMPACTION_SUMMARY {
		t.Fatalf("Kind = %v", k)
	}
}

// A memo gives a run's later calls the same placeholders without writing
// them again.
func TestMemoReusesPlaceholders(t *testing.T) {
	in := conv("uatsuatsu")
	memo := contextpolicy.NewMemo()
	first := contextpolicy.ElideToolResults(in, 0, memo)
	second := contextpolicy.ElideToolResults(append(in, conv("a")...), 0, memo)
	if first[2].Message != second[2].Message || first[6].Message != second[6].Message {
		t.Fatal("the second call wrote new placeholders")
	}
	fresh := contextpolicy.ElideToolResults(in, 0, nil)
	if !proto.Equal(first[2].Message, fresh[2].Message) || first[2].Size() != fresh[2].Size() {
		t.Fatal("a remembered placeholder differs from a fresh one")
	}
}
