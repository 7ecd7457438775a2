package openairesponses_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/internal/wiretest"
	"github.com/agentd/agentd/provider/openairesponses"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "sk-openai-responses-test-secret"

var gpt = provider.Model{Provider: "openai", ID: "gpt-4.1", API: openairesponses.API, ContextWindow: 1047576, MaxOutputTokens: 32768,
	Price: provider.Price{Input: 2, Output: 8, CacheRead: 0.5}}

var o4 = provider.Model{Provider: "openai", ID: "o4-mini", API: openairesponses.API, ContextWindow: 200000, MaxOutputTokens: 100000, Reasoning: true,
	Price: provider.Price{Input: 1.1, Output: 4.4, CacheRead: 0.275}}

func newProvider(s *wiretest.Server) *openairesponses.Provider {
	return openairesponses.New(openairesponses.Config{APIKey: secret, BaseURL: s.URL + "/v1", Now: func() time.Time { return time.Unix(1700000000, 0) }})
}

func ctxOf(msgs ...*agentdv1.Message) *agentdv1.Context {
	return &agentdv1.Context{SystemPrompt: "Be brief.", Messages: msgs}
}

type request struct {
	Model     string            `json:"model"`
	Input     []json.RawMessage `json:"input"`
	Store     *bool             `json:"store"`
	Stream    bool              `json:"stream"`
	Include   []string          `json:"include"`
	Reasoning *struct {
		Effort  string `json:"effort"`
		Summary string `json:"summary"`
	} `json:"reasoning"`
	MaxOutputTokens *int64 `json:"max_output_tokens"`
}

type inputItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	ID      *string         `json:"id"`
	Phase   string          `json:"phase"`
	CallID  string          `json:"call_id"`
	Name    string          `json:"name"`
	Args    string          `json:"arguments"`
	Output  json.RawMessage `json:"output"`
	Content json.RawMessage `json:"content"`
}

func decode(t *testing.T, r wiretest.Request) (request, []inputItem) {
	t.Helper()
	var req request
	if err := json.Unmarshal(r.Body, &req); err != nil {
		t.Fatalf("%v: %s", err, r.Body)
	}
	items := make([]inputItem, len(req.Input))
	for i, raw := range req.Input {
		if err := json.Unmarshal(raw, &items[i]); err != nil {
			t.Fatal(err)
		}
	}
	return req, items
}

// describe lists the items compactly: type/role/id/call_id (easy input
// messages carry no type, as pi sends them).
func describe(items []inputItem) []string {
	var out []string
	for _, it := range items {
		s := it.Type
		if it.Role != "" {
			s += ":" + it.Role
		}
		if it.ID != nil {
			s += ":id=" + *it.ID
		}
		if it.CallID != "" {
			s += ":call=" + it.CallID
		}
		out = append(out, s)
	}
	return out
}

