package provider_test

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

var (
	claude = provider.Model{Provider: "anthropic", API: provider.APIAnthropicMessages, ID: "claude-sonnet-4-5"}
	gpt    = provider.Model{Provider: "openai", API: provider.APIOpenAIResponses, ID: "gpt-5"}
	chat   = provider.Model{Provider: "ollama", API: provider.APIOpenAICompletions, ID: "qwen3", TextOnly: true}
	gemini = provider.Model{Provider: "google", API: provider.APIGoogleGenerativeAI, ID: "gemini-2.5-pro"}
)

func user(text string) *agentdv1.Message {
	return &agentdv1.Message{Role: &agentdv1.Message_User{User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{text1(text)}}}}
}
func text1(s string) *agentdv1.ContentBlock {
	return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}
}
func assistant(from provider.Model, stop agentdv1.StopReason, blocks ...*agentdv1.ContentBlock) *agentdv1.Message {
	return &agentdv1.Message{Role: &agentdv1.Message_Assistant{Assistant: &agentdv1.AssistantMessage{
		Api: from.API, Provider: from.Provider, Model: from.ID, StopReason: stop, Content: blocks}}}
}
func thinking(text, sig string, redacted bool) *agentdv1.ContentBlock {
	return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Thinking{Thinking: &agentdv1.ThinkingContent{Thinking: text, ThinkingSignature: sig, Redacted: redacted}}}
}
func signedText(text, sig string) *agentdv1.ContentBlock {
	return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: text, TextSignature: sig}}}
}
func call(id, name, thoughtSig string) *agentdv1.ContentBlock {
	args, _ := structpb.NewStruct(map[string]any{"path": "a.txt"})
	return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: id, Name: name, Arguments: args, ThoughtSignature: thoughtSig}}}
}
func result(id string) *agentdv1.Message {
	return &agentdv1.Message{Role: &agentdv1.Message_ToolResult{ToolResult: &agentdv1.ToolResultMessage{ToolCallId: id, ToolName: "read", Content: []*agentdv1.ContentBlock{text1("ok")}}}}
}
func image() *agentdv1.Message {
	return &agentdv1.Message{Role: &agentdv1.Message_User{User: &agentdv1.UserMessage{Content: []*agentdv1.ContentBlock{
		text1("look"), {Block: &agentdv1.ContentBlock_Image{Image: &agentdv1.ImageContent{Data: []byte{1, 2}, MimeType: "image/png"}}},
		{Block: &agentdv1.ContentBlock_Image{Image: &agentdv1.ImageContent{Data: []byte{3}, MimeType: "image/png"}}}}}}}
}

// describe flattens messages into comparable lines.
func describe(msgs []*agentdv1.Message) []string {
	var out []string
	for _, m := range msgs {
		switch r := m.Role.(type) {
		case *agentdv1.Message_User:
			s := "user:"
			for _, b := range r.User.Content {
				if b.GetImage() != nil {
					s += "[img]"
				} else {
					s += b.GetText().GetText() + ";"
				}
			}
			out = append(out, s)
		case *agentdv1.Message_Assistant:
			s := "assistant:"
			for _, b := range r.Assistant.Content {
				switch x := b.Block.(type) {
				case *agentdv1.ContentBlock_Text:
					s += "text(" + x.Text.Text + "|" + x.Text.TextSignature + ")"
				case *agentdv1.ContentBlock_Thinking:
					s += "thinking(" + x.Thinking.Thinking + "|" + x.Thinking.ThinkingSignature + ")"
				case *agentdv1.ContentBlock_ToolCall:
					s += "call(" + x.ToolCall.Id + "|" + x.ToolCall.ThoughtSignature + ")"
				}
			}
			out = append(out, s)
		case *agentdv1.Message_ToolResult:
			s := "result:" + r.ToolResult.ToolCallId + ":" + r.ToolResult.Content[0].GetText().GetText()
			if r.ToolResult.IsError {
				s += ":error"
			}
			out = append(out, s)
		}
	}
	return out
}

const (
	stop    = agentdv1.StopReason_STOP_REASON_STOP
	toolUse = agentdv1.StopReason_STOP_REASON_TOOL_USE
)

