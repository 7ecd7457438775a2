// Package google adapts the Gemini API (generativelanguage.googleapis.com,
// streamGenerateContent with alt=sse) to [provider.Stream]. The official Go
// SDK, google.golang.org/genai, builds and sends the request and decodes
// HTTP errors; the adapter reads the server-sent chunks of a successful
// response itself with gjson, in one pass over each, because the SDK's
// decode-to-map, convert, re-encode, decode-to-struct path cost an order of
// magnitude more than everything else per delta.
//
// Gemini marks reasoning parts with thought=true and binds opaque thought
// signatures to parts and to function calls; the model refuses a follow-up
// whose function calls lost their signature. The adapter stores a
// signature as the base64 text it arrived as (thinking_signature,
// text_signature or ToolCall.thought_signature) and sends back the exact
// bytes it received, only to the model that produced them. Gemini may omit function call ids;
// the adapter then derives a stable one from the response id and the
// call's position.
package google

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"regexp"
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

// Config configures the adapter: an empty APIKey falls back to
// GEMINI_API_KEY or GOOGLE_API_KEY as the SDK reads them; BaseURL defaults
// to https://generativelanguage.googleapis.com/.
type Config = provider.Endpoint

// Provider streams Gemini calls. It is safe for concurrent use.
type Provider struct {
	cfg    Config
	client *genai.Client
	// timeout is the configured HTTPClient's Timeout, applied by run to
	// the whole call including the body.
	timeout time.Duration
}

// New builds the SDK client. The SDK does not retry by default and
// [provider.WithRetry] owns the policy; its HTTP transport is wrapped so the
// Retry-After of a failed call, which genai.APIError drops, still reaches
// the retry policy, and so the adapter reads a successful stream itself.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	cfg.Now = cfg.Clock()
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	wrapped := *hc
	base := wrapped.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	wrapped.Transport = responseTap{next: base}
	// http.Client.Timeout would cancel the call when the SDK closes the
	// empty body responseTap leaves it; run applies it to the whole call.
	wrapped.Timeout = 0
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
	return &Provider{cfg: cfg, client: client, timeout: hc.Timeout}, nil
}

// exchange carries what the transport learns about one call back to run:
// the headers of a failed response, because genai.APIError drops
// Retry-After, and the body of a successful one, which the adapter parses
// itself instead of letting the SDK decode every chunk three times.
type exchange struct {
	mu     sync.Mutex
	header http.Header
	body   io.ReadCloser
}

type exchangeKey struct{}

// failedHeader returns the headers of a failed response, nil if none.
func (x *exchange) failedHeader() http.Header {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.header
}

// takeBody hands over the successful response body; the caller closes it.
func (x *exchange) takeBody() io.ReadCloser {
	x.mu.Lock()
	defer x.mu.Unlock()
	b := x.body
	x.body = nil
	return b
}

// close releases a body nobody took, so its connection is not leaked.
func (x *exchange) close() {
	if b := x.takeBody(); b != nil {
		b.Close()
	}
}

// responseTap sits under the SDK. For a call that carries an exchange it
// keeps the headers of an error response, and takes the body of a
// successful one, leaving the SDK an empty stream: the SDK still builds and
// sends the request and decodes errors, the adapter reads the chunks.
type responseTap struct{ next http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (t responseTap) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	x, ok := r.Context().Value(exchangeKey{}).(*exchange)
	if !ok {
		return resp, nil
	}
	switch {
	case resp.StatusCode >= 400:
		x.mu.Lock()
		x.header = resp.Header.Clone()
		x.mu.Unlock()
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		x.mu.Lock()
		x.body = resp.Body
		x.mu.Unlock()
		resp.Body = http.NoBody
	}
	return resp, nil
}

// Stream implements [provider.StreamFunc].
func (p *Provider) Stream(ctx context.Context, model provider.Model, c *agentdv1.Context, opts provider.Options) provider.Stream {
	if model.API == "" {
		model.API = API
	}
	return func(yield func(provider.Event) bool) {
		e := provider.NewEmitter(model, yield, p.cfg.Now)
		p.run(ctx, e, model, c, opts)
	}
}

// BuildRequest converts a context, already replayed for model
// ([provider.StreamFunc]), into the SDK's contents and config.
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
	applySettings(cfg, opts)
	return convertMessages(c.GetMessages(), model), cfg
}

// applySettings maps the model settings and the output schema onto the
// request; [provider.CheckOptions] has refused what the model cannot
// take. A named tool choice is mode ANY limited to that function; a tool
// choice goes out only with tools. The provider options go through the
// SDK's extra body, which it merges into the request key by key.
func applySettings(cfg *genai.GenerateContentConfig, opts provider.Options) {
	s := opts.Settings
	if s != nil && s.Temperature != nil {
		t := float32(s.GetTemperature())
		cfg.Temperature = &t
	}
	if s != nil && s.TopP != nil {
		p := float32(s.GetTopP())
		cfg.TopP = &p
	}
	cfg.StopSequences = s.GetStopSequences()
	if len(cfg.Tools) > 0 {
		var fc *genai.FunctionCallingConfig
		switch tc := s.GetToolChoice(); tc.GetMode() {
		case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO:
			fc = &genai.FunctionCallingConfig{Mode: genai.FunctionCallingConfigModeAuto}
		case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE:
			fc = &genai.FunctionCallingConfig{Mode: genai.FunctionCallingConfigModeNone}
		case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED:
			fc = &genai.FunctionCallingConfig{Mode: genai.FunctionCallingConfigModeAny}
		case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL:
			fc = &genai.FunctionCallingConfig{Mode: genai.FunctionCallingConfigModeAny, AllowedFunctionNames: []string{tc.GetToolName()}}
		}
		if fc != nil {
			cfg.ToolConfig = &genai.ToolConfig{FunctionCallingConfig: fc}
		}
	}
	if opts.OutputSchema != nil {
		cfg.ResponseMIMEType = "application/json"
		cfg.ResponseJsonSchema = opts.OutputSchema.AsMap()
	}
	if po := s.GetProviderOptions(); len(po.GetFields()) > 0 {
		cfg.HTTPOptions = &genai.HTTPOptions{ExtraBody: po.AsMap()}
	}
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
