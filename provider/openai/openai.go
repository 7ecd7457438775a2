// Package openai adapts the OpenAI Chat Completions API, and every server
// that imitates it (Ollama, vLLM, llama.cpp server, LM Studio, OpenRouter,
// Groq, …), to [provider.Stream] through the official Go SDK
// (github.com/openai/openai-go). Differences between servers are switches
// in Compat, not separate adapters.
//
// The SDK builds and sends the request and decodes HTTP errors; the adapter
// reads the server-sent chunks with gjson in one pass, because the
// reasoning fields compatible servers add are not in the SDK's types and a
// delta must stay cheap.
package openai

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/gjson"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/internal/openaisdk"
)

// API is the wire protocol name stored on assistant messages.
const API = provider.APIOpenAICompletions

// Config configures the adapter.
type Config struct {
	// Endpoint reaches the server: BaseURL such as
	// http://localhost:11434/v1, empty for OpenAI; local servers accept
	// any APIKey.
	provider.Endpoint
	// Compat are the server's switches.
	Compat Compat
}

// Provider streams Chat Completions calls. It is safe for concurrent use.
type Provider struct {
	cfg    Config
	client sdk.Client
}

// New returns an adapter with the SDK's own retries off ([provider.WithRetry]
// owns the policy).
func New(cfg Config) *Provider {
	cfg.Now = cfg.Clock()
	return &Provider{cfg: cfg, client: openaisdk.NewClient(cfg.Endpoint)}
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

// Effort maps a thinking level to OpenAI's reasoning_effort; "" for off.
func Effort(level agentdv1.ThinkingLevel) string {
	switch level {
	case agentdv1.ThinkingLevel_THINKING_LEVEL_MINIMAL:
		return "minimal"
	case agentdv1.ThinkingLevel_THINKING_LEVEL_LOW:
		return "low"
	case agentdv1.ThinkingLevel_THINKING_LEVEL_MEDIUM:
		return "medium"
	case agentdv1.ThinkingLevel_THINKING_LEVEL_HIGH, agentdv1.ThinkingLevel_THINKING_LEVEL_XHIGH:
		return "high"
	}
	return ""
}

// BuildParams converts a context, already replayed for model
// ([provider.StreamFunc]), into the request.
func BuildParams(model provider.Model, c *agentdv1.Context, opts provider.Options, compat Compat) sdk.ChatCompletionNewParams {
	params := sdk.ChatCompletionNewParams{Model: shared.ChatModel(model.ID)}
	if s := c.GetSystemPrompt(); s != "" {
		if model.Reasoning && !compat.NoDeveloperRole {
			params.Messages = append(params.Messages, sdk.DeveloperMessage(s))
		} else {
			params.Messages = append(params.Messages, sdk.SystemMessage(s))
		}
	}
	params.Messages = append(params.Messages, convertMessages(c.GetMessages(), model, compat)...)
	if opts.MaxTokens > 0 {
		if compat.MaxTokensField == "max_tokens" {
			params.MaxTokens = param.NewOpt(opts.MaxTokens)
		} else {
			params.MaxCompletionTokens = param.NewOpt(opts.MaxTokens)
		}
	}
	if !compat.NoStreamUsage {
		params.StreamOptions = sdk.ChatCompletionStreamOptionsParam{IncludeUsage: param.NewOpt(true)}
	}
	if eff := Effort(opts.ThinkingLevel); model.Reasoning && eff != "" {
		switch compat.ReasoningEffort {
		case "", "reasoning_effort":
			params.ReasoningEffort = shared.ReasoningEffort(eff)
		case "openrouter":
			params.SetExtraFields(map[string]any{"reasoning": map[string]any{"effort": eff}})
		}
	}
	for _, t := range c.GetTools() {
		fn := shared.FunctionDefinitionParam{Name: t.GetName(), Parameters: shared.FunctionParameters(t.GetParameters().AsMap())}
		if d := t.GetDescription(); d != "" {
			fn.Description = param.NewOpt(d)
		}
		params.Tools = append(params.Tools, sdk.ChatCompletionFunctionTool(fn))
	}
	applySettings(&params, opts)
	return params
}

// applySettings maps the model settings and the output schema onto the
// request; [provider.CheckOptions] has refused what the model cannot
// take. A tool choice goes out only with tools, which the API requires of
// it. The schema is not strict: strict mode accepts only a subset of JSON
// Schema, and the loop validates the answer against the caller's schema.
func applySettings(params *sdk.ChatCompletionNewParams, opts provider.Options) {
	s := opts.Settings
	if s != nil && s.Temperature != nil {
		params.Temperature = param.NewOpt(s.GetTemperature())
	}
	if s != nil && s.TopP != nil {
		params.TopP = param.NewOpt(s.GetTopP())
	}
	if stop := s.GetStopSequences(); len(stop) > 0 {
		params.Stop = sdk.ChatCompletionNewParamsStopUnion{OfStringArray: stop}
	}
	if len(params.Tools) > 0 {
		switch tc := s.GetToolChoice(); tc.GetMode() {
		case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO:
			params.ToolChoice = sdk.ChatCompletionToolChoiceOptionUnionParam{OfAuto: param.NewOpt("auto")}
		case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE:
			params.ToolChoice = sdk.ChatCompletionToolChoiceOptionUnionParam{OfAuto: param.NewOpt("none")}
		case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED:
			params.ToolChoice = sdk.ChatCompletionToolChoiceOptionUnionParam{OfAuto: param.NewOpt("required")}
		case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL:
			params.ToolChoice = sdk.ToolChoiceOptionFunctionToolChoice(sdk.ChatCompletionNamedToolChoiceFunctionParam{Name: tc.GetToolName()})
		}
	}
	if opts.OutputSchema != nil {
		params.ResponseFormat = sdk.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{
				Name: provider.OutputSchemaName, Schema: opts.OutputSchema.AsMap(), Strict: param.NewOpt(false),
			},
		}}
	}
}