func TestReplayRules(t *testing.T) {
	respID := "call_9|fc_68ab+/x"
	tests := []struct {
		name   string
		target provider.Model
		in     []*agentdv1.Message
		want   []string
	}{
		{"same model keeps opaque fields", claude, []*agentdv1.Message{user("q"),
			assistant(claude, toolUse, thinking("hmm", "SIG", false), thinking("", "ENC", true), call("toolu_1", "read", "")), result("toolu_1")},
			[]string{"user:q;", "assistant:thinking(hmm|SIG)thinking(|ENC)call(toolu_1|)", "result:toolu_1:ok"}},
		{"error and aborted skipped", claude, []*agentdv1.Message{user("q"),
			assistant(claude, agentdv1.StopReason_STOP_REASON_ERROR, text1("partial")),
			assistant(claude, agentdv1.StopReason_STOP_REASON_ABORTED, call("toolu_x", "read", "")), user("again")},
			[]string{"user:q;", "user:again;"}},
		{"orphan before user and at end", claude, []*agentdv1.Message{user("q"),
			assistant(claude, toolUse, call("a", "read", ""), call("b", "read", "")), result("b"), user("next"),
			assistant(claude, toolUse, call("c", "read", ""))},
			[]string{"user:q;", "assistant:call(a|)call(b|)", "result:b:ok", "result:a:" + provider.NoResultText + ":error", "user:next;",
				"assistant:call(c|)", "result:c:" + provider.NoResultText + ":error"}},
		{"a message between calls and results moves after the results", claude, []*agentdv1.Message{user("q"),
			assistant(claude, toolUse, call("a", "read", ""), call("b", "read", "")), user("allowed b"), result("a"), user("allowed a"), result("b"),
			assistant(claude, stop, text1("done"))},
			[]string{"user:q;", "assistant:call(a|)call(b|)", "result:a:ok", "result:b:ok", "user:allowed b;", "user:allowed a;", "assistant:text(done|)"}},
		{"a message after a call that never got its result", claude, []*agentdv1.Message{user("q"),
			assistant(claude, toolUse, call("a", "read", "")), user("allowed a")},
			[]string{"user:q;", "assistant:call(a|)", "result:a:" + provider.NoResultText + ":error", "user:allowed a;"}},
		{"orphan result dropped", claude, []*agentdv1.Message{user("q"), result("ghost"), assistant(claude, stop, text1("a"))},
			[]string{"user:q;", "assistant:text(a|)"}},
		{"anthropic to responses", gpt, []*agentdv1.Message{user("q"),
			assistant(claude, toolUse, thinking("hmm", "SIG", false), thinking("", "ENC", true), signedText("t", "x"), call("toolu_1", "read", "")), result("toolu_1")},
			[]string{"user:q;", "assistant:text(hmm|)text(t|)call(toolu_1|)", "result:toolu_1:ok"}},
		{"responses to anthropic remaps ids", claude, []*agentdv1.Message{user("q"),
			assistant(gpt, toolUse, thinking("", `{"type":"reasoning","id":"rs_1","encrypted_content":"E"}`, false), signedText("t", `{"v":1,"id":"msg_1"}`), call(respID, "read", "")), result(respID)},
			[]string{"user:q;", "assistant:text(t|)call(call_9_fc_68ab__x|)", "result:call_9_fc_68ab__x:ok"}},
		{"responses to chat keeps call part", chat, []*agentdv1.Message{user("q"), assistant(gpt, toolUse, call(respID, "read", "")), result(respID)},
			[]string{"user:q;", "assistant:call(call_9|)", "result:call_9:ok"}},
		{"gemini to anthropic drops thought signatures", claude, []*agentdv1.Message{user("q"),
			assistant(gemini, toolUse, thinking("plan", "R2VtaW5p", false), call("read_1", "read", "R2VtaW5pU2ln")), result("read_1")},
			[]string{"user:q;", "assistant:text(plan|)call(read_1|)", "result:read_1:ok"}},
		{"anthropic to gemini", gemini, []*agentdv1.Message{user("q"), assistant(claude, toolUse, thinking("hmm", "SIG", false), call("toolu_1", "read", "")), result("toolu_1")},
			[]string{"user:q;", "assistant:text(hmm|)call(toolu_1|)", "result:toolu_1:ok"}},
		{"same model gemini keeps thought signature", gemini, []*agentdv1.Message{user("q"), assistant(gemini, toolUse, call("read_1", "read", "U0lH")), result("read_1")},
			[]string{"user:q;", "assistant:call(read_1|U0lH)", "result:read_1:ok"}},
		{"responses to responses other model keeps pair", provider.Model{Provider: "openai", API: provider.APIOpenAIResponses, ID: "gpt-5-mini"},
			[]*agentdv1.Message{user("q"), assistant(gpt, toolUse, call(respID, "read", "")), result(respID)},
			[]string{"user:q;", "assistant:call(call_9|fc_68ab__x|)", "result:call_9|fc_68ab__x:ok"}},
		{"normalized ids stay unique", chat, []*agentdv1.Message{user("q"),
			assistant(gpt, toolUse, call("call_9|fc_1", "read", ""), call("call_9|fc_2", "read", "")), result("call_9|fc_1"), result("call_9|fc_2"),
			assistant(chat, toolUse, call("call_9_2", "read", "")), result("call_9_2")},
			[]string{"user:q;", "assistant:call(call_9|)call(call_9_3|)", "result:call_9:ok", "result:call_9_3:ok",
				"assistant:call(call_9_2|)", "result:call_9_2:ok"}},
		{"a same-model id wins over a normalized one", claude, []*agentdv1.Message{user("q"),
			assistant(gpt, toolUse, call("toolu_1|fc_x", "read", "")), result("toolu_1|fc_x"),
			assistant(claude, toolUse, call("toolu_1_fc_x", "read", "")), result("toolu_1_fc_x")},
			[]string{"user:q;", "assistant:call(toolu_1_fc_x_2|)", "result:toolu_1_fc_x_2:ok",
				"assistant:call(toolu_1_fc_x|)", "result:toolu_1_fc_x:ok"}},
		{"images to text-only model", chat, []*agentdv1.Message{image()},
			[]string{"user:look;" + provider.ImageOmittedText + ";"}},
		{"images to vision model", claude, []*agentdv1.Message{image()}, []string{"user:look;[img][img]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := make([]*agentdv1.Message, len(tt.in))
			for i, m := range tt.in {
				before[i] = proto.Clone(m).(*agentdv1.Message)
			}
			out := provider.Replay(tt.in, tt.target)
			if got := describe(out); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %q\nwant %q", got, tt.want)
			}
			for i := range tt.in {
				if !proto.Equal(before[i], tt.in[i]) {
					t.Fatalf("Replay modified its input message %d", i)
				}
			}
			again := provider.Replay(out, tt.target)
			if len(again) != len(out) {
				t.Fatalf("not idempotent: %q", describe(again))
			}
			for i := range out {
				if !proto.Equal(out[i], again[i]) {
					t.Fatalf("not idempotent at %d: %v vs %v", i, out[i], again[i])
				}
			}
		})
	}
}

