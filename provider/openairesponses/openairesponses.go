// Package openairesponses adapts the OpenAI Responses API to
// [provider.Stream] through the official Go SDK (github.com/openai/openai-go).
//
// Reasoning models keep their chain of thought server side; with store=false
// the API hands it to the client as an encrypted reasoning item, which must
// come back verbatim before the function calls it led to. The adapter keeps
// that item, byte for byte, in ThinkingContent.thinking_signature, the
// message item id and phase in TextContent.text_signature (pi's
// {"v":1,"id":…,"phase":…}), and both ids of a function call in
// ToolCall.id as "<call_id>|<item_id>".
//
// The SDK builds and sends the request and decodes HTTP errors; the stream
// is read with gjson, because a delta must stay cheap and the reasoning item
// must be kept exactly as it arrived.
package openairesponses

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/internal/openaisdk"
)

// API is the wire protocol name stored on assistant messages.
const API = provider.APIOpenAIResponses

// Config configures the adapter; BaseURL defaults to OpenAI's.
type Config = provider.Endpoint

// Provider streams Responses API calls. It is safe for concurrent use.
type Provider struct {
	cfg    Config
	client sdk.Client
}

// New returns an adapter with the SDK's own retries off ([provider.WithRetry]
// owns the policy).
func New(cfg Config) *Provider {
	cfg.Now = cfg.Clock()
	return &Provider{cfg: cfg, client: openaisdk.NewClient(cfg)}
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

// Effort maps a thinking level to the Responses reasoning effort; "" is off.
func Effort(level agentdv1.ThinkingLevel) shared.ReasoningEffort {
	switch level {
	case agentdv1.ThinkingLevel_THINKING_LEVEL_MINIMAL:
		return shared.ReasoningEffortMinimal
	case agentdv1.ThinkingLevel_THINKING_LEVEL_LOW:
		return shared.ReasoningEffortLow
	case agentdv1.ThinkingLevel_THINKING_LEVEL_MEDIUM:
		return shared.ReasoningEffortMedium
	case agentdv1.ThinkingLevel_THINKING_LEVEL_HIGH, agentdv1.ThinkingLevel_THINKING_LEVEL_XHIGH:
		return shared.ReasoningEffortHigh
	}
	return ""
}

// TextSignature is pi's text signature (v1): the message item id and phase
// of a Responses message, so the item goes back under the same id.
type TextSignature struct {
	V     int    `json:"v"`
	ID    string `json:"id"`
	Phase string `json:"phase,omitempty"`
}

// EncodeTextSignature returns the text_signature of a message item.
func EncodeTextSignature(id, phase string) string {
	b, _ := json.Marshal(TextSignature{V: 1, ID: id, Phase: phase})
	return string(b)
}

// ParseTextSignature reads a v1 signature, or a legacy bare id.
func ParseTextSignature(s string) (TextSignature, bool) {
	if s == "" {
		return TextSignature{}, false
	}
	if strings.HasPrefix(s, "{") {
		var t TextSignature
		if json.Unmarshal([]byte(s), &t) == nil && t.V == 1 && t.ID != "" {
			if t.Phase != "commentary" && t.Phase != "final_answer" {
				t.Phase = ""
			}
			return t, true
		}
	}
	return TextSignature{V: 1, ID: s}, true
}

// BuildBody converts a context, already replayed for model
// ([provider.StreamFunc]), into the JSON request body. The SDK's params type carries every field but the input,
// which is spliced in raw so that reasoning items go back byte for byte.
func BuildBody(model provider.Model, c *agentdv1.Context, opts provider.Options) ([]byte, error) {
	params := responses.ResponseNewParams{
		Model: shared.ResponsesModel(model.ID),
		Store: param.NewOpt(false),
	}
	if opts.MaxTokens > 0 {
		params.MaxOutputTokens = param.NewOpt(opts.MaxTokens)
	}
	if opts.SessionID != "" {
		params.PromptCacheKey = param.NewOpt(opts.SessionID)
	}
	if eff := Effort(opts.ThinkingLevel); model.Reasoning && eff != "" {
		params.Reasoning = shared.ReasoningParam{Effort: eff, Summary: shared.ReasoningSummaryAuto}
		params.Include = []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}
	}
	for _, t := range c.GetTools() {
		fn := responses.FunctionToolParam{Name: t.GetName(), Parameters: t.GetParameters().AsMap(), Strict: param.NewOpt(false)}
		if d := t.GetDescription(); d != "" {
			fn.Description = param.NewOpt(d)
		}
		params.Tools = append(params.Tools, responses.ToolUnionParam{OfFunction: &fn})
	}
	applySettings(&params, opts)
	body, err := params.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("marshal responses params: %w", err)
	}
	input, err := BuildInput(model, c)
	if err != nil {
		return nil, err
	}
	if body, err = sjson.SetRawBytes(body, "input", input); err != nil {
		return nil, fmt.Errorf("splice input: %w", err)
	}
	if body, err = sjson.SetBytes(body, "stream", true); err != nil {
		return nil, fmt.Errorf("set stream: %w", err)
	}
	return body, nil
}

