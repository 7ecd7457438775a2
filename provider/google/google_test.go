package google_test

import (
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
	"github.com/agentd/agentd/provider/google"
	"github.com/agentd/agentd/provider/internal/wiretest"
)

// The genai SDK's dependencies start an opencensus worker at init; it is
// not ours and lives for the process.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

const secret = "AIza-gemini-test-secret"

var flash = provider.Model{Provider: "google", ID: "gemini-2.5-flash", API: google.API, ContextWindow: 1048576, MaxOutputTokens: 65536,
	Price: provider.Price{Input: 0.3, Output: 2.5, CacheRead: 0.075}}

var pro = provider.Model{Provider: "google", ID: "gemini-2.5-pro", API: google.API, ContextWindow: 1048576, MaxOutputTokens: 65536, Reasoning: true,
	Price: provider.Price{Input: 1.25, Output: 10, CacheRead: 0.31}}

func newProvider(t testing.TB, s *wiretest.Server) *google.Provider {
	t.Helper()
	p, err := google.New(context.Background(), google.Config{APIKey: secret, BaseURL: s.URL, Now: func() time.Time { return time.Unix(1700000000, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ctxOf(msgs ...*agentdv1.Message) *agentdv1.Context {
	return &agentdv1.Context{SystemPrompt: "Be brief.", Messages: msgs}
}

type part struct {
	Text             string `json:"text"`
	Thought          bool   `json:"thought"`
	ThoughtSignature string `json:"thoughtSignature"`
	FunctionCall     *struct {
		ID   string         `json:"id"`
		Name string         `json:"name"`
		Args map[string]any `json:"args"`
	} `json:"functionCall"`
	FunctionResponse *struct {
		ID       string         `json:"id"`
		Name     string         `json:"name"`
		Response map[string]any `json:"response"`
	} `json:"functionResponse"`
}

type request struct {
	Contents []struct {
		Role  string `json:"role"`
		Parts []part `json:"parts"`
	} `json:"contents"`
	SystemInstruction *struct {
		Parts []part `json:"parts"`
	} `json:"systemInstruction"`
	GenerationConfig *struct {
		MaxOutputTokens int `json:"maxOutputTokens"`
		ThinkingConfig  *struct {
			IncludeThoughts bool `json:"includeThoughts"`
			ThinkingBudget  int  `json:"thinkingBudget"`
		} `json:"thinkingConfig"`
	} `json:"generationConfig"`
}

func decode(t *testing.T, r wiretest.Request) request {
	t.Helper()
	var req request
	if err := json.Unmarshal(r.Body, &req); err != nil {
		t.Fatalf("%v: %s", err, r.Body)
	}
	return req
}

func TestPlainText(t *testing.T) {
	s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")})
	evs := wiretest.Drain(newProvider(t, s).Stream(context.Background(), flash, ctxOf(wiretest.User("hi")), provider.Options{MaxTokens: 300}))
	if got, want := wiretest.Types(evs), []string{"start", "text_start", "text_delta", "text_delta", "text_end", "done"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	m := wiretest.Final(evs)
	u := m.GetUsage()
	if m.GetContent()[0].GetText().GetText() != "Hello, world" || m.GetResponseId() != "resp-TEXT" || m.GetStopReason() != agentdv1.StopReason_STOP_REASON_STOP ||
		u.GetInput() != 20 || u.GetCacheRead() != 100 || u.GetOutput() != 15 || u.GetTotalTokens() != 135 {
		t.Fatalf("final = %v", m)
	}
	if want := (20*0.3 + 15*2.5 + 100*0.075) / 1e6; u.GetCost().GetTotal() < want-1e-12 || u.GetCost().GetTotal() > want+1e-12 {
		t.Fatalf("cost = %v, want %v", u.GetCost().GetTotal(), want)
	}
	r := s.Requests()[0]
	if r.Path != "/v1beta/models/gemini-2.5-flash:streamGenerateContent" || r.Header.Get("X-Goog-Api-Key") != secret {
		t.Fatalf("request to %s headers %v", r.Path, r.Header)
	}
	req := decode(t, r)
	if req.SystemInstruction == nil || req.SystemInstruction.Parts[0].Text != "Be brief." || len(req.Contents) != 1 || req.Contents[0].Role != "user" ||
		req.GenerationConfig == nil || req.GenerationConfig.MaxOutputTokens != 300 || req.GenerationConfig.ThinkingConfig != nil {
		t.Fatalf("body = %s", r.Body)
	}
}

func TestThinkingSignaturesToolCallThenFollowUp(t *testing.T) {
	s := wiretest.New(t,
		wiretest.Reply{Body: wiretest.File(t, "testdata/thinking_tool.sse")},
		wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")},
	)
	p := newProvider(t, s)
	user := wiretest.User("Weather in Paris?")
	evs := wiretest.Drain(wiretest.Replayed(p.Stream)(context.Background(), pro, ctxOf(user), provider.Options{ThinkingLevel: agentdv1.ThinkingLevel_THINKING_LEVEL_MEDIUM}))
	want := []string{"start", "thinking_start", "thinking_delta", "thinking_delta", "thinking_end", "text_start", "text_delta", "text_end",
		"toolcall_start", "toolcall_delta", "toolcall_end", "done"}
	if got := wiretest.Types(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	first := wiretest.Final(evs)
	th := first.GetContent()[0].GetThinking()
	tx := first.GetContent()[1].GetText()
	tc := first.GetContent()[2].GetToolCall()
	if th.GetThinking() != "**Planning** Need the weather. Call the tool." || th.GetThinkingSignature() != "VGhpbmtTaWctMDAx" ||
		tx.GetTextSignature() != "VGV4dFNpZy0wMDI=" || tc.GetThoughtSignature() != "Q2FsbFNpZy0wMDMrLz0/" ||
		tc.GetId() == "" || tc.GetId() != provider.NormalizeToolCallID(tc.GetId(), google.API) || tc.GetArguments().AsMap()["location"] != "Paris" ||
		first.GetStopReason() != agentdv1.StopReason_STOP_REASON_TOOL_USE || first.GetUsage().GetOutput() != 40 || first.GetUsage().GetInput() != 50 {
		t.Fatalf("first = %v", first)
	}
	// The same wire stream always yields the same synthetic id.
	again := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "testdata/thinking_tool.sse")})
	if m := provider.Collect(newProvider(t, again).Stream(context.Background(), pro, ctxOf(user), provider.Options{})); m.GetContent()[2].GetToolCall().GetId() != tc.GetId() {
		t.Fatalf("synthetic id not stable: %q vs %q", m.GetContent()[2].GetToolCall().GetId(), tc.GetId())
	}
	req0 := decode(t, s.Requests()[0])
	if tcfg := req0.GenerationConfig.ThinkingConfig; tcfg == nil || !tcfg.IncludeThoughts || tcfg.ThinkingBudget != 8192 {
		t.Fatalf("thinking config: %s", s.Requests()[0].Body)
	}

	provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), pro, ctxOf(user, wiretest.Assistant(first), wiretest.ToolResult(tc.GetId(), "get_weather", "18C")), provider.Options{}))
	r := s.Requests()[1]
	req := decode(t, r)
	if len(req.Contents) != 3 {
		t.Fatalf("contents: %s", r.Body)
	}
	model, results := req.Contents[1], req.Contents[2]
	if model.Role != "model" || len(model.Parts) != 3 ||
		!model.Parts[0].Thought || model.Parts[0].Text != th.GetThinking() || model.Parts[0].ThoughtSignature != "VGhpbmtTaWctMDAx" ||
		model.Parts[1].Thought || model.Parts[1].ThoughtSignature != "VGV4dFNpZy0wMDI=" ||
		model.Parts[2].FunctionCall == nil || model.Parts[2].FunctionCall.Name != "get_weather" || model.Parts[2].ThoughtSignature != "Q2FsbFNpZy0wMDMrLz0/" {
		t.Fatalf("model content: %s", r.Body)
	}
	if results.Role != "user" || len(results.Parts) != 1 || results.Parts[0].FunctionResponse == nil ||
		results.Parts[0].FunctionResponse.Name != "get_weather" || results.Parts[0].FunctionResponse.Response["output"] != "18C" {
		t.Fatalf("function response: %s", r.Body)
	}
	// Signatures travel byte for byte.
	for _, sig := range []string{`"thoughtSignature":"VGhpbmtTaWctMDAx"`, `"thoughtSignature":"VGV4dFNpZy0wMDI="`, `"thoughtSignature":"Q2FsbFNpZy0wMDMrLz0/"`} {
		if !strings.Contains(string(r.Body), sig) {
			t.Fatalf("missing %s in %s", sig, r.Body)
		}
	}
}

func TestSignaturesDroppedForAnotherModel(t *testing.T) {
	s := wiretest.New(t,
		wiretest.Reply{Body: wiretest.File(t, "testdata/thinking_tool.sse")},
		wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")},
		wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")},
	)
	p := newProvider(t, s)
	user := wiretest.User("Weather in Paris?")
	first := provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), pro, ctxOf(user), provider.Options{}))
	id := first.GetContent()[2].GetToolCall().GetId()
	conv := ctxOf(user, wiretest.Assistant(first), wiretest.ToolResult(id, "get_weather", "18C"))
	provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), flash, conv, provider.Options{}))
	body := string(s.Requests()[1].Body)
	req := decode(t, s.Requests()[1])
	if strings.Contains(body, "thoughtSignature") || strings.Contains(body, `"thought":true`) || req.Contents[1].Parts[0].Text != "**Planning** Need the weather. Call the tool." {
		t.Fatalf("another Gemini model got opaque fields: %s", body)
	}
	// Gemini 3 needs a placeholder on calls without their own signature.
	g3 := provider.Model{Provider: "google", ID: "gemini-3-pro-preview", API: google.API, Reasoning: true}
	provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), g3, conv, provider.Options{}))
	req = decode(t, s.Requests()[2])
	if fc := req.Contents[1].Parts[2]; fc.FunctionCall == nil || fc.ThoughtSignature != "c2tpcF90aG91Z2h0X3NpZ25hdHVyZV92YWxpZGF0b3I=" {
		t.Fatalf("gemini 3 call: %s", s.Requests()[2].Body)
	}
}

