package anthropic_test

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
	"github.com/agentd/agentd/provider/anthropic"
	"github.com/agentd/agentd/provider/internal/wiretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "sk-ant-test-secret-key"

var model = provider.Model{
	Provider: "anthropic", ID: "claude-sonnet-4-5", API: anthropic.API,
	ContextWindow: 200000, MaxOutputTokens: 64000, Reasoning: true,
	Price: provider.Price{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75},
}

func newProvider(s *wiretest.Server) *anthropic.Provider {
	return anthropic.New(anthropic.Config{APIKey: secret, BaseURL: s.URL, Now: func() time.Time { return time.Unix(1700000000, 0) }})
}

func ctxOf(msgs ...*agentdv1.Message) *agentdv1.Context {
	return &agentdv1.Context{SystemPrompt: "Be brief.", Messages: msgs}
}

func body(t *testing.T, r wiretest.Request) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("request body: %v\n%s", err, r.Body)
	}
	return m
}

func TestPlainText(t *testing.T) {
	s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")})
	evs := wiretest.Drain(newProvider(s).Stream(context.Background(), model, ctxOf(wiretest.User("hi")), provider.Options{}))
	want := []string{"start", "text_start", "text_delta", "text_delta", "text_end", "done"}
	if got := wiretest.Types(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	m := wiretest.Final(evs)
	if m.GetContent()[0].GetText().GetText() != "Hello, world" || m.GetStopReason() != agentdv1.StopReason_STOP_REASON_STOP {
		t.Fatalf("final = %v", m)
	}
	u := m.GetUsage()
	if u.GetInput() != 25 || u.GetOutput() != 15 || u.GetCacheRead() != 100 || u.GetCacheWrite() != 10 || u.GetTotalTokens() != 150 {
		t.Fatalf("usage = %v", u)
	}
	wantCost := (25*3 + 15*15 + 100*0.3 + 10*3.75) / 1e6
	if d := u.GetCost().GetTotal() - wantCost; d > 1e-12 || d < -1e-12 {
		t.Fatalf("cost = %v, want %v", u.GetCost().GetTotal(), wantCost)
	}
	if m.GetResponseId() != "msg_01TEXT" || m.GetApi() != anthropic.API || m.GetModel() != model.ID {
		t.Fatalf("header fields = %q %q %q", m.GetResponseId(), m.GetApi(), m.GetModel())
	}
	req := s.Requests()[0]
	if req.Path != "/v1/messages" || req.Header.Get("Authorization") != "Bearer "+secret {
		t.Fatalf("request %s auth %q", req.Path, req.Header.Get("Authorization"))
	}
	b := body(t, req)
	if b["stream"] != true || b["model"] != model.ID || b["max_tokens"] != float64(32000) {
		t.Fatalf("body = %s", req.Body)
	}
	if _, ok := b["thinking"]; ok {
		t.Fatalf("thinking sent without a thinking level: %s", req.Body)
	}
	if !strings.Contains(string(req.Body), `"system":[{"text":"Be brief.","cache_control":{"type":"ephemeral"}`) {
		t.Fatalf("system prompt not cached: %s", req.Body)
	}
}

func TestThinkingToolCallThenFollowUp(t *testing.T) {
	s := wiretest.New(t,
		wiretest.Reply{Body: wiretest.File(t, "testdata/thinking_tool.sse")},
		wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")},
	)
	p := newProvider(s)
	opts := provider.Options{ThinkingLevel: agentdv1.ThinkingLevel_THINKING_LEVEL_MEDIUM, MaxTokens: 1000}
	user := wiretest.User("Weather in SF?")
	evs := wiretest.Drain(wiretest.Replayed(p.Stream)(context.Background(), model, ctxOf(user), opts))
	want := []string{"start", "thinking_start", "thinking_delta", "thinking_delta", "thinking_end",
		"text_start", "text_delta", "text_end", "toolcall_start", "toolcall_delta", "toolcall_delta", "toolcall_end", "done"}
	if got := wiretest.Types(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	const sig = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/=="
	if evs[4].Signature != sig || evs[4].ContentIndex != 0 || evs[11].ContentIndex != 2 {
		t.Fatalf("thinking_end = %+v", evs[4])
	}
	first := wiretest.Final(evs)
	if first.GetStopReason() != agentdv1.StopReason_STOP_REASON_TOOL_USE {
		t.Fatalf("stop = %v", first.GetStopReason())
	}
	tc := first.GetContent()[2].GetToolCall()
	if tc.GetId() != "toolu_01A09q90qw90lq917835lq9" || tc.GetArguments().AsMap()["location"] != "San Francisco, CA" {
		t.Fatalf("tool call = %v", tc)
	}
	b0 := body(t, s.Requests()[0])
	if th, _ := b0["thinking"].(map[string]any); th["type"] != "enabled" || th["budget_tokens"] != float64(8192) || b0["max_tokens"] != float64(9192) {
		t.Fatalf("thinking params: %s", s.Requests()[0].Body)
	}

	second := ctxOf(user, wiretest.Assistant(first), wiretest.ToolResult(tc.GetId(), "get_weather", "15 degrees"))
	if final := provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), model, second, opts)); final.GetStopReason() != agentdv1.StopReason_STOP_REASON_STOP {
		t.Fatalf("second call: %v", final)
	}
	raw := string(s.Requests()[1].Body)
	for _, frag := range []string{
		`{"signature":"` + sig + `","thinking":"The user wants the weather. I will call get_weather.","type":"thinking"}`,
		`{"id":"toolu_01A09q90qw90lq917835lq9","input":{"location":"San Francisco, CA","unit":"celsius"},"name":"get_weather","type":"tool_use"}`,
		`"tool_use_id":"toolu_01A09q90qw90lq917835lq9"`,
	} {
		if !strings.Contains(raw, frag) {
			t.Errorf("second request lacks %s\nbody: %s", frag, raw)
		}
	}
}