// applySettings maps the model settings and the output schema onto the
// request; [provider.CheckOptions] has refused what the model cannot take
// (the API has no stop sequences). A tool choice goes out only with
// tools. The schema is not strict: strict mode accepts only a subset of
// JSON Schema, and the loop validates the answer against the caller's
// schema.
func applySettings(params *responses.ResponseNewParams, opts provider.Options) {
	s := opts.Settings
	if s != nil && s.Temperature != nil {
		params.Temperature = param.NewOpt(s.GetTemperature())
	}
	if s != nil && s.TopP != nil {
		params.TopP = param.NewOpt(s.GetTopP())
	}
	if len(params.Tools) > 0 {
		switch tc := s.GetToolChoice(); tc.GetMode() {
		case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO:
			params.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: param.NewOpt(responses.ToolChoiceOptionsAuto)}
		case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE:
			params.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: param.NewOpt(responses.ToolChoiceOptionsNone)}
		case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED:
			params.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: param.NewOpt(responses.ToolChoiceOptionsRequired)}
		case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL:
			params.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: tc.GetToolName()}}
		}
	}
	if opts.OutputSchema != nil {
		params.Text.Format = responses.ResponseFormatTextConfigUnionParam{OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{
			Name: provider.OutputSchemaName, Schema: opts.OutputSchema.AsMap(), Strict: param.NewOpt(false),
		}}
	}
}