// A round trip Anthropic → OpenAI Responses → Gemini → Anthropic keeps every
// tool call paired with its result under the ids each target accepts.
func TestHandoffChain(t *testing.T) {
	conv := []*agentdv1.Message{user("q"),
		assistant(claude, toolUse, thinking("a", "SIG", false), call("toolu_1", "read", "")), result("toolu_1"),
		assistant(gpt, toolUse, thinking("", "{}", false), call("call_2|fc_2", "read", "")), result("call_2|fc_2"),
		assistant(gemini, toolUse, call("read_3", "read", "U0lH")), result("read_3"), user("done?")}
	for _, target := range []provider.Model{claude, gpt, gemini, chat, claude} {
		out := provider.Replay(conv, target)
		calls := map[string]bool{}
		for _, m := range out {
			if a := m.GetAssistant(); a != nil {
				for _, b := range a.Content {
					if tc := b.GetToolCall(); tc != nil {
						if tc.Id != provider.NormalizeToolCallID(tc.Id, target.API) && !provider.SameModel(a, target) {
							t.Fatalf("%s: id %q not normalized", target.API, tc.Id)
						}
						calls[tc.Id] = true
					}
				}
			}
			if r := m.GetToolResult(); r != nil {
				if !calls[r.ToolCallId] || r.IsError {
					t.Fatalf("%s: result %q unpaired or synthetic: %q", target.API, r.ToolCallId, describe(out))
				}
			}
		}
		if len(calls) != 3 {
			t.Fatalf("%s: calls = %v", target.API, calls)
		}
	}
}

func TestRetryPolicy(t *testing.T) {
	failed := func(msg string) *agentdv1.AssistantMessage {
		return &agentdv1.AssistantMessage{StopReason: agentdv1.StopReason_STOP_REASON_ERROR, ErrorMessage: msg}
	}
	tests := []struct {
		name       string
		msg        string
		retryAfter time.Duration
		want       []time.Duration // the waits of attempts 1, 2, ... until refused
	}{
		{"retryable exhausts", "503 overloaded_error: Overloaded", 0, []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second}},
		{"stream error mid-answer", "overloaded_error: Overloaded", 0, []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second}},
		{"timeout", provider.TimedOutPrefix + "the provider sent nothing for 2m0s (first-byte timeout)", 0, []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second}},
		{"Retry-After honoured", "429 rate_limit_error: slow down", 3 * time.Second, []time.Duration{3 * time.Second, 3 * time.Second, 3 * time.Second}},
		{"Retry-After beyond the cap", "429 rate_limit_error: slow down", 5 * time.Minute, nil},
		{"not retryable", "401 authentication_error: bad key", 0, nil},
		{"overflow never retried", provider.ContextOverflowPrefix + "400: prompt is too long", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []time.Duration
			for attempt := 1; ; attempt++ {
				d, ok := (provider.RetryPolicy{}).Decide(failed(tt.msg), attempt, tt.retryAfter)
				if !ok {
					break
				}
				got = append(got, d)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("waits %v, want %v", got, tt.want)
			}
		})
	}
	if _, ok := (provider.RetryPolicy{MaxRetries: -1}).Decide(failed("503 overloaded"), 1, 0); ok {
		t.Fatal("MaxRetries -1 still retries")
	}
	if _, ok := (provider.RetryPolicy{}).Decide(&agentdv1.AssistantMessage{StopReason: agentdv1.StopReason_STOP_REASON_ABORTED, ErrorMessage: "Request was aborted"}, 1, 0); ok {
		t.Fatal("an aborted call was retried")
	}
}