func TestRedactedThinkingReplaysVerbatim(t *testing.T) {
	s := wiretest.New(t,
		wiretest.Reply{Body: wiretest.File(t, "testdata/redacted.sse")},
		wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")},
	)
	p := newProvider(s)
	user := wiretest.User("hi")
	first := provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), model, ctxOf(user), provider.Options{}))
	th := first.GetContent()[0].GetThinking()
	const data = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB5URj2pabmeHZbsvmM="
	if !th.GetRedacted() || th.GetThinkingSignature() != data || th.GetThinking() != "" {
		t.Fatalf("redacted block = %v", th)
	}
	provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), model, ctxOf(user, wiretest.Assistant(first), wiretest.User("more")), provider.Options{}))
	if raw := string(s.Requests()[1].Body); !strings.Contains(raw, `{"data":"`+data+`","type":"redacted_thinking"}`) {
		t.Fatalf("redacted thinking not replayed verbatim: %s", raw)
	}
}

func TestParallelToolCallsAndOrphans(t *testing.T) {
	s := wiretest.New(t,
		wiretest.Reply{Body: wiretest.File(t, "testdata/parallel.sse")},
		wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")},
	)
	p := newProvider(s)
	user := wiretest.User("read both")
	first := provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), model, ctxOf(user), provider.Options{}))
	var ids []string
	for _, b := range first.GetContent() {
		ids = append(ids, b.GetToolCall().GetId()+"="+b.GetToolCall().GetArguments().AsMap()["path"].(string))
	}
	if !reflect.DeepEqual(ids, []string{"toolu_A=a.txt", "toolu_B=b.txt"}) {
		t.Fatalf("calls = %v", ids)
	}
	// Only one result came back before the user spoke again.
	provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), model, ctxOf(user, wiretest.Assistant(first),
		wiretest.ToolResult("toolu_A", "read", "A"), wiretest.User("go on")), provider.Options{}))
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type      string `json:"type"`
				ID        string `json:"id"`
				ToolUseID string `json:"tool_use_id"`
				IsError   bool   `json:"is_error"`
				Content   []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(s.Requests()[1].Body, &req); err != nil {
		t.Fatal(err)
	}
	results := req.Messages[2].Content
	if len(results) != 2 || results[0].ToolUseID != "toolu_A" || results[1].ToolUseID != "toolu_B" ||
		!results[1].IsError || results[1].Content[0].Text != provider.NoResultText || results[0].IsError {
		t.Fatalf("tool results = %+v", results)
	}
}