// BuildInput is the request's input array: the system prompt, then the
// replayed conversation as Responses items.
func BuildInput(model provider.Model, c *agentdv1.Context) ([]byte, error) {
	var items []json.RawMessage
	add := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("marshal input item: %w", err)
		}
		items = append(items, b)
		return nil
	}
	if s := c.GetSystemPrompt(); s != "" {
		role := responses.EasyInputMessageRoleSystem
		if model.Reasoning {
			role = responses.EasyInputMessageRoleDeveloper
		}
		if err := add(responses.EasyInputMessageParam{Role: role, Content: responses.EasyInputMessageContentUnionParam{OfString: param.NewOpt(s)}}); err != nil {
			return nil, err
		}
	}
	for i, m := range c.GetMessages() {
		switch r := m.GetRole().(type) {
		case *agentdv1.Message_User:
			content := inputContent(r.User.GetContent(), model)
			if len(content) == 0 {
				continue
			}
			if err := add(responses.EasyInputMessageParam{Role: responses.EasyInputMessageRoleUser,
				Content: responses.EasyInputMessageContentUnionParam{OfInputItemContentList: content}}); err != nil {
				return nil, err
			}
		case *agentdv1.Message_Assistant:
			a := r.Assistant
			same := provider.SameModel(a, model)
			for j, b := range a.GetContent() {
				switch x := b.GetBlock().(type) {
				case *agentdv1.ContentBlock_Thinking:
					// Only a reasoning item of this very model goes back; the
					// replay already turned foreign thinking into text.
					sig := x.Thinking.GetThinkingSignature()
					if same && gjson.Valid(sig) && gjson.Get(sig, "type").String() == "reasoning" {
						items = append(items, json.RawMessage(sig))
					}
				case *agentdv1.ContentBlock_Text:
					msg := responses.ResponseOutputMessageParam{
						ID:     messageID(x.Text.GetTextSignature(), i, j),
						Status: responses.ResponseOutputMessageStatusCompleted,
						Content: []responses.ResponseOutputMessageContentUnionParam{{OfOutputText: &responses.ResponseOutputTextParam{
							Text: x.Text.GetText(), Annotations: []responses.ResponseOutputTextAnnotationUnionParam{}}}},
					}
					if sig, ok := ParseTextSignature(x.Text.GetTextSignature()); ok && sig.Phase != "" {
						msg.Phase = responses.ResponseOutputMessagePhase(sig.Phase)
					}
					if err := add(msg); err != nil {
						return nil, err
					}
				case *agentdv1.ContentBlock_ToolCall:
					tc := x.ToolCall
					callID, itemID, _ := strings.Cut(tc.GetId(), "|")
					args, err := json.Marshal(tc.GetArguments().AsMap())
					if err != nil || tc.GetArguments() == nil {
						args = []byte("{}")
					}
					fc := responses.ResponseFunctionToolCallParam{CallID: callID, Name: tc.GetName(), Arguments: string(args)}
					// The API pairs an fc_ item id with the reasoning item
					// that produced it; a call from another model has no
					// such item here, so it goes without its item id.
					if same && itemID != "" {
						fc.ID = param.NewOpt(itemID)
					}
					if err := add(fc); err != nil {
						return nil, err
					}
				}
			}
		case *agentdv1.Message_ToolResult:
			tr := r.ToolResult
			callID, _, _ := strings.Cut(tr.GetToolCallId(), "|")
			out := responses.ResponseInputItemFunctionCallOutputParam{CallID: param.NewOpt(callID)}
			var text []string
			hasImage := false
			for _, b := range tr.GetContent() {
				if t := b.GetText(); t != nil {
					text = append(text, t.GetText())
				} else if b.GetImage() != nil {
					hasImage = true
				}
			}
			joined := strings.Join(text, "\n")
			if hasImage && !model.TextOnly {
				var list responses.ResponseFunctionCallOutputItemListParam
				if joined != "" {
					list = append(list, responses.ResponseFunctionCallOutputItemUnionParam{OfInputText: &responses.ResponseInputTextContentParam{Text: joined}})
				}
				for _, b := range tr.GetContent() {
					if img := b.GetImage(); img != nil {
						list = append(list, responses.ResponseFunctionCallOutputItemUnionParam{OfInputImage: &responses.ResponseInputImageContentParam{
							ImageURL: param.NewOpt(dataURL(img)), Detail: responses.ResponseInputImageContentDetailAuto}})
					}
				}
				out.Output = responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfResponseFunctionCallOutputItemArray: list}
			} else {
				if joined == "" {
					joined = "(see attached image)"
				}
				out.Output = responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: param.NewOpt(joined)}
			}
			if err := add(out); err != nil {
				return nil, err
			}
		}
	}
	if items == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(items)
}

// messageID is the id a replayed message item goes back under: its own, or
// a stand-in unique to the message and block (the API rejects duplicate
// item ids and takes at most 64 characters).
func messageID(sig string, msg, block int) string {
	t, ok := ParseTextSignature(sig)
	switch {
	case !ok:
		return "msg_" + strconv.Itoa(msg) + "_" + strconv.Itoa(block)
	case len(t.ID) > 64:
		h := fnv.New64a()
		h.Write([]byte(t.ID))
		return "msg_" + strconv.FormatUint(h.Sum64(), 36)
	}
	return t.ID
}

func dataURL(img *agentdv1.ImageContent) string {
	return "data:" + img.GetMimeType() + ";base64," + base64.StdEncoding.EncodeToString(img.GetData())
}

func inputContent(blocks []*agentdv1.ContentBlock, model provider.Model) responses.ResponseInputMessageContentListParam {
	var out responses.ResponseInputMessageContentListParam
	for _, b := range blocks {
		switch x := b.GetBlock().(type) {
		case *agentdv1.ContentBlock_Text:
			out = append(out, responses.ResponseInputContentUnionParam{OfInputText: &responses.ResponseInputTextParam{Text: x.Text.GetText()}})
		case *agentdv1.ContentBlock_Image:
			if model.TextOnly {
				continue
			}
			out = append(out, responses.ResponseInputContentUnionParam{OfInputImage: &responses.ResponseInputImageParam{
				ImageURL: param.NewOpt(dataURL(x.Image)), Detail: responses.ResponseInputImageDetailAuto}})
		}
	}
	return out
}