func TestPlainText(t *testing.T) {
	s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")})
	evs := wiretest.Drain(newProvider(s).Stream(context.Background(), gpt, ctxOf(wiretest.User("hi")), provider.Options{MaxTokens: 300}))
	if got, want := wiretest.Types(evs), []string{"start", "text_start", "text_delta", "text_delta", "text_end", "done"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	m := wiretest.Final(evs)
	u := m.GetUsage()
	txt := m.GetContent()[0].GetText()
	if txt.GetText() != "Hello, world" || txt.GetTextSignature() != `{"v":1,"id":"msg_TEXT1","phase":"final_answer"}` || m.GetResponseId() != "resp_TEXT" ||
		u.GetInput() != 20 || u.GetCacheRead() != 100 || u.GetOutput() != 15 || u.GetTotalTokens() != 135 || m.GetStopReason() != agentdv1.StopReason_STOP_REASON_STOP {
		t.Fatalf("final = %v", m)
	}
	if want := (20*2 + 15*8 + 100*0.5) / 1e6; u.GetCost().GetTotal() < want-1e-12 || u.GetCost().GetTotal() > want+1e-12 {
		t.Fatalf("cost = %v, want %v", u.GetCost().GetTotal(), want)
	}
	r := s.Requests()[0]
	if r.Path != "/v1/responses" || r.Header.Get("Authorization") != "Bearer "+secret {
		t.Fatalf("request to %s", r.Path)
	}
	req, items := decode(t, r)
	if !req.Stream || req.Store == nil || *req.Store || req.Model != "gpt-4.1" || req.Reasoning != nil || len(req.Include) != 0 ||
		req.MaxOutputTokens == nil || *req.MaxOutputTokens != 300 {
		t.Fatalf("body = %s", r.Body)
	}
	if got, want := describe(items), []string{":system", ":user"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("items = %v, want %v", got, want)
	}
}

func TestReasoningToolCallThenFollowUp(t *testing.T) {
	s := wiretest.New(t,
		wiretest.Reply{Body: wiretest.File(t, "testdata/reasoning_tool.sse")},
		wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")},
	)
	p := newProvider(s)
	user := wiretest.User("Weather in Paris?")
	evs := wiretest.Drain(wiretest.Replayed(p.Stream)(context.Background(), o4, ctxOf(user), provider.Options{ThinkingLevel: agentdv1.ThinkingLevel_THINKING_LEVEL_HIGH}))
	want := []string{"start", "thinking_start", "thinking_delta", "thinking_delta", "thinking_delta", "thinking_end",
		"text_start", "text_delta", "text_end", "toolcall_start", "toolcall_delta", "toolcall_delta", "toolcall_end", "done"}
	if got := wiretest.Types(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	first := wiretest.Final(evs)
	rawItem := `{"id":"rs_R1","type":"reasoning","encrypted_content":"gAAAAABoEncRyPtEd+/reasoning==","summary":[{"type":"summary_text","text":"Need the weather."},{"type":"summary_text","text":"Call the tool."}]}`
	th := first.GetContent()[0].GetThinking()
	tx := first.GetContent()[1].GetText()
	tc := first.GetContent()[2].GetToolCall()
	if th.GetThinking() != "Need the weather.\n\nCall the tool." || th.GetThinkingSignature() != rawItem ||
		tx.GetTextSignature() != `{"v":1,"id":"msg_M1","phase":"commentary"}` ||
		tc.GetId() != "call_abc123|fc_F1" || tc.GetArguments().AsMap()["location"] != "Paris" ||
		first.GetStopReason() != agentdv1.StopReason_STOP_REASON_TOOL_USE || first.GetUsage().GetOutput() != 40 {
		t.Fatalf("first = %v", first)
	}
	req0, _ := decode(t, s.Requests()[0])
	if req0.Reasoning == nil || req0.Reasoning.Effort != "high" || req0.Reasoning.Summary != "auto" ||
		!reflect.DeepEqual(req0.Include, []string{"reasoning.encrypted_content"}) || *req0.Store {
		t.Fatalf("first body = %s", s.Requests()[0].Body)
	}

	provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), o4, ctxOf(user, wiretest.Assistant(first), wiretest.ToolResult("call_abc123|fc_F1", "get_weather", "18C")), provider.Options{}))
	r := s.Requests()[1]
	// The reasoning item goes back byte for byte, right before the items it
	// led to.
	if !bytes.Contains(r.Body, []byte(`{"content":[{"text":"Weather in Paris?","type":"input_text"}],"role":"user"},`+rawItem+`,`)) {
		t.Fatalf("reasoning item not replayed verbatim:\n%s", r.Body)
	}
	_, items := decode(t, r)
	if got, want := describe(items), []string{":developer", ":user", "reasoning:id=rs_R1", "message:assistant:id=msg_M1",
		"function_call:id=fc_F1:call=call_abc123", "function_call_output:call=call_abc123"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("items = %v, want %v\n%s", got, want, r.Body)
	}
	if items[3].Phase != "commentary" || !strings.Contains(string(items[3].Content), `"text":"Checking."`) ||
		items[4].Name != "get_weather" || items[4].Args != `{"location":"Paris"}` || string(items[5].Output) != `"18C"` {
		t.Fatalf("items = %+v", items)
	}
}

