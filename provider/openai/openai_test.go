package openai_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/internal/wiretest"
	"github.com/agentd/agentd/provider/openai"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "sk-openai-test-secret"

var gpt = provider.Model{Provider: "openai", ID: "gpt-4.1", API: openai.API, ContextWindow: 1047576, MaxOutputTokens: 32768,
	Price: provider.Price{Input: 2, Output: 8, CacheRead: 0.5}}

var qwen = provider.Model{Provider: "ollama", ID: "qwen3", API: openai.API, ContextWindow: 40960, MaxOutputTokens: 8192, Reasoning: true, TextOnly: true}

func newProvider(s *wiretest.Server, compat openai.Compat) *openai.Provider {
	return openai.New(openai.Config{Endpoint: provider.Endpoint{APIKey: secret, BaseURL: s.URL + "/v1", Now: func() time.Time { return time.Unix(1700000000, 0) }}, Compat: compat})
}

func ctxOf(msgs ...*agentdv1.Message) *agentdv1.Context {
	return &agentdv1.Context{SystemPrompt: "Be brief.", Messages: msgs}
}

type chatRequest struct {
	Messages []struct {
		Role             string          `json:"role"`
		Content          json.RawMessage `json:"content"`
		ReasoningContent string          `json:"reasoning_content"`
		ToolCallID       string          `json:"tool_call_id"`
		ToolCalls        []struct {
			ID       string `json:"id"`
			Function struct {
				Name, Arguments string
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	ReasoningEffort     string          `json:"reasoning_effort"`
	Reasoning           json.RawMessage `json:"reasoning"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Stream bool `json:"stream"`
}

func decode(t *testing.T, r wiretest.Request) chatRequest {
	t.Helper()
	var c chatRequest
	if err := json.Unmarshal(r.Body, &c); err != nil {
		t.Fatalf("%v: %s", err, r.Body)
	}
	return c
}

func TestPlainText(t *testing.T) {
	s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")})
	evs := wiretest.Drain(newProvider(s, openai.Compat{}).Stream(context.Background(), gpt, ctxOf(wiretest.User("hi")), provider.Options{}))
	if got, want := wiretest.Types(evs), []string{"start", "text_start", "text_delta", "text_delta", "text_end", "done"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	m := wiretest.Final(evs)
	u := m.GetUsage()
	if m.GetContent()[0].GetText().GetText() != "Hello, world" || m.GetResponseId() != "chatcmpl-TEXT" ||
		u.GetInput() != 20 || u.GetCacheRead() != 100 || u.GetOutput() != 15 || u.GetTotalTokens() != 135 {
		t.Fatalf("final = %v", m)
	}
	if want := (20*2 + 15*8 + 100*0.5) / 1e6; u.GetCost().GetTotal() < want-1e-12 || u.GetCost().GetTotal() > want+1e-12 {
		t.Fatalf("cost = %v, want %v", u.GetCost().GetTotal(), want)
	}
	req := s.Requests()[0]
	if req.Path != "/v1/chat/completions" || req.Header.Get("Authorization") != "Bearer "+secret {
		t.Fatalf("request to %s", req.Path)
	}
	c := decode(t, req)
	if !c.Stream || c.StreamOptions == nil || !c.StreamOptions.IncludeUsage || c.Messages[0].Role != "system" {
		t.Fatalf("body = %s", req.Body)
	}
}

func TestReasoningToolCallThenFollowUp(t *testing.T) {
	s := wiretest.New(t,
		wiretest.Reply{Body: wiretest.File(t, "testdata/reasoning_tool.sse")},
		wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")},
	)
	p := newProvider(s, openai.Profiles()["vllm"])
	user := wiretest.User("Weather in Paris?")
	evs := wiretest.Drain(wiretest.Replayed(p.Stream)(context.Background(), qwen, ctxOf(user), provider.Options{ThinkingLevel: agentdv1.ThinkingLevel_THINKING_LEVEL_HIGH}))
	want := []string{"start", "thinking_start", "thinking_delta", "thinking_delta", "thinking_end", "text_start", "text_delta", "text_end",
		"toolcall_start", "toolcall_delta", "toolcall_delta", "toolcall_end", "done"}
	if got := wiretest.Types(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	first := wiretest.Final(evs)
	th := first.GetContent()[0].GetThinking()
	tc := first.GetContent()[2].GetToolCall()
	if th.GetThinking() != "Need the weather. Call the tool." || th.GetThinkingSignature() != "reasoning_content" ||
		tc.GetId() != "call_abc123" || tc.GetArguments().AsMap()["location"] != "Paris" || first.GetStopReason() != agentdv1.StopReason_STOP_REASON_TOOL_USE {
		t.Fatalf("first = %v", first)
	}
	c0 := decode(t, s.Requests()[0])
	if c0.ReasoningEffort != "" {
		t.Fatalf("vllm profile sends no reasoning_effort: %s", s.Requests()[0].Body)
	}
	provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), qwen, ctxOf(user, wiretest.Assistant(first), wiretest.ToolResult("call_abc123", "get_weather", "18C")), provider.Options{}))
	c := decode(t, s.Requests()[1])
	a := c.Messages[2]
	if a.Role != "assistant" || a.ReasoningContent != "Need the weather. Call the tool." || string(a.Content) != `"Checking."` ||
		len(a.ToolCalls) != 1 || a.ToolCalls[0].ID != "call_abc123" || a.ToolCalls[0].Function.Arguments != `{"location":"Paris"}` {
		t.Fatalf("assistant replay = %+v\n%s", a, s.Requests()[1].Body)
	}
	if tr := c.Messages[3]; tr.Role != "tool" || tr.ToolCallID != "call_abc123" || string(tr.Content) != `"18C"` {
		t.Fatalf("tool result = %+v", tr)
	}
}

func TestParallelToolCallsAndOrphans(t *testing.T) {
	s := wiretest.New(t,
		wiretest.Reply{Body: wiretest.File(t, "testdata/parallel.sse")},
		wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")},
	)
	p := newProvider(s, openai.Compat{})
	user := wiretest.User("read both")
	first := provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), gpt, ctxOf(user), provider.Options{}))
	if n := len(first.GetContent()); n != 2 || first.GetContent()[1].GetToolCall().GetArguments().AsMap()["path"] != "b.txt" {
		t.Fatalf("first = %v", first)
	}
	provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), gpt, ctxOf(user, wiretest.Assistant(first), wiretest.ToolResult("call_B", "read", "B")), provider.Options{}))
	c := decode(t, s.Requests()[1])
	var got []string
	for _, m := range c.Messages[3:] {
		got = append(got, m.Role+":"+m.ToolCallID+":"+string(m.Content))
	}
	if want := []string{`tool:call_B:"B"`, `tool:call_A:"` + provider.NoResultText + `"`}; !reflect.DeepEqual(got, want) {
		t.Fatalf("results = %v, want %v", got, want)
	}
}

func TestAbortKeepsPartialContent(t *testing.T) {
	partial := strings.SplitAfter(wiretest.File(t, "testdata/text.sse"), `"content":"Hello"},"finish_reason":null}]}`+"\n\n")[0]
	s := wiretest.New(t, wiretest.Reply{Body: partial, Hang: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs := wiretest.CancelAfter(newProvider(s, openai.Compat{}).Stream(ctx, gpt, ctxOf(wiretest.User("hi")), provider.Options{}), provider.EventTextDelta, cancel)
	m := wiretest.Final(evs)
	if m.GetStopReason() != agentdv1.StopReason_STOP_REASON_ABORTED || m.GetContent()[0].GetText().GetText() != "Hello" {
		t.Fatalf("final = %v", m)
	}
}

func TestTruncatedStream(t *testing.T) {
	s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "testdata/truncated.sse")})
	m := provider.Collect(newProvider(s, openai.Compat{}).Stream(context.Background(), qwen, ctxOf(wiretest.User("hi")), provider.Options{}))
	if m.GetStopReason() != agentdv1.StopReason_STOP_REASON_ERROR || !strings.Contains(m.GetErrorMessage(), "terminated") {
		t.Fatalf("final = %v", m)
	}
	if c := m.GetContent(); len(c) != 3 || len(c[2].GetToolCall().GetArguments().GetFields()) != 0 || c[2].GetToolCall().GetId() != "call_abc123" {
		t.Fatalf("partial content = %v", c)
	}
}

func TestHTTPFailures(t *testing.T) {
	tests := []struct {
		name                string
		reply               wiretest.Reply
		prefix              string
		retryable, overflow bool
		retryAfter          time.Duration
	}{
		{"rate limit", wiretest.JSON(429, `{"error":{"message":"Rate limit reached for gpt-4.1","type":"requests","code":"rate_limit_exceeded"}}`, "Retry-After-Ms", "1500"),
			"429 requests: Rate limit reached", true, false, 1500 * time.Millisecond},
		{"server error", wiretest.JSON(500, `{"error":{"message":"The server had an error","type":"server_error"}}`), "500 server_error: The server had an error", true, false, 0},
		{"context overflow", wiretest.JSON(400, `{"error":{"message":"Your input exceeds the context window of this model.","type":"invalid_request_error","code":"context_length_exceeded"}}`),
			provider.ContextOverflowPrefix + "400 invalid_request_error", false, true, 0},
		{"llama.cpp overflow", wiretest.JSON(400, `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}`),
			provider.ContextOverflowPrefix + "400 exceed_context_size_error", false, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := wiretest.New(t, tt.reply)
			evs := wiretest.Drain(newProvider(s, openai.Compat{}).Stream(context.Background(), gpt, ctxOf(wiretest.User("hi")), provider.Options{}))
			m := wiretest.Final(evs)
			if len(evs) != 1 || m.GetStopReason() != agentdv1.StopReason_STOP_REASON_ERROR || !strings.HasPrefix(m.GetErrorMessage(), tt.prefix) {
				t.Fatalf("events %v final %v", wiretest.Types(evs), m)
			}
			if provider.IsRetryable(m) != tt.retryable || provider.IsContextOverflow(m, 0) != tt.overflow || evs[0].RetryAfter != tt.retryAfter || strings.Contains(m.GetErrorMessage(), secret) {
				t.Fatalf("retryable=%v overflow=%v retryAfter=%v", provider.IsRetryable(m), provider.IsContextOverflow(m, 0), evs[0].RetryAfter)
			}
			if len(s.Requests()) != 1 {
				t.Fatalf("SDK retried: %d requests", len(s.Requests()))
			}
		})
	}
}

func TestRateLimitIsRetriedAfterItsWait(t *testing.T) {
	s := wiretest.New(t,
		wiretest.JSON(429, `{"error":{"message":"Rate limit","type":"requests"}}`, "Retry-After", "2"),
		wiretest.JSON(503, `{"error":{"message":"overloaded","type":"server_error"}}`),
		wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")},
	)
	p := newProvider(s, openai.Compat{})
	m, failed, slept := wiretest.Retry(provider.RetryPolicy{BaseDelay: 10 * time.Millisecond}, func() provider.Stream {
		return wiretest.Replayed(p.Stream)(context.Background(), gpt, ctxOf(wiretest.User("hi")), provider.Options{})
	})
	if m.GetStopReason() != agentdv1.StopReason_STOP_REASON_STOP || len(failed) != 2 ||
		!reflect.DeepEqual(slept, []time.Duration{2 * time.Second, 20 * time.Millisecond}) {
		t.Fatalf("final %v failed %v slept %v", m, failed, slept)
	}
}

func TestCompatProfiles(t *testing.T) {
	user := wiretest.User("hi")
	opts := provider.Options{MaxTokens: 500, ThinkingLevel: agentdv1.ThinkingLevel_THINKING_LEVEL_LOW}
	tests := []struct {
		profile                   string
		wantRole                  string
		wantMaxTokens, wantMaxCmp bool
		wantEffort                string
		wantReasoning             string
		wantStreamUsage           bool
	}{
		{"openai", "developer", false, true, "low", "", true},
		{"ollama", "system", true, false, "low", "", true},
		{"vllm", "system", true, false, "", "", true},
		{"openrouter", "developer", true, false, "", `{"effort":"low"}`, true},
		{"groq", "system", false, true, "low", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")})
			compat := openai.Profiles()[tt.profile]
			provider.Collect(newProvider(s, compat).Stream(context.Background(), qwen, ctxOf(user), opts))
			c := decode(t, s.Requests()[0])
			if c.Messages[0].Role != tt.wantRole || (c.MaxTokens != nil) != tt.wantMaxTokens || (c.MaxCompletionTokens != nil) != tt.wantMaxCmp ||
				c.ReasoningEffort != tt.wantEffort || string(c.Reasoning) != tt.wantReasoning || (c.StreamOptions != nil) != tt.wantStreamUsage {
				t.Fatalf("body = %s", s.Requests()[0].Body)
			}
		})
	}
}
