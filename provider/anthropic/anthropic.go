// Package anthropic adapts the Anthropic Messages API to [provider.Stream],
// through the official Go SDK (github.com/anthropics/anthropic-sdk-go).
//
// The SDK builds and sends the request (authentication, base URL, typed
// parameters, HTTP error decoding) and frames the server-sent events; the
// adapter reads each event's small JSON payload itself with gjson, in one
// pass, into a lean struct (see decodeEvent): the SDK's generic union
// decoding, and even encoding/json, cost more than the rest of a delta.
package anthropic

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

// API is the wire protocol name stored on assistant messages.
const API = provider.APIAnthropicMessages

// Config configures the adapter. Only APIKey is required for the public
// API; BaseURL defaults to https://api.anthropic.com.
type Config = provider.Endpoint

// Provider streams Anthropic Messages calls. It is safe for concurrent use.
type Provider struct {
	cfg    Config
	client sdk.Client
}

// New returns an adapter. Retries are left to [provider.WithRetry], so the
// SDK's own retries are turned off: one policy decides, and every attempt is
// visible.
func New(cfg Config) *Provider {
	cfg.Now = cfg.Clock()
	opts := []option.RequestOption{option.WithAPIKey(cfg.APIKey), option.WithMaxRetries(0)}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	for k, v := range cfg.Headers {
		opts = append(opts, option.WithHeader(k, v))
	}
	return &Provider{cfg: cfg, client: sdk.NewClient(opts...)}
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

// ThinkingBudget is the thinking budget in tokens for a level (pi's table;
// xhigh is treated as high). 0 means thinking off.
func ThinkingBudget(level agentdv1.ThinkingLevel) int64 {
	switch level {
	case agentdv1.ThinkingLevel_THINKING_LEVEL_MINIMAL:
		return 1024
	case agentdv1.ThinkingLevel_THINKING_LEVEL_LOW:
		return 2048
	case agentdv1.ThinkingLevel_THINKING_LEVEL_MEDIUM:
		return 8192
	case agentdv1.ThinkingLevel_THINKING_LEVEL_HIGH, agentdv1.ThinkingLevel_THINKING_LEVEL_XHIGH:
		return 16384
	}
	return 0
}

// BuildParams converts a context, already replayed for model
// ([provider.StreamFunc]), into the request the SDK sends.
func BuildParams(model provider.Model, c *agentdv1.Context, opts provider.Options) sdk.MessageNewParams {
	maxTokens := opts.MaxTokens
	if maxTokens <= 0 {
		maxTokens = min(model.MaxOutputTokens, 32000)
	}
	if maxTokens <= 0 {
		maxTokens = 4096
	}
	params := sdk.MessageNewParams{Model: sdk.Model(model.ID), Messages: convertMessages(c.GetMessages())}
	cache := sdk.NewCacheControlEphemeralParam()
	if s := c.GetSystemPrompt(); s != "" {
		params.System = []sdk.TextBlockParam{{Text: s, CacheControl: cache}}
	}
	if budget := ThinkingBudget(opts.ThinkingLevel); model.Reasoning && budget > 0 {
		total := maxTokens + budget
		if model.MaxOutputTokens > 0 {
			total = min(total, model.MaxOutputTokens)
		}
		if total <= budget {
			budget = max(0, total-1024)
		}
		if budget >= 1024 {
			maxTokens = total
			params.Thinking = sdk.ThinkingConfigParamOfEnabled(budget)
		}
	}
	params.MaxTokens = maxTokens
	for _, t := range c.GetTools() {
		schema := t.GetParameters().AsMap()
		in := sdk.ToolInputSchemaParam{Properties: schema["properties"]}
		if req, ok := schema["required"].([]any); ok {
			for _, r := range req {
				if s, ok := r.(string); ok {
					in.Required = append(in.Required, s)
				}
			}
		}
		extra := map[string]any{}
		for k, v := range schema {
			if k != "type" && k != "properties" && k != "required" {
				extra[k] = v
			}
		}
		if len(extra) > 0 {
			in.ExtraFields = extra
		}
		tool := sdk.ToolParam{Name: t.GetName(), InputSchema: in}
		if d := t.GetDescription(); d != "" {
			tool.Description = sdk.String(d)
		}
		params.Tools = append(params.Tools, sdk.ToolUnionParam{OfTool: &tool})
	}
	applySettings(&params, opts)
	// Cache the conversation so far: a breakpoint on the last user block.
	if n := len(params.Messages); n > 0 && params.Messages[n-1].OfUser != nil {
		blocks := params.Messages[n-1].OfUser.Content
		if k := len(blocks); k > 0 {
			b := blocks[k-1]
			switch {
			case b.OfText != nil:
				b.OfText.CacheControl = cache
			case b.OfImage != nil:
				b.OfImage.CacheControl = cache
			case b.OfToolResult != nil:
				b.OfToolResult.CacheControl = cache
			}
		}
	}
	return params
}

// applySettings maps the model settings and the output schema onto the
// request. Temperature and top_p have no field: the API version the SDK
// speaks removed them, and [provider.CheckOptions] refuses them. A tool
// choice goes out only with tools, which the API requires of it.
func applySettings(params *sdk.MessageNewParams, opts provider.Options) {
	s := opts.Settings
	params.StopSequences = s.GetStopSequences()
	if len(params.Tools) > 0 {
		switch tc := s.GetToolChoice(); tc.GetMode() {
		case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO:
			params.ToolChoice = sdk.ToolChoiceUnionParam{OfAuto: &sdk.ToolChoiceAutoParam{}}
		case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE:
			params.ToolChoice = sdk.ToolChoiceUnionParam{OfNone: &sdk.ToolChoiceNoneParam{}}
		case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED:
			params.ToolChoice = sdk.ToolChoiceUnionParam{OfAny: &sdk.ToolChoiceAnyParam{}}
		case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL:
			params.ToolChoice = sdk.ToolChoiceParamOfTool(tc.GetToolName())
		}
	}
	if opts.OutputSchema != nil {
		// The SDK's schema transform keeps what constrained decoding
		// accepts (objects closed, unsupported keywords moved into the
		// description); the loop validates the answer against the
		// caller's schema itself. A schema it cannot read goes as given.
		schema := opts.OutputSchema.AsMap()
		if t, ok := sdk.BetaJSONSchemaOutputFormat(schema).Schema.(map[string]any); ok && t != nil {
			schema = t
		}
		params.OutputConfig.Format = sdk.JSONOutputFormatParam{Schema: schema}
	}
}

func convertUserContent(blocks []*agentdv1.ContentBlock) []sdk.ContentBlockParamUnion {
	var out []sdk.ContentBlockParamUnion
	for _, b := range blocks {
		switch x := b.GetBlock().(type) {
		case *agentdv1.ContentBlock_Text:
			if x.Text.GetText() != "" {
				out = append(out, sdk.NewTextBlock(x.Text.GetText()))
			}
		case *agentdv1.ContentBlock_Image:
			out = append(out, sdk.NewImageBlockBase64(x.Image.GetMimeType(), base64.StdEncoding.EncodeToString(x.Image.GetData())))
		}
	}
	return out
}

func convertMessages(msgs []*agentdv1.Message) []sdk.MessageParam {
	var out []sdk.MessageParam
	for i := 0; i < len(msgs); i++ {
		switch r := msgs[i].GetRole().(type) {
		case *agentdv1.Message_User:
			if blocks := convertUserContent(r.User.GetContent()); len(blocks) > 0 {
				out = append(out, sdk.NewUserMessage(blocks...))
			}
		case *agentdv1.Message_Assistant:
			var blocks []sdk.ContentBlockParamUnion
			for _, b := range r.Assistant.GetContent() {
				switch x := b.GetBlock().(type) {
				case *agentdv1.ContentBlock_Text:
					if x.Text.GetText() != "" {
						blocks = append(blocks, sdk.NewTextBlock(x.Text.GetText()))
					}
				case *agentdv1.ContentBlock_Thinking:
					t := x.Thinking
					switch {
					case t.GetRedacted():
						blocks = append(blocks, sdk.NewRedactedThinkingBlock(t.GetThinkingSignature()))
					case t.GetThinkingSignature() == "":
						// A thinking block without signature (an aborted
						// stream, another model) is plain text to Claude.
						if t.GetThinking() != "" {
							blocks = append(blocks, sdk.NewTextBlock(t.GetThinking()))
						}
					default:
						blocks = append(blocks, sdk.NewThinkingBlock(t.GetThinkingSignature(), t.GetThinking()))
					}
				case *agentdv1.ContentBlock_ToolCall:
					args := x.ToolCall.GetArguments().AsMap()
					if args == nil {
						args = map[string]any{}
					}
					blocks = append(blocks, sdk.NewToolUseBlock(x.ToolCall.GetId(), args, x.ToolCall.GetName()))
				}
			}
			if len(blocks) > 0 {
				out = append(out, sdk.NewAssistantMessage(blocks...))
			}
		case *agentdv1.Message_ToolResult:
			// Consecutive results travel in one user message.
			var blocks []sdk.ContentBlockParamUnion
			for ; i < len(msgs); i++ {
				tr := msgs[i].GetToolResult()
				if tr == nil {
					break
				}
				res := sdk.ToolResultBlockParam{ToolUseID: tr.GetToolCallId(), IsError: sdk.Bool(tr.GetIsError())}
				for _, cb := range tr.GetContent() {
					switch x := cb.GetBlock().(type) {
					case *agentdv1.ContentBlock_Text:
						res.Content = append(res.Content, sdk.ToolResultBlockParamContentUnion{OfText: &sdk.TextBlockParam{Text: x.Text.GetText()}})
					case *agentdv1.ContentBlock_Image:
						img := sdk.NewImageBlockBase64(x.Image.GetMimeType(), base64.StdEncoding.EncodeToString(x.Image.GetData()))
						res.Content = append(res.Content, sdk.ToolResultBlockParamContentUnion{OfImage: img.OfImage})
					}
				}
				blocks = append(blocks, sdk.ContentBlockParamUnion{OfToolResult: &res})
			}
			i--
			out = append(out, sdk.NewUserMessage(blocks...))
		}
	}
	return out
}

func (p *Provider) run(ctx context.Context, e *provider.Emitter, model provider.Model, c *agentdv1.Context, opts provider.Options) {
	if ctx.Err() != nil {
		e.FailOrAbort(ctx, "request not sent", 0)
		return
	}
	params := BuildParams(model, c, opts)
	reqOpts := []option.RequestOption{option.WithJSONSet("stream", true)}
	for _, o := range provider.BodyOptions(API, opts.Settings) {
		reqOpts = append(reqOpts, option.WithJSONSet(o.Path, o.Value))
	}
	if params.Thinking.OfEnabled != nil {
		reqOpts = append(reqOpts, option.WithHeader("anthropic-beta", "interleaved-thinking-2025-05-14"))
	}
	var resp *http.Response
	if err := p.client.Post(ctx, "v1/messages", params, &resp, reqOpts...); err != nil {
		var apiErr *sdk.Error
		if errors.As(err, &apiErr) {
			var ra time.Duration
			if apiErr.Response != nil {
				ra = provider.RetryAfter(apiErr.Response.Header, p.cfg.Now())
			}
			e.FailOrAbort(ctx, provider.HTTPErrorMessage(apiErr.StatusCode, apiErr.RawJSON()), ra)
			return
		}
		e.FailOrAbort(ctx, provider.Redact("Connection error: "+err.Error(), p.cfg.APIKey), 0)
		return
	}
	dec := ssestream.NewDecoder(resp)
	defer dec.Close()
	p.consume(ctx, e, dec)
}

// StopReason maps Anthropic's stop_reason. refusal is an error (the answer
// is unusable); pause_turn is a normal stop the caller may continue from.
func StopReason(s string) (agentdv1.StopReason, string) {
	switch s {
	case "end_turn", "stop_sequence", "pause_turn", "":
		return agentdv1.StopReason_STOP_REASON_STOP, ""
	case "max_tokens", "model_context_window_exceeded":
		return agentdv1.StopReason_STOP_REASON_LENGTH, ""
	case "tool_use":
		return agentdv1.StopReason_STOP_REASON_TOOL_USE, ""
	case "refusal":
		return agentdv1.StopReason_STOP_REASON_ERROR, "The model refused to answer (stop_reason: refusal)"
	default:
		return agentdv1.StopReason_STOP_REASON_ERROR, "Unhandled stop reason: " + s
	}
}

// maxWireBlocks bounds the content block index a stream may open: far
// above any real response, low enough that the index table stays small.
const maxWireBlocks = 1 << 16

func (p *Provider) consume(ctx context.Context, e *provider.Emitter, dec ssestream.Decoder) {
	// wire index → content index; -1 for blocks the adapter skips (server
	// tools), which keeps our indexes dense.
	idx := make([]int, 0, 8)
	at := func(wire int) int {
		if wire < 0 || wire >= len(idx) {
			return -1
		}
		return idx[wire]
	}
	stop, stopText := agentdv1.StopReason_STOP_REASON_STOP, ""
	var ev wireEvent
	for dec.Next() {
		if err := decodeEvent(dec.Event().Data, &ev); err != nil {
			e.FailOrAbort(ctx, "Malformed stream event: "+err.Error(), 0)
			return
		}
		ok := true
		switch ev.Type {
		case "message_start":
			e.ResponseID = ev.Message.ID
			ev.Message.Usage.apply(&e.Usage)
			ok = e.Start()
		case "content_block_start":
			if ev.Index < 0 || ev.Index >= maxWireBlocks {
				// Growing idx to a hostile index would panic or exhaust memory.
				e.FailOrAbort(ctx, "Malformed stream event: content block index "+strconv.Itoa(ev.Index)+" out of range", 0)
				return
			}
			for len(idx) <= ev.Index {
				idx = append(idx, -1)
			}
			cb := ev.ContentBlock
			var i int
			switch cb.Type {
			case "text":
				i, ok = e.BeginText()
				if ok && cb.Text != "" {
					ok = e.Delta(i, cb.Text)
				}
			case "thinking":
				i, ok = e.BeginThinking(false)
				if ok && cb.Thinking != "" {
					ok = e.Delta(i, cb.Thinking)
				}
				e.AppendSignature(i, cb.Signature)
			case "redacted_thinking":
				i, ok = e.BeginThinking(true)
				e.SetSignature(i, cb.Data)
			case "tool_use":
				i, ok = e.BeginToolCall(cb.ID, cb.Name)
			default:
				i = -1
			}
			idx[ev.Index] = i
		case "content_block_delta":
			i := at(ev.Index)
			switch ev.Delta.Type {
			case "text_delta":
				ok = e.Delta(i, ev.Delta.Text)
			case "thinking_delta":
				ok = e.Delta(i, ev.Delta.Thinking)
			case "signature_delta":
				e.AppendSignature(i, ev.Delta.Signature)
			case "input_json_delta":
				ok = e.Delta(i, ev.Delta.PartialJSON)
			}
		case "content_block_stop":
			ok = e.End(at(ev.Index))
		case "message_delta":
			if ev.Delta.StopReason != "" {
				stop, stopText = StopReason(ev.Delta.StopReason)
			}
			ev.Usage.apply(&e.Usage)
		case "message_stop":
			if stopText != "" {
				e.EndAll()
				e.Fail(stopText, 0)
				return
			}
			e.Done(stop)
			return
		case "error":
			msg := ev.Error.Message
			if ev.Error.Type != "" {
				msg = ev.Error.Type + ": " + msg
			}
			e.FailOrAbort(ctx, msg, 0)
			return
		}
		if !ok {
			return
		}
	}
	if err := dec.Err(); err != nil {
		e.FailOrAbort(ctx, provider.Redact("Stream error: "+err.Error(), p.cfg.APIKey), 0)
		return
	}
	e.FailOrAbort(ctx, "Stream terminated before the response was complete", 0)
}