func dataURL(img *agentdv1.ImageContent) string {
	return "data:" + img.GetMimeType() + ";base64," + base64.StdEncoding.EncodeToString(img.GetData())
}

func userParts(blocks []*agentdv1.ContentBlock) []sdk.ChatCompletionContentPartUnionParam {
	var parts []sdk.ChatCompletionContentPartUnionParam
	for _, b := range blocks {
		switch x := b.GetBlock().(type) {
		case *agentdv1.ContentBlock_Text:
			parts = append(parts, sdk.TextContentPart(x.Text.GetText()))
		case *agentdv1.ContentBlock_Image:
			parts = append(parts, sdk.ImageContentPart(sdk.ChatCompletionContentPartImageImageURLParam{URL: dataURL(x.Image)}))
		}
	}
	return parts
}

func convertMessages(msgs []*agentdv1.Message, model provider.Model, compat Compat) []sdk.ChatCompletionMessageParamUnion {
	var out []sdk.ChatCompletionMessageParamUnion
	for _, m := range msgs {
		switch r := m.GetRole().(type) {
		case *agentdv1.Message_User:
			content := r.User.GetContent()
			if len(content) == 1 && content[0].GetText() != nil {
				out = append(out, sdk.UserMessage(content[0].GetText().GetText()))
			} else if parts := userParts(content); len(parts) > 0 {
				out = append(out, sdk.UserMessage(parts))
			}
		case *agentdv1.Message_Assistant:
			if a := convertAssistant(r.Assistant, compat); a != nil {
				out = append(out, sdk.ChatCompletionMessageParamUnion{OfAssistant: a})
			}
		case *agentdv1.Message_ToolResult:
			tr := r.ToolResult
			var text []string
			var images []*agentdv1.ContentBlock
			for _, b := range tr.GetContent() {
				if t := b.GetText(); t != nil {
					text = append(text, t.GetText())
				} else if b.GetImage() != nil {
					images = append(images, b)
				}
			}
			s := strings.Join(text, "\n")
			if s == "" && len(images) > 0 {
				s = "(see attached image)"
			}
			out = append(out, sdk.ToolMessage(s, tr.GetToolCallId()))
			// Chat Completions tool messages carry no images: they follow as
			// a user message.
			if len(images) > 0 && !model.TextOnly {
				parts := append([]sdk.ChatCompletionContentPartUnionParam{sdk.TextContentPart("Attached image(s) from tool result:")}, userParts(images)...)
				out = append(out, sdk.UserMessage(parts))
			}
		}
	}
	return out
}

