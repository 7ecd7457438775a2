// Package google adapts the Gemini API (generativelanguage.googleapis.com,
// streamGenerateContent with alt=sse) to provider.Stream through the
// official Go SDK, google.golang.org/genai.
//
// Gemini marks reasoning parts with thought=true and binds opaque thought
// signatures to parts and to function calls; the model refuses a follow-up
// whose function calls lost their signature. The adapter stores a
// signature as standard base64 text (thinking_signature, text_signature or
// ToolCall.thought_signature) and sends back the exact bytes it received,
// only to the model that produced them. Gemini may omit function call ids;
// the adapter then derives a stable one from the response id and the
// call's position.
package google

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/genai"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

// API is the wire protocol name stored on assistant messages.
const API = provider.APIGoogleGenerativeAI

// SkipThoughtSignature is the placeholder Gemini 3 accepts on a function
// call that has no signature of its own (a call made by another model).
const SkipThoughtSignature = "skip_thought_signature_validator"

// Config configures the adapter.
type Config struct {
	// APIKey is the Gemini API key; empty falls back to GEMINI_API_KEY or
	// GOOGLE_API_KEY as the SDK reads them.
	APIKey string
	// BaseURL overrides https://generativelanguage.googleapis.com/.
	BaseURL string
	// HTTPClient overrides the HTTP client.
	HTTPClient *http.Client
	// Headers are added to every request.
	Headers map[string]string
	// Now stamps messages; defaults to time.Now.
	Now func() time.Time
}

// Provider streams Gemini calls. It is safe for concurrent use.
type Provider struct {
	cfg    Config
	client *genai.Client
}

// New builds the SDK client. The SDK does not retry by default and
// provider.WithRetry owns the policy; its HTTP transport is wrapped so the
// Retry-After of a failed call, which genai.APIError drops, still reaches
// the retry policy.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	wrapped := *hc
	base := wrapped.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	wrapped.Transport = headerCapture{next: base}
	gc := &genai.ClientConfig{APIKey: cfg.APIKey, Backend: genai.BackendGeminiAPI, HTTPClient: &wrapped,
		HTTPOptions: genai.HTTPOptions{BaseURL: cfg.BaseURL}}
	if len(cfg.Headers) > 0 {
		gc.HTTPOptions.Headers = http.Header{}
		for k, v := range cfg.Headers {
			gc.HTTPOptions.Headers.Set(k, v)
		}
	}
	client, err := genai.NewClient(ctx, gc)
	if err != nil {
		return nil, fmt.Errorf("gemini client: %w", err)
	}
	return &Provider{cfg: cfg, client: client}, nil
}

// headerSink receives the headers of a failed response.
type headerSink struct {
	mu     sync.Mutex
	header http.Header
}

type sinkKey struct{}

// headerCapture hands the headers of an error response to the sink in the
// request's context.
type headerCapture struct{ next http.RoundTripper }

func (h headerCapture) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := h.next.RoundTrip(r)
	if err == nil && resp.StatusCode >= 400 {
		if s, ok := r.Context().Value(sinkKey{}).(*headerSink); ok {
			s.mu.Lock()
			s.header = resp.Header.Clone()
			s.mu.Unlock()
		}
	}
	return resp, err
}

// Stream implements provider.StreamFunc.
func (p *Provider) Stream(ctx context.Context, model provider.Model, c *agentdv1.Context, opts provider.Options) provider.Stream {
	if model.API == "" {
		model.API = API
	}
	return func(yield func(provider.Event) bool) {
		e := provider.NewEmitter(model, yield, p.cfg.Now)
		p.run(ctx, e, model, c, opts)
	}
}

// BuildRequest converts a context into the SDK's contents and config, after
// provider.Replay.
func BuildRequest(model provider.Model, c *agentdv1.Context, opts provider.Options) ([]*genai.Content, *genai.GenerateContentConfig) {
	cfg := &genai.GenerateContentConfig{}
	if s := c.GetSystemPrompt(); s != "" {
		cfg.SystemInstruction = &genai.Content{Parts: []*genai.Part{{Text: s}}}
	}
	if opts.MaxTokens > 0 {
		cfg.MaxOutputTokens = int32(min(opts.MaxTokens, 1<<31-1))
	}
	if model.Reasoning && opts.ThinkingLevel != agentdv1.ThinkingLevel_THINKING_LEVEL_UNSPECIFIED &&
		opts.ThinkingLevel != agentdv1.ThinkingLevel_THINKING_LEVEL_OFF {
		cfg.ThinkingConfig = thinkingConfig(model.ID, opts.ThinkingLevel)
	}
	if tools := c.GetTools(); len(tools) > 0 {
		decls := make([]*genai.FunctionDeclaration, 0, len(tools))
		for _, t := range tools {
			decls = append(decls, &genai.FunctionDeclaration{Name: t.GetName(), Description: t.GetDescription(), ParametersJsonSchema: t.GetParameters().AsMap()})
		}
		cfg.Tools = []*genai.Tool{{FunctionDeclarations: decls}}
	}
	return convertMessages(provider.Replay(c.GetMessages(), model), model), cfg
}