func (p *Provider) run(ctx context.Context, e *provider.Emitter, model provider.Model, c *agentdv1.Context, opts provider.Options) {
	if ctx.Err() != nil {
		e.FailOrAbort(ctx, "request not sent", 0)
		return
	}
	body, err := BuildBody(model, c, opts)
	if err != nil {
		e.Fail(err.Error(), 0)
		return
	}
	var resp *http.Response
	var reqOpts []option.RequestOption
	for _, o := range provider.BodyOptions(API, opts.Settings) {
		reqOpts = append(reqOpts, option.WithJSONSet(o.Path, o.Value))
	}
	if err := p.client.Post(ctx, "responses", body, &resp, reqOpts...); err != nil {
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

// item is what the adapter knows of one output item while it streams.
type item struct {
	block   int // content index, -1 for items the adapter does not show
	kind    byte
	summary int64 // the reasoning summary part last written to
}

const (
	kindReasoning = 'r'
	kindMessage   = 'm'
	kindCall      = 'f'
)

func (p *Provider) consume(ctx context.Context, e *provider.Emitter, dec ssestream.Decoder) {
	var items []item // by output_index
	at := func(data []byte) *item {
		i := gjson.GetBytes(data, "output_index").Int()
		if i < 0 || int(i) >= len(items) {
			return nil
		}
		return &items[i]
	}
	for dec.Next() {
		ev := dec.Event()
		data := ev.Data
		typ := ev.Type
		if typ == "" {
			typ = gjson.GetBytes(data, "type").String()
		}
		if !gjson.ValidBytes(data) {
			e.FailOrAbort(ctx, "Malformed stream event: "+truncate(string(data), 200), 0)
			return
		}
		ok := true
		switch typ {
		case "response.output_text.delta", "response.refusal.delta", "response.function_call_arguments.delta",
			"response.reasoning_summary_text.delta", "response.reasoning_text.delta":
			it := at(data)
			if it == nil || it.block < 0 {
				continue
			}
			if it.kind == kindReasoning && typ == "response.reasoning_summary_text.delta" {
				// Summary parts are separated by a blank line, as pi joins them.
				if si := gjson.GetBytes(data, "summary_index").Int(); si != it.summary {
					if e.Text(it.block) != "" {
						ok = e.Delta(it.block, "\n\n")
					}
					it.summary = si
				}
			}
			ok = ok && e.Delta(it.block, gjson.GetBytes(data, "delta").String())
		case "response.created", "response.in_progress":
			if id := gjson.GetBytes(data, "response.id").String(); id != "" {
				e.ResponseID = id
			}
			ok = e.Start()
		case "response.output_item.added":
			idx := int(gjson.GetBytes(data, "output_index").Int())
			for len(items) <= idx {
				items = append(items, item{block: -1})
			}
			it := gjson.GetBytes(data, "item")
			switch it.Get("type").String() {
			case "reasoning":
				items[idx].kind = kindReasoning
				items[idx].block, ok = e.BeginThinking(false)
			case "message":
				items[idx].kind = kindMessage
				items[idx].block, ok = e.BeginText()
			case "function_call":
				items[idx].kind = kindCall
				items[idx].block, ok = e.BeginToolCall(callID(it), it.Get("name").String())
				ok = ok && e.Delta(items[idx].block, it.Get("arguments").String())
			}
		case "response.output_item.done":
			ok = p.itemDone(e, at(data), gjson.GetBytes(data, "item"))
		case "response.completed", "response.incomplete":
			p.complete(e, gjson.GetBytes(data, "response"))
			return
		case "response.failed":
			r := gjson.GetBytes(data, "response")
			applyUsage(e, r.Get("usage"))
			msg := "Unknown error (no error details in response)"
			if er := r.Get("error"); er.Exists() && er.Type != gjson.Null {
				msg = strings.TrimPrefix(er.Get("code").String()+": "+er.Get("message").String(), ": ")
			} else if reason := r.Get("incomplete_details.reason").String(); reason != "" {
				msg = "incomplete: " + reason
			}
			e.FailOrAbort(ctx, overflowPrefixed(msg), 0)
			return
		case "error":
			msg := strings.TrimPrefix(gjson.GetBytes(data, "code").String()+": "+gjson.GetBytes(data, "message").String(), ": ")
			e.FailOrAbort(ctx, overflowPrefixed(msg), 0)
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

// overflowPrefixed marks a stream-level error that says the prompt did not
// fit, so it reads like the HTTP one.
func overflowPrefixed(msg string) string {
	probe := &agentdv1.AssistantMessage{StopReason: agentdv1.StopReason_STOP_REASON_ERROR, ErrorMessage: msg}
	if provider.IsContextOverflow(probe, 0) {
		return provider.ContextOverflowPrefix + msg
	}
	return msg
}

func callID(it gjson.Result) string {
	return it.Get("call_id").String() + "|" + it.Get("id").String()
}

func (p *Provider) itemDone(e *provider.Emitter, it *item, raw gjson.Result) bool {
	if it == nil || it.block < 0 {
		return true
	}
	switch it.kind {
	case kindReasoning:
		if e.Text(it.block) == "" {
			var parts []string
			for _, s := range raw.Get("summary").Array() {
				parts = append(parts, s.Get("text").String())
			}
			if !e.Delta(it.block, strings.Join(parts, "\n\n")) {
				return false
			}
		}
		// The item exactly as the server sent it: it goes back verbatim.
		e.SetSignature(it.block, raw.Raw)
	case kindMessage:
		if e.Text(it.block) == "" {
			var sb strings.Builder
			for _, c := range raw.Get("content").Array() {
				if c.Get("type").String() == "refusal" {
					sb.WriteString(c.Get("refusal").String())
				} else {
					sb.WriteString(c.Get("text").String())
				}
			}
			if !e.Delta(it.block, sb.String()) {
				return false
			}
		}
		e.SetSignature(it.block, EncodeTextSignature(raw.Get("id").String(), raw.Get("phase").String()))
	case kindCall:
		e.SetToolCallID(it.block, callID(raw))
		if e.Text(it.block) == "" {
			if !e.Delta(it.block, raw.Get("arguments").String()) {
				return false
			}
		}
	}
	return e.End(it.block)
}

func applyUsage(e *provider.Emitter, u gjson.Result) {
	if !u.Exists() || u.Type == gjson.Null {
		return
	}
	cached := u.Get("input_tokens_details.cached_tokens").Int()
	e.Usage.CacheRead = cached
	e.Usage.Input = u.Get("input_tokens").Int() - cached
	e.Usage.Output = u.Get("output_tokens").Int()
	e.Usage.Total = u.Get("total_tokens").Int()
}

func (p *Provider) complete(e *provider.Emitter, r gjson.Result) {
	if id := r.Get("id").String(); id != "" {
		e.ResponseID = id
	}
	applyUsage(e, r.Get("usage"))
	stop, msg := StopReason(r.Get("status").String(), r.Get("incomplete_details.reason").String())
	if e.HasToolCalls() && stop == agentdv1.StopReason_STOP_REASON_STOP {
		stop = agentdv1.StopReason_STOP_REASON_TOOL_USE
	}
	if msg != "" {
		e.Start()
		e.EndAll()
		e.Fail(msg, 0)
		return
	}
	e.Done(stop)
}

// StopReason maps a response status (and, for "incomplete", its reason).
func StopReason(status, incompleteReason string) (agentdv1.StopReason, string) {
	switch status {
	case "completed", "", "in_progress", "queued":
		return agentdv1.StopReason_STOP_REASON_STOP, ""
	case "incomplete":
		if incompleteReason == "" || incompleteReason == "max_output_tokens" {
			return agentdv1.StopReason_STOP_REASON_LENGTH, ""
		}
		return agentdv1.StopReason_STOP_REASON_ERROR, "Response incomplete: " + incompleteReason
	default:
		return agentdv1.StopReason_STOP_REASON_ERROR, "Response " + status
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