func convertAssistant(a *agentdv1.AssistantMessage, compat Compat) *sdk.ChatCompletionAssistantMessageParam {
	var text, thinking []string
	reasoningField := ""
	var calls []sdk.ChatCompletionMessageToolCallUnionParam
	for _, b := range a.GetContent() {
		switch x := b.GetBlock().(type) {
		case *agentdv1.ContentBlock_Text:
			if x.Text.GetText() != "" {
				text = append(text, x.Text.GetText())
			}
		case *agentdv1.ContentBlock_Thinking:
			t := x.Thinking
			if t.GetRedacted() || t.GetThinking() == "" {
				continue
			}
			// The signature of Chat Completions reasoning is the name of the
			// field it came in; it goes back in the same field.
			if compat.ThinkingAsText || t.GetThinkingSignature() == "" {
				text = append(text, t.GetThinking())
				continue
			}
			reasoningField = t.GetThinkingSignature()
			thinking = append(thinking, t.GetThinking())
		case *agentdv1.ContentBlock_ToolCall:
			args, err := json.Marshal(x.ToolCall.GetArguments().AsMap())
			if err != nil || x.ToolCall.GetArguments() == nil {
				args = []byte("{}")
			}
			calls = append(calls, sdk.ChatCompletionMessageToolCallUnionParam{OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
				ID: x.ToolCall.GetId(), Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: x.ToolCall.GetName(), Arguments: string(args)},
			}})
		}
	}
	if len(text) == 0 && len(calls) == 0 && len(thinking) == 0 {
		return nil
	}
	p := &sdk.ChatCompletionAssistantMessageParam{ToolCalls: calls}
	if len(text) > 0 {
		p.Content.OfString = param.NewOpt(strings.Join(text, ""))
	}
	if len(thinking) > 0 {
		p.SetExtraFields(map[string]any{reasoningField: strings.Join(thinking, "\n")})
	}
	return p
}

func (p *Provider) run(ctx context.Context, e *provider.Emitter, model provider.Model, c *agentdv1.Context, opts provider.Options) {
	if ctx.Err() != nil {
		e.FailOrAbort(ctx, "request not sent", 0)
		return
	}
	params := BuildParams(model, c, opts, p.cfg.Compat)
	var resp *http.Response
	reqOpts := []option.RequestOption{option.WithJSONSet("stream", true)}
	for _, o := range provider.BodyOptions(API, opts.Settings) {
		reqOpts = append(reqOpts, option.WithJSONSet(o.Path, o.Value))
	}
	if err := p.client.Post(ctx, "chat/completions", params, &resp, reqOpts...); err != nil {
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

// applyUsage reads a Chat Completions usage object; prompt_tokens include
// the cached ones.
func applyUsage(u gjson.Result, to *provider.TokenUsage) {
	to.CacheRead = u.Get("prompt_tokens_details.cached_tokens").Int()
	to.Input = u.Get("prompt_tokens").Int() - to.CacheRead
	to.Output = u.Get("completion_tokens").Int()
	to.Total = to.Input + to.Output + to.CacheRead
}

// StopReason maps a finish_reason.
func StopReason(s string) (agentdv1.StopReason, string) {
	switch s {
	case "stop", "end", "":
		return agentdv1.StopReason_STOP_REASON_STOP, ""
	case "length":
		return agentdv1.StopReason_STOP_REASON_LENGTH, ""
	case "tool_calls", "function_call":
		return agentdv1.StopReason_STOP_REASON_TOOL_USE, ""
	default:
		return agentdv1.StopReason_STOP_REASON_ERROR, "Provider finish_reason: " + s
	}
}

// chunkDelta is what one choice of a chunk carries, read in one pass.
type chunkDelta struct {
	content   string
	reasoning [3]string // reasoning_content, reasoning, reasoning_text
	toolCalls gjson.Result
	finish    string
}

func readChoice(choice gjson.Result) chunkDelta {
	var d chunkDelta
	choice.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "finish_reason":
			d.finish = v.Str
		case "delta":
			v.ForEach(func(k, v gjson.Result) bool {
				switch k.Str {
				case "content":
					d.content = v.Str
				case "reasoning_content":
					d.reasoning[0] = v.Str
				case "reasoning":
					d.reasoning[1] = v.Str
				case "reasoning_text":
					d.reasoning[2] = v.Str
				case "tool_calls":
					d.toolCalls = v
				}
				return true
			})
		}
		return true
	})
	return d
}