// thinkingConfig asks for thought summaries; Gemini 3 takes a level,
// Gemini 2.5 a token budget (pi's numbers).
func thinkingConfig(modelID string, level agentdv1.ThinkingLevel) *genai.ThinkingConfig {
	tc := &genai.ThinkingConfig{IncludeThoughts: true}
	if strings.Contains(strings.ToLower(modelID), "gemini-3") {
		switch level {
		case agentdv1.ThinkingLevel_THINKING_LEVEL_MINIMAL, agentdv1.ThinkingLevel_THINKING_LEVEL_LOW:
			tc.ThinkingLevel = genai.ThinkingLevelLow
		default:
			tc.ThinkingLevel = genai.ThinkingLevelHigh
		}
		return tc
	}
	var budget int32
	switch level {
	case agentdv1.ThinkingLevel_THINKING_LEVEL_MINIMAL:
		budget = 128
	case agentdv1.ThinkingLevel_THINKING_LEVEL_LOW:
		budget = 2048
	case agentdv1.ThinkingLevel_THINKING_LEVEL_MEDIUM:
		budget = 8192
	default:
		budget = 24576
		if strings.Contains(modelID, "pro") {
			budget = 32768
		}
	}
	tc.ThinkingBudget = &budget
	return tc
}

var base64Signature = regexp.MustCompile(`^[A-Za-z0-9+/]+={0,2}$`)

// signatureBytes decodes a stored signature for the model that made it;
// nil when it is not ours or not a signature.
func signatureBytes(same bool, sig string) []byte {
	if !same || sig == "" || len(sig)%4 != 0 || !base64Signature.MatchString(sig) {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		return nil
	}
	return b
}

func convertMessages(msgs []*agentdv1.Message, model provider.Model) []*genai.Content {
	var out []*genai.Content
	gemini3 := strings.Contains(strings.ToLower(model.ID), "gemini-3")
	for _, m := range msgs {
		switch r := m.GetRole().(type) {
		case *agentdv1.Message_User:
			var parts []*genai.Part
			for _, b := range r.User.GetContent() {
				switch x := b.GetBlock().(type) {
				case *agentdv1.ContentBlock_Text:
					parts = append(parts, &genai.Part{Text: x.Text.GetText()})
				case *agentdv1.ContentBlock_Image:
					if !model.TextOnly {
						parts = append(parts, &genai.Part{InlineData: &genai.Blob{MIMEType: x.Image.GetMimeType(), Data: x.Image.GetData()}})
					}
				}
			}
			if len(parts) > 0 {
				out = append(out, &genai.Content{Role: genai.RoleUser, Parts: parts})
			}
		case *agentdv1.Message_Assistant:
			a := r.Assistant
			same := provider.SameModel(a, model)
			var parts []*genai.Part
			for _, b := range a.GetContent() {
				switch x := b.GetBlock().(type) {
				case *agentdv1.ContentBlock_Text:
					if strings.TrimSpace(x.Text.GetText()) == "" {
						continue
					}
					parts = append(parts, &genai.Part{Text: x.Text.GetText(), ThoughtSignature: signatureBytes(same, x.Text.GetTextSignature())})
				case *agentdv1.ContentBlock_Thinking:
					t := x.Thinking
					if strings.TrimSpace(t.GetThinking()) == "" {
						continue
					}
					parts = append(parts, &genai.Part{Text: t.GetThinking(), Thought: same, ThoughtSignature: signatureBytes(same, t.GetThinkingSignature())})
				case *agentdv1.ContentBlock_ToolCall:
					tc := x.ToolCall
					sig := signatureBytes(same, tc.GetThoughtSignature())
					if sig == nil && gemini3 {
						sig = []byte(SkipThoughtSignature)
					}
					parts = append(parts, &genai.Part{FunctionCall: &genai.FunctionCall{Name: tc.GetName(), Args: argsMap(tc)}, ThoughtSignature: sig})
				}
			}
			if len(parts) > 0 {
				out = append(out, &genai.Content{Role: genai.RoleModel, Parts: parts})
			}
		case *agentdv1.Message_ToolResult:
			tr := r.ToolResult
			var text []string
			var images []*genai.Part
			for _, b := range tr.GetContent() {
				if t := b.GetText(); t != nil {
					text = append(text, t.GetText())
				} else if img := b.GetImage(); img != nil && !model.TextOnly {
					images = append(images, &genai.Part{InlineData: &genai.Blob{MIMEType: img.GetMimeType(), Data: img.GetData()}})
				}
			}
			value := strings.Join(text, "\n")
			if value == "" && len(images) > 0 {
				value = "(see attached image)"
			}
			key := "output"
			if tr.GetIsError() {
				key = "error"
			}
			part := &genai.Part{FunctionResponse: &genai.FunctionResponse{Name: tr.GetToolName(), Response: map[string]any{key: value}}}
			// Results of one turn travel together in one user content.
			if n := len(out); n > 0 && out[n-1].Role == genai.RoleUser && hasFunctionResponse(out[n-1]) {
				out[n-1].Parts = append(out[n-1].Parts, part)
			} else {
				out = append(out, &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{part}})
			}
			if len(images) > 0 {
				out = append(out, &genai.Content{Role: genai.RoleUser, Parts: append([]*genai.Part{{Text: "Tool result image:"}}, images...)})
			}
		}
	}
	return out
}