func TestRedactedReasoningKeptForSameModelOnly(t *testing.T) {
	s := wiretest.New(t,
		wiretest.Reply{Body: wiretest.File(t, "testdata/redacted.sse")},
		wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")},
		wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")},
	)
	p := newProvider(s)
	user := wiretest.User("6*7?")
	first := provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), o4, ctxOf(user), provider.Options{}))
	th := first.GetContent()[0].GetThinking()
	if th.GetThinking() != "" || th.GetThinkingSignature() != `{"id":"rs_HIDDEN","type":"reasoning","encrypted_content":"gAAAAABhiddenOnly","summary":[]}` {
		t.Fatalf("first = %v", first)
	}
	next := ctxOf(user, wiretest.Assistant(first), wiretest.User("why?"))
	provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), o4, next, provider.Options{}))
	if !bytes.Contains(s.Requests()[1].Body, []byte(`"encrypted_content":"gAAAAABhiddenOnly"`)) {
		t.Fatalf("same model lost the reasoning item: %s", s.Requests()[1].Body)
	}
	// Another model of the same API gets neither the item nor its id.
	provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), gpt, next, provider.Options{}))
	_, items := decode(t, s.Requests()[2])
	if got, want := describe(items), []string{":system", ":user", "message:assistant:id=msg_1_0", ":user"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("items = %v, want %v\n%s", got, want, s.Requests()[2].Body)
	}
}

func TestParallelToolCallsAndOrphans(t *testing.T) {
	s := wiretest.New(t,
		wiretest.Reply{Body: wiretest.File(t, "testdata/parallel.sse")},
		wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")},
	)
	p := newProvider(s)
	user := wiretest.User("read both")
	first := provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), gpt, ctxOf(user), provider.Options{}))
	c := first.GetContent()
	if len(c) != 2 || c[0].GetToolCall().GetId() != "call_A|fc_A" || c[0].GetToolCall().GetArguments().AsMap()["path"] != "a.txt" ||
		c[1].GetToolCall().GetId() != "call_B|fc_B" || c[1].GetToolCall().GetArguments().AsMap()["path"] != "b.txt" {
		t.Fatalf("first = %v", first)
	}
	// Only call B got a result, and an orphan result for an unknown call
	// must never be sent.
	provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), gpt, ctxOf(user, wiretest.Assistant(first),
		wiretest.ToolResult("call_B|fc_B", "read", "B"), wiretest.ToolResult("call_ZZ|fc_ZZ", "read", "stray")), provider.Options{}))
	_, items := decode(t, s.Requests()[1])
	var got []string
	for _, it := range items[2:] {
		got = append(got, it.Type+":"+it.CallID+":"+string(it.Output))
	}
	want := []string{"function_call:call_A:", "function_call:call_B:", `function_call_output:call_B:"B"`, `function_call_output:call_A:"` + provider.NoResultText + `"`}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("items = %v, want %v", got, want)
	}
}