func TestParallelCallsWithoutIDsAndOrphans(t *testing.T) {
	s := wiretest.New(t,
		wiretest.Reply{Body: wiretest.File(t, "testdata/parallel.sse")},
		wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")},
	)
	p := newProvider(t, s)
	user := wiretest.User("read both")
	first := provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), flash, ctxOf(user), provider.Options{}))
	c := first.GetContent()
	if len(c) != 2 || c[0].GetToolCall().GetId() == c[1].GetToolCall().GetId() || c[1].GetToolCall().GetArguments().AsMap()["path"] != "b.txt" ||
		first.GetStopReason() != agentdv1.StopReason_STOP_REASON_TOOL_USE {
		t.Fatalf("first = %v", first)
	}
	provider.Collect(wiretest.Replayed(p.Stream)(context.Background(), flash, ctxOf(user, wiretest.Assistant(first),
		wiretest.ToolResult(c[1].GetToolCall().GetId(), "read", "B"), wiretest.ToolResult("read_unknown", "read", "stray")), provider.Options{}))
	req := decode(t, s.Requests()[1])
	if len(req.Contents) != 3 {
		t.Fatalf("contents: %s", s.Requests()[1].Body)
	}
	var got []string
	for _, pt := range req.Contents[2].Parts {
		got = append(got, pt.FunctionResponse.Name+":"+strings.Join(keys(pt.FunctionResponse.Response), ","))
	}
	// B answered, A synthesized as an error, the stray result dropped; all in
	// one user content.
	if want := []string{"read:output", "read:error"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("responses = %v, want %v: %s", got, want, s.Requests()[1].Body)
	}
	if req.Contents[2].Parts[1].FunctionResponse.Response["error"] != provider.NoResultText {
		t.Fatalf("synthetic result: %s", s.Requests()[1].Body)
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestAbortKeepsPartialContent(t *testing.T) {
	full := wiretest.File(t, "testdata/text.sse")
	partial := full[:strings.Index(full, "\r\n\r\n")+4]
	s := wiretest.New(t, wiretest.Reply{Body: partial, Hang: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs := wiretest.CancelAfter(newProvider(t, s).Stream(ctx, flash, ctxOf(wiretest.User("hi")), provider.Options{}), provider.EventTextDelta, cancel)
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
	}{
		{"truncated.sse", agentdv1.StopReason_STOP_REASON_ERROR, "Stream terminated", 1},
		{"max_tokens.sse", agentdv1.StopReason_STOP_REASON_LENGTH, "", 1},
		{"safety.sse", agentdv1.StopReason_STOP_REASON_ERROR, "Provider finish_reason: SAFETY", 1},
		{"malformed.sse", agentdv1.StopReason_STOP_REASON_ERROR, "Stream error: ", 1},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "testdata/"+tt.file)})
			m := provider.Collect(newProvider(t, s).Stream(context.Background(), pro, ctxOf(wiretest.User("hi")), provider.Options{}))
			if m.GetStopReason() != tt.stop || !strings.HasPrefix(m.GetErrorMessage(), tt.errPrefix) || len(m.GetContent()) != tt.blocks || strings.Contains(m.GetErrorMessage(), secret) {
				t.Fatalf("final = %v", m)
			}
		})
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
		{"rate limit header", wiretest.JSON(429, `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}`, "Retry-After", "7"),
			"429 RESOURCE_EXHAUSTED: Resource has been exhausted", true, false, 7 * time.Second},
		{"rate limit retry info", wiretest.JSON(429, `{"error":{"code":429,"message":"You exceeded your current quota.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"2s"}]}}`),
			"429 RESOURCE_EXHAUSTED: You exceeded", true, false, 2 * time.Second},
		{"server error", wiretest.JSON(500, `{"error":{"code":500,"message":"An internal error has occurred.","status":"INTERNAL"}}`), "500 INTERNAL: An internal error", true, false, 0},
		{"context overflow", wiretest.JSON(400, `{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`),
			provider.ContextOverflowPrefix + "400 INVALID_ARGUMENT: The input token count", false, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := wiretest.New(t, tt.reply)
			evs := wiretest.Drain(newProvider(t, s).Stream(context.Background(), pro, ctxOf(wiretest.User("hi")), provider.Options{}))
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
		wiretest.JSON(429, `{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED"}}`, "Retry-After", "2"),
		wiretest.Reply{Body: wiretest.File(t, "testdata/text.sse")},
	)
	p := newProvider(t, s)
	m, _, slept := wiretest.Retry(provider.RetryPolicy{}, func() provider.Stream {
		return wiretest.Replayed(p.Stream)(context.Background(), flash, ctxOf(wiretest.User("hi")), provider.Options{})
	})
	if m.GetStopReason() != agentdv1.StopReason_STOP_REASON_STOP || m.GetContent()[0].GetText().GetText() != "Hello, world" ||
		!reflect.DeepEqual(slept, []time.Duration{2 * time.Second}) || len(s.Requests()) != 2 {
		t.Fatalf("final %v slept %v", m, slept)
	}
}

// TestLiveGemini calls the real API when GEMINI_API_KEY (or GOOGLE_API_KEY)
// is set.
func TestLiveGemini(t *testing.T) {
	key := os.Getenv("GEMINI_API_KEY")
	if key == "" {
		key = os.Getenv("GOOGLE_API_KEY")
	}
	if key == "" {
		t.Skip("GEMINI_API_KEY / GOOGLE_API_KEY not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := google.New(ctx, google.Config{APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	m := provider.Collect(wiretest.Replayed(p.Stream)(ctx, flash, ctxOf(wiretest.User("Say the word: pong")), provider.Options{MaxTokens: 200}))
	if m.GetStopReason() != agentdv1.StopReason_STOP_REASON_STOP || len(m.GetContent()) == 0 || m.GetUsage().GetOutput() == 0 {
		t.Fatalf("live answer = %v", m)
	}
	var text string
	for _, b := range m.GetContent() {
		text += b.GetText().GetText()
	}
	if text == "" {
		t.Fatalf("live answer has no text: %v", m)
	}
}