func hasFunctionResponse(c *genai.Content) bool {
	for _, p := range c.Parts {
		if p.FunctionResponse != nil {
			return true
		}
	}
	return false
}

func argsMap(tc *agentdv1.ToolCall) map[string]any {
	if tc.GetArguments() == nil {
		return map[string]any{}
	}
	return tc.GetArguments().AsMap()
}

func (p *Provider) run(ctx context.Context, e *provider.Emitter, model provider.Model, c *agentdv1.Context, opts provider.Options) {
	if ctx.Err() != nil {
		e.FailOrAbort(ctx, "request not sent", 0)
		return
	}
	contents, cfg := BuildRequest(model, c, opts)
	sink := &headerSink{}
	reqCtx := context.WithValue(ctx, sinkKey{}, sink)
	s := streamState{e: e, p: p, model: model}
	for resp, err := range p.client.Models.GenerateContentStream(reqCtx, model.ID, contents, cfg) {
		if err != nil {
			s.fail(ctx, err, sink)
			return
		}
		if !s.chunk(resp) {
			return
		}
		if s.failed {
			return
		}
	}
	if ctx.Err() != nil {
		e.FailOrAbort(ctx, "stream ended", 0)
		return
	}
	s.finish(ctx)
}

// streamState follows the open block across chunks: Gemini sends whole
// parts, and consecutive text (or thought) parts continue one block.
type streamState struct {
	e       *provider.Emitter
	p       *Provider
	model   provider.Model
	cur     int
	curKind byte // 't' text, 'r' thought, 0 none
	calls   int
	ids     map[string]bool
	reason  genai.FinishReason
	message string
	failed  bool
}

func (s *streamState) fail(ctx context.Context, err error, sink *headerSink) {
	var apiErr genai.APIError
	if !errors.As(err, &apiErr) {
		var p *genai.APIError
		if errors.As(err, &p) {
			apiErr = *p
		} else {
			s.e.FailOrAbort(ctx, provider.Redact("Stream error: "+err.Error(), s.p.cfg.APIKey), 0)
			return
		}
	}
	body, _ := json.Marshal(map[string]any{"error": apiErr})
	sink.mu.Lock()
	h := sink.header
	sink.mu.Unlock()
	ra := provider.RetryAfter(h, s.p.cfg.Now())
	if ra == 0 {
		ra = retryInfoDelay(apiErr.Details)
	}
	code := apiErr.Code
	if code == 0 {
		code = http.StatusInternalServerError
	}
	s.e.FailOrAbort(ctx, provider.Redact(provider.HTTPErrorMessage(code, string(body)), s.p.cfg.APIKey), ra)
}

// retryInfoDelay reads google.rpc.RetryInfo.retryDelay ("2s", "1.5s"),
// Google's own way of saying Retry-After.
func retryInfoDelay(details []map[string]any) time.Duration {
	for _, d := range details {
		if t, _ := d["@type"].(string); strings.HasSuffix(t, "google.rpc.RetryInfo") {
			if s, ok := d["retryDelay"].(string); ok {
				if dur, err := time.ParseDuration(s); err == nil && dur > 0 {
					return dur
				}
			}
		}
	}
	return 0
}

func (s *streamState) closeCur() bool {
	ok := true
	if s.curKind != 0 {
		ok = s.e.End(s.cur)
	}
	s.curKind = 0
	return ok
}