func TestAbortKeepsPartialContent(t *testing.T) {
	partial := strings.SplitAfter(wiretest.File(t, "testdata/text.sse"), `"text":"Hello"}}`+"\n\n")[0]
	s := wiretest.New(t, wiretest.Reply{Body: partial, Hang: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs := wiretest.CancelAfter(newProvider(s).Stream(ctx, model, ctxOf(wiretest.User("hi")), provider.Options{}), provider.EventTextDelta, cancel)
	m := wiretest.Final(evs)
	if evs[len(evs)-1].Type != provider.EventError || m.GetStopReason() != agentdv1.StopReason_STOP_REASON_ABORTED ||
		m.GetErrorMessage() != provider.AbortedMessage || m.GetContent()[0].GetText().GetText() != "Hello" {
		t.Fatalf("final = %v", m)
	}
}

func TestTruncatedStream(t *testing.T) {
	s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "testdata/truncated.sse")})
	m := provider.Collect(newProvider(s).Stream(context.Background(), model, ctxOf(wiretest.User("hi")), provider.Options{}))
	if m.GetStopReason() != agentdv1.StopReason_STOP_REASON_ERROR || !strings.Contains(m.GetErrorMessage(), "terminated") {
		t.Fatalf("final = %v", m)
	}
	c := m.GetContent()
	if len(c) != 3 || c[0].GetThinking().GetThinkingSignature() == "" || c[1].GetText().GetText() != "Let me check." ||
		len(c[2].GetToolCall().GetArguments().GetFields()) != 0 {
		t.Fatalf("partial content = %v", c)
	}
}