// consume reads the chunks with gjson in a single pass over each: a chunk
// is mostly envelope around a few bytes of delta, and decoding it into
// structs cost more than everything else on the path.
func (p *Provider) consume(ctx context.Context, e *provider.Emitter, dec ssestream.Decoder) {
	fields := p.cfg.Compat.reasoningFields()
	cur, curKind := -1, 0 // the open text (1) or thinking (2) block
	toolIdx := map[int64]int{}
	finish := ""
	closeCur := func() bool {
		ok := true
		if cur >= 0 {
			ok = e.End(cur)
		}
		cur, curKind = -1, 0
		return ok
	}
	for dec.Next() {
		data := dec.Event().Data
		if len(data) >= 6 && string(data[:6]) == "[DONE]" {
			p.finish(e, finish)
			return
		}
		if !gjson.ValidBytes(data) {
			e.FailOrAbort(ctx, "Malformed stream chunk: "+string(data[:min(len(data), 200)]), 0)
			return
		}
		var id string
		var choices, usage, groqUsage, errObj gjson.Result
		gjson.ParseBytes(data).ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "id":
				id = v.Str
			case "choices":
				choices = v
			case "usage":
				usage = v
			case "x_groq":
				groqUsage = v.Get("usage")
			case "error":
				errObj = v
			}
			return true
		})
		if errObj.IsObject() {
			e.FailOrAbort(ctx, strings.TrimPrefix(errObj.Get("type").String()+": "+errObj.Get("message").String(), ": "), 0)
			return
		}
		if e.ResponseID == "" {
			e.ResponseID = id
		}
		if !e.Start() {
			return
		}
		if usage.IsObject() {
			applyUsage(usage, &e.Usage)
		} else if groqUsage.IsObject() {
			applyUsage(groqUsage, &e.Usage)
		}
		ok := true
		choices.ForEach(func(_, choice gjson.Result) bool {
			d := readChoice(choice)
			if r, field := pickReasoning(fields, d.reasoning); r != "" {
				if curKind != 2 {
					if ok = closeCur(); !ok {
						return false
					}
					cur, ok = e.BeginThinking(false)
					curKind = 2
					e.SetSignature(cur, field)
				}
				ok = ok && e.Delta(cur, r)
			}
			if ok && d.content != "" {
				if curKind != 1 {
					if ok = closeCur(); !ok {
						return false
					}
					cur, ok = e.BeginText()
					curKind = 1
				}
				ok = ok && e.Delta(cur, d.content)
			}
			if ok {
				d.toolCalls.ForEach(func(_, tc gjson.Result) bool {
					n := tc.Get("index").Int()
					idx, seen := toolIdx[n]
					if !seen {
						if ok = closeCur(); !ok {
							return false
						}
						idx, ok = e.BeginToolCall(tc.Get("id").String(), tc.Get("function.name").String())
						toolIdx[n] = idx
					}
					ok = ok && e.Delta(idx, tc.Get("function.arguments").String())
					return ok
				})
			}
			if d.finish != "" {
				finish = d.finish
			}
			return ok
		})
		if !ok {
			return
		}
	}
	if err := dec.Err(); err != nil {
		e.FailOrAbort(ctx, provider.Redact("Stream error: "+err.Error(), p.cfg.APIKey), 0)
		return
	}
	if finish != "" {
		// Some compatible servers close the stream without [DONE].
		p.finish(e, finish)
		return
	}
	e.FailOrAbort(ctx, "Stream terminated before the response was complete", 0)
}

func (p *Provider) finish(e *provider.Emitter, finish string) {
	stop, text := StopReason(finish)
	if e.HasToolCalls() && stop == agentdv1.StopReason_STOP_REASON_STOP {
		stop = agentdv1.StopReason_STOP_REASON_TOOL_USE
	}
	if text != "" {
		e.EndAll()
		e.Fail(text, 0)
		return
	}
	e.Done(stop)
}

func pickReasoning(fields []string, values [3]string) (string, string) {
	for _, f := range fields {
		i := -1
		switch f {
		case "reasoning_content":
			i = 0
		case "reasoning":
			i = 1
		case "reasoning_text":
			i = 2
		}
		if i >= 0 && values[i] != "" {
			return values[i], f
		}
	}
	return "", ""
}