func (s *streamState) chunk(resp *genai.GenerateContentResponse) bool {
	e := s.e
	if resp == nil {
		return true
	}
	if e.ResponseID == "" {
		e.ResponseID = resp.ResponseID
	}
	if !e.Start() {
		return false
	}
	if u := resp.UsageMetadata; u != nil {
		e.Usage.CacheRead = int64(u.CachedContentTokenCount)
		e.Usage.Input = int64(u.PromptTokenCount) - e.Usage.CacheRead
		e.Usage.Output = int64(u.CandidatesTokenCount) + int64(u.ThoughtsTokenCount)
		e.Usage.Total = int64(u.TotalTokenCount)
	}
	if pf := resp.PromptFeedback; pf != nil && pf.BlockReason != "" {
		msg := "Prompt blocked: " + string(pf.BlockReason)
		if pf.BlockReasonMessage != "" {
			msg += ": " + pf.BlockReasonMessage
		}
		e.EndAll()
		e.Fail(msg, 0)
		s.failed = true
		return true
	}
	if len(resp.Candidates) == 0 {
		return true
	}
	cand := resp.Candidates[0]
	if cand.Content != nil {
		for _, part := range cand.Content.Parts {
			if !s.part(part) {
				return false
			}
		}
	}
	if cand.FinishReason != "" {
		s.reason = cand.FinishReason
		s.message = cand.FinishMessage
	}
	return true
}

func (s *streamState) part(part *genai.Part) bool {
	e := s.e
	switch {
	case part.FunctionCall != nil:
		if !s.closeCur() {
			return false
		}
		fc := part.FunctionCall
		id := fc.ID
		if id == "" || s.ids[id] {
			id = s.syntheticID(fc.Name)
		}
		if s.ids == nil {
			s.ids = map[string]bool{}
		}
		s.ids[id] = true
		s.calls++
		idx, ok := e.BeginToolCall(id, fc.Name)
		if !ok {
			return false
		}
		if len(part.ThoughtSignature) > 0 {
			e.SetThoughtSignature(idx, base64.StdEncoding.EncodeToString(part.ThoughtSignature))
		}
		args, err := json.Marshal(fc.Args)
		if err != nil || fc.Args == nil {
			args = []byte("{}")
		}
		return e.Delta(idx, string(args)) && e.End(idx)
	case part.Text != "" || len(part.ThoughtSignature) > 0:
		kind := byte('t')
		if part.Thought {
			kind = 'r'
		}
		if s.curKind != kind {
			if !s.closeCur() {
				return false
			}
			var ok bool
			if kind == 'r' {
				s.cur, ok = e.BeginThinking(false)
			} else {
				s.cur, ok = e.BeginText()
			}
			if !ok {
				return false
			}
			s.curKind = kind
		}
		if len(part.ThoughtSignature) > 0 {
			// The last signature of a run of parts is the one that counts.
			e.SetSignature(s.cur, base64.StdEncoding.EncodeToString(part.ThoughtSignature))
		}
		return e.Delta(s.cur, part.Text)
	}
	return true
}

// syntheticID derives a call id from the response id and the call's
// position, so the same wire stream always yields the same ids.
func (s *streamState) syntheticID(name string) string {
	h := fnv.New64a()
	h.Write([]byte(s.e.ResponseID))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(s.calls)))
	return provider.NormalizeToolCallID(name+"_"+strconv.FormatUint(h.Sum64(), 36), API)
}

func (s *streamState) finish(ctx context.Context) {
	e := s.e
	if s.reason == "" {
		e.FailOrAbort(ctx, "Stream terminated before the response was complete", 0)
		return
	}
	stop, msg := StopReason(s.reason, s.message)
	if msg != "" {
		e.EndAll()
		e.Fail(msg, 0)
		return
	}
	if s.calls > 0 && stop == agentdv1.StopReason_STOP_REASON_STOP {
		stop = agentdv1.StopReason_STOP_REASON_TOOL_USE
	}
	e.Done(stop)
}

// StopReason maps a finishReason; every reason but STOP and MAX_TOKENS is a
// failure whose message names it.
func StopReason(r genai.FinishReason, finishMessage string) (agentdv1.StopReason, string) {
	switch r {
	case genai.FinishReasonStop:
		return agentdv1.StopReason_STOP_REASON_STOP, ""
	case genai.FinishReasonMaxTokens:
		return agentdv1.StopReason_STOP_REASON_LENGTH, ""
	}
	msg := "Provider finish_reason: " + string(r)
	if finishMessage != "" {
		msg += ": " + finishMessage
	}
	return agentdv1.StopReason_STOP_REASON_ERROR, msg
}