func TestAbortKeepsPartialContent(t *testing.T) {
	full := wiretest.File(t, "testdata/text.sse")
	cut := strings.Index(full, `"delta":"Hello"`)
	partial := full[:cut+strings.Index(full[cut:], "\n\n")+2]
	s := wiretest.New(t, wiretest.Reply{Body: partial, Hang: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs := wiretest.CancelAfter(newProvider(s).Stream(ctx, gpt, ctxOf(wiretest.User("hi")), provider.Options{}), provider.EventTextDelta, cancel)
	m := wiretest.Final(evs)
	if m.GetStopReason() != agentdv1.StopReason_STOP_REASON_ABORTED || m.GetContent()[0].GetText().GetText() != "Hello" || m.GetErrorMessage() != provider.AbortedMessage {
		t.Fatalf("final = %v", m)
	}
}

func TestStreamEndings(t *testing.T) {
	tests := []struct {
		file      string
		stop      agentdv1.StopReason
		errPrefix string
		blocks    int
		overflow  bool
	}{
		{"truncated.sse", agentdv1.StopReason_STOP_REASON_ERROR, "Stream terminated", 3, false},
		{"incomplete.sse", agentdv1.StopReason_STOP_REASON_LENGTH, "", 1, false},
		{"failed.sse", agentdv1.StopReason_STOP_REASON_ERROR, provider.ContextOverflowPrefix + "context_length_exceeded: Your input exceeds", 0, true},
		{"error_event.sse", agentdv1.StopReason_STOP_REASON_ERROR, "server_error: The server had an error", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "testdata/"+tt.file)})
			m := provider.Collect(newProvider(s).Stream(context.Background(), o4, ctxOf(wiretest.User("hi")), provider.Options{}))
			if m.GetStopReason() != tt.stop || !strings.HasPrefix(m.GetErrorMessage(), tt.errPrefix) || len(m.GetContent()) != tt.blocks ||
				provider.IsContextOverflow(m, 0) != tt.overflow {
				t.Fatalf("final = %v", m)
			}
		})
	}
	// The truncated stream keeps the unfinished call with {} arguments.
	s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "testdata/truncated.sse")})
	m := provider.Collect(newProvider(s).Stream(context.Background(), o4, ctxOf(wiretest.User("hi")), provider.Options{}))
	if tc := m.GetContent()[2].GetToolCall(); tc.GetId() != "call_abc123|fc_F1" || len(tc.GetArguments().GetFields()) != 0 {
		t.Fatalf("partial call = %v", tc)
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
		{"rate limit", wiretest.JSON(429, `{"error":{"message":"Rate limit reached for o4-mini","type":"requests","code":"rate_limit_exceeded"}}`, "Retry-After", "3"),
			"429 requests: Rate limit reached", true, false, 3 * time.Second},
		{"server error", wiretest.JSON(500, `{"error":{"message":"The server had an error","type":"server_error"}}`), "500 server_error: The server had an error", true, false, 0},
		{"context overflow", wiretest.JSON(400, `{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","code":"context_length_exceeded"}}`),
			provider.ContextOverflowPrefix + "400 invalid_request_error", false, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := wiretest.New(t, tt.reply)
			evs := wiretest.Drain(newProvider(s).Stream(context.Background(), o4, ctxOf(wiretest.User("hi")), provider.Options{}))
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
		wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")},
	)
	p := newProvider(s)
	m, _, slept := wiretest.Retry(provider.RetryPolicy{}, func() provider.Stream {
		return wiretest.Replayed(p.Stream)(context.Background(), gpt, ctxOf(wiretest.User("hi")), provider.Options{})
	})
	if m.GetStopReason() != agentdv1.StopReason_STOP_REASON_STOP || m.GetContent()[0].GetText().GetText() != "Hello, world" ||
		!reflect.DeepEqual(slept, []time.Duration{2 * time.Second}) || len(s.Requests()) != 2 {
		t.Fatalf("final %v slept %v", m, slept)
	}
}

func TestTextSignatureRoundTrip(t *testing.T) {
	tests := []struct {
		in          string
		id, phase   string
		ok          bool
		wantEncoded string
	}{
		{`{"v":1,"id":"msg_1","phase":"final_answer"}`, "msg_1", "final_answer", true, `{"v":1,"id":"msg_1","phase":"final_answer"}`},
		{`{"v":1,"id":"msg_2","phase":"bogus"}`, "msg_2", "", true, `{"v":1,"id":"msg_2"}`},
		{"msg_legacy", "msg_legacy", "", true, `{"v":1,"id":"msg_legacy"}`},
		{"", "", "", false, ""},
	}
	for _, tt := range tests {
		sig, ok := openairesponses.ParseTextSignature(tt.in)
		if ok != tt.ok || sig.ID != tt.id || sig.Phase != tt.phase {
			t.Fatalf("%q: %+v %v", tt.in, sig, ok)
		}
		if ok && openairesponses.EncodeTextSignature(sig.ID, sig.Phase) != tt.wantEncoded {
			t.Fatalf("%q: encoded %q", tt.in, openairesponses.EncodeTextSignature(sig.ID, sig.Phase))
		}
	}
}

// TestLiveOpenAIResponses calls the real API when OPENAI_API_KEY is set.
func TestLiveOpenAIResponses(t *testing.T) {
	key := os.Getenv("OPENAI_API_KEY")
	if key == "" {
		t.Skip("OPENAI_API_KEY not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := openairesponses.New(openairesponses.Config{APIKey: key})
	model := provider.Model{Provider: "openai", ID: "gpt-4.1-mini", API: openairesponses.API}
	m := provider.Collect(wiretest.Replayed(p.Stream)(ctx, model, ctxOf(wiretest.User("Say the word: pong")), provider.Options{MaxTokens: 50}))
	if m.GetStopReason() != agentdv1.StopReason_STOP_REASON_STOP || len(m.GetContent()) == 0 || m.GetContent()[0].GetText().GetText() == "" ||
		m.GetUsage().GetOutput() == 0 || m.GetResponseId() == "" {
		t.Fatalf("live answer = %v", m)
	}
}