func TestHTTPFailures(t *testing.T) {
	tests := []struct {
		name                string
		reply               wiretest.Reply
		wantPrefix          string
		retryable, overflow bool
		retryAfter          time.Duration
	}{
		{"rate limit", wiretest.JSON(429, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`, "Retry-After", "7"),
			"429 rate_limit_error: Number of request tokens", true, false, 7 * time.Second},
		{"server error", wiretest.JSON(500, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`),
			"500 api_error: Internal server error", true, false, 0},
		{"overloaded", wiretest.JSON(529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`),
			"529 overloaded_error: Overloaded", true, false, 0},
		{"context overflow", wiretest.JSON(400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 213462 tokens > 200000 maximum"}}`),
			provider.ContextOverflowPrefix + "400 invalid_request_error: prompt is too long", false, true, 0},
		{"bad key", wiretest.JSON(401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`),
			"401 authentication_error: invalid x-api-key", false, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := wiretest.New(t, tt.reply)
			evs := wiretest.Drain(newProvider(s).Stream(context.Background(), model, ctxOf(wiretest.User("hi")), provider.Options{}))
			if got := wiretest.Types(evs); !reflect.DeepEqual(got, []string{"error"}) {
				t.Fatalf("events = %v", got)
			}
			m := wiretest.Final(evs)
			if m.GetStopReason() != agentdv1.StopReason_STOP_REASON_ERROR || !strings.HasPrefix(m.GetErrorMessage(), tt.wantPrefix) {
				t.Fatalf("final = %v", m)
			}
			if strings.Contains(m.GetErrorMessage(), secret) {
				t.Fatal("error message leaks the API key")
			}
			if provider.IsRetryable(m) != tt.retryable || provider.IsContextOverflow(m, model.ContextWindow) != tt.overflow || evs[0].RetryAfter != tt.retryAfter {
				t.Fatalf("retryable=%v overflow=%v retryAfter=%v", provider.IsRetryable(m), provider.IsContextOverflow(m, 0), evs[0].RetryAfter)
			}
			if len(s.Requests()) != 1 {
				t.Fatalf("the SDK retried on its own: %d requests", len(s.Requests()))
			}
		})
	}
}

func TestRateLimitIsRetriedAfterItsWait(t *testing.T) {
	s := wiretest.New(t,
		wiretest.JSON(429, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, "Retry-After", "3"),
		wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")},
	)
	p := newProvider(s)
	m, failed, slept := wiretest.Retry(provider.RetryPolicy{}, func() provider.Stream {
		return wiretest.Replayed(p.Stream)(context.Background(), model, ctxOf(wiretest.User("hi")), provider.Options{})
	})
	if m.GetStopReason() != agentdv1.StopReason_STOP_REASON_STOP || !reflect.DeepEqual(slept, []time.Duration{3 * time.Second}) ||
		len(failed) != 1 || !strings.HasPrefix(failed[0].GetErrorMessage(), "429 rate_limit_error: slow down") {
		t.Fatalf("final %v, failed %v, slept %v", m, failed, slept)
	}
	if len(s.Requests()) != 2 {
		t.Fatalf("requests = %d", len(s.Requests()))
	}
}

func TestMalformedEvents(t *testing.T) {
	const start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_M\",\"usage\":{\"input_tokens\":5}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"part\"}}\n\n"
	tests := []struct {
		name, event, wantMessage string
	}{
		{"invalid JSON", `{"type":"content_block_delta",x}`,
			"Malformed stream event: invalid character 'x' looking for beginning of object key string"},
		{"field of another type", `{"type":"content_block_delta","index":"0","delta":{"type":"text_delta","text":"more"}}`,
			"Malformed stream event: json: cannot unmarshal string into Go struct field wireEvent.index of type int"},
		{"negative block index", `{"type":"content_block_start","index":-1,"content_block":{"type":"text","text":""}}`,
			"Malformed stream event: content block index -1 out of range"},
		{"huge block index", `{"type":"content_block_start","index":4611686018427387904,"content_block":{"type":"text","text":""}}`,
			"Malformed stream event: content block index 4611686018427387904 out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := wiretest.New(t, wiretest.Reply{Body: start + "event: x\ndata: " + tt.event + "\n\n"})
			evs := wiretest.Drain(newProvider(s).Stream(context.Background(), model, ctxOf(wiretest.User("hi")), provider.Options{}))
			m := wiretest.Final(evs)
			if evs[len(evs)-1].Type != provider.EventError || m.GetStopReason() != agentdv1.StopReason_STOP_REASON_ERROR ||
				m.GetErrorMessage() != tt.wantMessage {
				t.Fatalf("final = %v, want error %q", m, tt.wantMessage)
			}
			if got := m.GetContent()[0].GetText().GetText(); got != "part" {
				t.Fatalf("partial text = %q", got)
			}
		})
	}
}

// An overload reported as an error event in the middle of an answer is as
// retryable as the same condition answered with HTTP 529: the failed
// answer keeps what had streamed, and the retry's answer is complete.
func TestOverloadMidStreamIsRetried(t *testing.T) {
	partial := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":5}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n" +
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	s := wiretest.New(t, wiretest.Reply{Body: partial}, wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")})
	p := newProvider(s)
	m, failed, slept := wiretest.Retry(provider.RetryPolicy{}, func() provider.Stream {
		return wiretest.Replayed(p.Stream)(context.Background(), model, ctxOf(wiretest.User("hi")), provider.Options{})
	})
	if len(failed) != 1 || failed[0].GetErrorMessage() != "overloaded_error: Overloaded" || failed[0].GetContent()[0].GetText().GetText() != "Hel" {
		t.Fatalf("failed attempts %v", failed)
	}
	if m.GetStopReason() != agentdv1.StopReason_STOP_REASON_STOP || m.GetContent()[0].GetText().GetText() != "Hello, world" ||
		!reflect.DeepEqual(slept, []time.Duration{2 * time.Second}) {
		t.Fatalf("final %v slept %v", m, slept)
	}
}

// A server that never answers, or stops in the middle of an answer, ends
// the call with a timeout error through the real SDK client, instead of
// holding it forever.
func TestSilentServerTimesOut(t *testing.T) {
	started := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":5}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n"
	limits := provider.Timeouts{FirstByte: 150 * time.Millisecond, Idle: 150 * time.Millisecond}
	tests := []struct {
		name     string
		reply    wiretest.Reply
		wantErr  string
		wantText string
	}{
		{"no response headers", wiretest.Reply{NoHeaders: true}, "first-byte timeout", ""},
		{"stalls mid-answer", wiretest.Reply{Body: started, Hang: true}, "idle timeout", "Hel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := wiretest.New(t, tt.reply)
			stream := provider.WithTimeouts(newProvider(s).Stream, limits)
			m := wiretest.Final(wiretest.Drain(stream(context.Background(), model, ctxOf(wiretest.User("hi")), provider.Options{})))
			if m.GetStopReason() != agentdv1.StopReason_STOP_REASON_ERROR || !strings.HasPrefix(m.GetErrorMessage(), provider.TimedOutPrefix) ||
				!strings.Contains(m.GetErrorMessage(), tt.wantErr) || !provider.IsRetryable(m) {
				t.Fatalf("final %v %q, want a retryable %s", m.GetStopReason(), m.GetErrorMessage(), tt.wantErr)
			}
			var text string
			if len(m.GetContent()) > 0 {
				text = m.GetContent()[0].GetText().GetText()
			}
			if text != tt.wantText {
				t.Fatalf("partial content %q, want %q", text, tt.wantText)
			}
		})
	}
}
