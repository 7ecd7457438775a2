package provider

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// OutputSchemaName is the name an adapter gives a run's output schema
// where the API wants one (OpenAI's json_schema.name and text.format.name).
const OutputSchemaName = "output"

// MaxProviderOptionsBytes bounds ModelSettings.provider_options, encoded as
// JSON: enough for any request field agentd does not model, small enough
// that a stored session config stays small.
const MaxProviderOptionsBytes = 16 << 10

// SettingError says a model setting or an output schema cannot be sent
// to a model: its API has no such parameter, or not with these values.
// The service maps it to INVALID_ARGUMENT (SETTING_UNSUPPORTED) naming
// Field and Model.
type SettingError struct {
	// Field is the setting's path in the request, such as
	// "model_settings.top_p", "model_settings.provider_options.seed" or
	// "output_schema".
	Field string
	// Model is "<provider>/<id>".
	Model string
	// Reason says why, for a person.
	Reason string
}

// Error implements error.
func (e *SettingError) Error() string {
	return e.Field + ": " + e.Problem()
}

// Problem is the error without the field's name, for a caller that names
// the field itself (a gRPC refusal's BadRequest).
func (e *SettingError) Problem() string {
	return fmt.Sprintf("model %s cannot use it: %s", e.Model, e.Reason)
}

// reservation is a provider_options path an adapter writes itself (or the
// API refuses), with why a caller may not set it.
type reservation struct {
	path   string // dotted, of request field names
	reason string
}

// setBy is the reason of a reserved key that a modelled setting maps to.
func setBy(setting string) string {
	return "agentd sets it from " + setting + "; use that instead"
}

const setByAgentd = "agentd sets it itself"

// Provider-side features a caller may not switch on through
// provider_options: tools the provider runs (outside the session's tools,
// approvals, hooks and sandbox), and conversation state or context
// shaping kept by the provider (beside the transcript, which is the one
// record of what the model saw).
const (
	providerSideTools   = "the provider would run tools outside the session's tools, approvals and sandbox"
	providerSideContext = "the provider would keep or reshape the conversation beside the transcript"
	oneAnswer           = "agentd reads one answer per call"
)

// apiRules are what one API's adapter can send: the single place where
// each adapter's refusals are written down (docs/ARCHITECTURE.md, "Model
// settings and native structured output").
type apiRules struct {
	// temperature, topP, stop: why the API refuses the setting; "" when
	// it takes it.
	temperature, topP, stop string
	// maxStop is the most stop sequences the API takes; 0 for no limit of
	// its own.
	maxStop int
	// forcedToolChoice: why the API refuses tool_choice REQUIRED and TOOL
	// in this call; "" when it takes them.
	forcedToolChoice string
	// reserved are the provider_options paths refused, in request order.
	reserved []reservation
}

// Why Anthropic takes no sampling parameters: the pinned SDK speaks API
// version 2026-10-21, which removed them (400 even at their defaults).
const anthropicNoSampling = "the Messages API version agentd speaks (2026-10-21) has no sampling parameters"

// rules returns the rules of model's API for a call with opts.
func rules(model Model, opts Options) apiRules {
	switch model.API {
	case APIAnthropicMessages:
		r := apiRules{temperature: anthropicNoSampling, topP: anthropicNoSampling, reserved: []reservation{
			{"model", setByAgentd}, {"messages", setByAgentd}, {"system", setByAgentd},
			{"max_tokens", setBy("model_settings.max_output_tokens")}, {"stream", setByAgentd},
			{"tools", setByAgentd}, {"tool_choice", setBy("model_settings.tool_choice")},
			{"thinking", setBy("thinking_level")}, {"stop_sequences", setBy("model_settings.stop_sequences")},
			{"output_config.format", setBy("output_schema")},
			{"temperature", anthropicNoSampling}, {"top_p", anthropicNoSampling}, {"top_k", anthropicNoSampling},
			{"mcp_servers", providerSideTools}, {"container", providerSideTools}, {"context_management", providerSideContext},
		}}
		if model.Reasoning && thinkingOn(opts.ThinkingLevel) {
			r.forcedToolChoice = "with extended thinking (thinking_level) Claude takes tool_choice AUTO or NONE only"
		}
		return r
	case APIOpenAICompletions:
		r := apiRules{maxStop: 4, reserved: []reservation{
			{"model", setByAgentd}, {"messages", setByAgentd}, {"stream", setByAgentd}, {"stream_options", setByAgentd},
			{"max_tokens", setBy("model_settings.max_output_tokens")}, {"max_completion_tokens", setBy("model_settings.max_output_tokens")},
			{"temperature", setBy("model_settings.temperature")}, {"top_p", setBy("model_settings.top_p")},
			{"stop", setBy("model_settings.stop_sequences")}, {"tools", setByAgentd},
			{"tool_choice", setBy("model_settings.tool_choice")}, {"response_format", setBy("output_schema")},
			{"reasoning_effort", setBy("thinking_level")}, {"reasoning", setBy("thinking_level")},
			{"functions", providerSideTools}, {"function_call", providerSideTools}, {"web_search_options", providerSideTools},
			{"n", oneAnswer},
		}}
		if openAIReasoningID(model.ID) {
			r.temperature = "OpenAI reasoning models take no temperature"
			r.topP = "OpenAI reasoning models take no top_p"
			r.stop = "OpenAI reasoning models take no stop sequences"
		}
		return r
	case APIOpenAIResponses:
		r := apiRules{stop: "the Responses API has no stop sequences", reserved: []reservation{
			{"model", setByAgentd}, {"input", setByAgentd}, {"instructions", setByAgentd}, {"stream", setByAgentd},
			{"store", setByAgentd}, {"include", setByAgentd}, {"prompt_cache_key", setByAgentd},
			{"max_output_tokens", setBy("model_settings.max_output_tokens")},
			{"temperature", setBy("model_settings.temperature")}, {"top_p", setBy("model_settings.top_p")},
			{"tools", setByAgentd}, {"tool_choice", setBy("model_settings.tool_choice")},
			{"reasoning", setBy("thinking_level")}, {"text.format", setBy("output_schema")},
			{"previous_response_id", providerSideContext}, {"conversation", providerSideContext}, {"prompt", providerSideContext},
			{"truncation", providerSideContext}, {"background", setByAgentd},
		}}
		if model.Reasoning || openAIReasoningID(model.ID) {
			r.temperature = "OpenAI reasoning models take no temperature"
			r.topP = "OpenAI reasoning models take no top_p"
		}
		return r
	case APIGoogleGenerativeAI:
		return apiRules{maxStop: 5, reserved: []reservation{
			{"contents", setByAgentd}, {"systemInstruction", setByAgentd}, {"tools", setByAgentd},
			{"toolConfig", setBy("model_settings.tool_choice")},
			{"generationConfig.temperature", setBy("model_settings.temperature")},
			{"generationConfig.topP", setBy("model_settings.top_p")},
			{"generationConfig.maxOutputTokens", setBy("model_settings.max_output_tokens")},
			{"generationConfig.stopSequences", setBy("model_settings.stop_sequences")},
			{"generationConfig.thinkingConfig", setBy("thinking_level")},
			{"generationConfig.responseMimeType", setBy("output_schema")},
			{"generationConfig.responseJsonSchema", setBy("output_schema")},
			{"generationConfig.responseSchema", setBy("output_schema")},
			{"cachedContent", providerSideContext}, {"generationConfig.candidateCount", oneAnswer},
		}}
	}
	// The faux model sends no request; it records every setting.
	return apiRules{}
}

func thinkingOn(level agentdv1.ThinkingLevel) bool {
	return level != agentdv1.ThinkingLevel_THINKING_LEVEL_UNSPECIFIED && level != agentdv1.ThinkingLevel_THINKING_LEVEL_OFF
}

// gptGeneration matches OpenAI's gpt-<n> ids, whose generations from 5 on
// are reasoning models.
var gptGeneration = regexp.MustCompile(`^gpt-(\d+)`)

// openAIReasoningID reports whether id names an OpenAI reasoning model
// (o-series, codex-mini, gpt-5 and later but their -chat variants), which
// refuse sampling parameters. Chat Completions servers other than
// OpenAI's serve other ids, so their reasoning models are not affected.
func openAIReasoningID(id string) bool {
	id = strings.ToLower(id)
	if m := gptGeneration.FindStringSubmatch(id); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n >= 5 && !strings.Contains(id, "-chat")
	}
	for _, p := range []string{"o1", "o3", "o4", "codex-mini"} {
		if id == p || strings.HasPrefix(id, p+"-") {
			return true
		}
	}
	return false
}

// fieldName matches the request field names a provider option may set: a
// key becomes a path of the SDK's JSON-set option, so it must not hold
// path syntax.
var fieldName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// CheckOptions reports whether a call with opts can be made to model, as
// its API's adapter would make it: nil when it can, a *SettingError naming
// the first setting it cannot send otherwise. Runs call it before they
// start, so a setting is refused with the request rather than failing a
// model call. Which tools a run offers is not its business: a named
// tool_choice is checked against them by the caller.
func CheckOptions(model Model, opts Options) error {
	name := model.Provider + "/" + model.ID
	refuse := func(field, format string, args ...any) error {
		return &SettingError{Field: field, Model: name, Reason: fmt.Sprintf(format, args...)}
	}
	r := rules(model, opts)
	if s := opts.Settings; s != nil {
		if s.Temperature != nil {
			switch t := s.GetTemperature(); {
			case r.temperature != "":
				return refuse("model_settings.temperature", "%s", r.temperature)
			case t < 0 || t > 2:
				return refuse("model_settings.temperature", "%g is out of range: give 0 to 2", t)
			}
		}
		if s.TopP != nil {
			switch p := s.GetTopP(); {
			case r.topP != "":
				return refuse("model_settings.top_p", "%s", r.topP)
			case p <= 0 || p > 1:
				return refuse("model_settings.top_p", "%g is out of range: give more than 0 and at most 1", p)
			}
		}
		if n := s.GetMaxOutputTokens(); n < 0 {
			return refuse("model_settings.max_output_tokens", "%d is negative: give a positive number, or 0 for the model's limit", n)
		} else if model.MaxOutputTokens > 0 && n > model.MaxOutputTokens {
			return refuse("model_settings.max_output_tokens", "%d is more than the model's limit of %d", n, model.MaxOutputTokens)
		}
		if err := checkToolChoice(s.GetToolChoice(), r, refuse); err != nil {
			return err
		}
		if n := len(s.GetStopSequences()); n > 0 {
			switch {
			case r.stop != "":
				return refuse("model_settings.stop_sequences", "%s", r.stop)
			case r.maxStop > 0 && n > r.maxStop:
				return refuse("model_settings.stop_sequences", "%d sequences, the API takes at most %d", n, r.maxStop)
			}
		}
		if err := checkProviderOptions(s, model, r, refuse); err != nil {
			return err
		}
	}
	if opts.OutputSchema != nil && !NativeStructuredOutput(model, false) {
		return refuse("output_schema", "the model has no native structured output; runs answer through the submit_output tool instead")
	}
	return nil
}

func checkToolChoice(tc *agentdv1.ToolChoice, r apiRules, refuse func(string, string, ...any) error) error {
	if tc == nil {
		return nil
	}
	switch tc.GetMode() {
	case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL:
		if tc.GetToolName() == "" {
			return refuse("model_settings.tool_choice.tool_name", "mode TOOL needs the name of the tool the model must call")
		}
	case agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_UNSPECIFIED, agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO,
		agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE, agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED:
		if tc.GetToolName() != "" {
			return refuse("model_settings.tool_choice.tool_name", "only mode TOOL takes a tool name")
		}
	default:
		return refuse("model_settings.tool_choice.mode", "unknown mode %d", tc.GetMode())
	}
	if m := tc.GetMode(); r.forcedToolChoice != "" &&
		(m == agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED || m == agentdv1.ToolChoiceMode_TOOL_CHOICE_MODE_TOOL) {
		return refuse("model_settings.tool_choice", "%s", r.forcedToolChoice)
	}
	return nil
}

func checkProviderOptions(s *agentdv1.ModelSettings, model Model, r apiRules, refuse func(string, string, ...any) error) error {
	po := s.GetProviderOptions()
	if po == nil {
		return nil
	}
	b, err := protojson.Marshal(po)
	if err != nil {
		return refuse("model_settings.provider_options", "cannot be encoded: %v", err)
	}
	if len(b) > MaxProviderOptionsBytes {
		return refuse("model_settings.provider_options", "%d bytes encoded, at most %d", len(b), MaxProviderOptionsBytes)
	}
	if model.API == APIFaux {
		return nil // recorded, never sent
	}
	m := po.AsMap()
	for _, k := range sortedKeys(m) {
		field := "model_settings.provider_options." + k
		if !fieldName.MatchString(k) {
			return refuse(field, "not a request field name (letters, digits and _)")
		}
		for _, res := range r.reserved {
			head, rest, nested := strings.Cut(res.path, ".")
			if !sameField(model.API, k, head) {
				continue
			}
			if !nested {
				return refuse(field, "%s", res.reason)
			}
			// agentd sets some keys of this object: the caller may set the
			// others, merged key by key.
			sub, ok := m[k].(map[string]any)
			if !ok {
				return refuse(field, "must be an object: agentd merges it key by key")
			}
			for _, sk := range sortedKeys(sub) {
				if !fieldName.MatchString(sk) {
					return refuse(field+"."+sk, "not a request field name (letters, digits and _)")
				}
				if sameField(model.API, sk, rest) {
					return refuse(field+"."+sk, "%s", res.reason)
				}
			}
		}
	}
	return nil
}

// sameField compares a provider option key with a reserved field name.
// The Gemini API reads proto JSON, which takes lowerCamel and snake_case
// names alike, so there both spellings are the field.
func sameField(api, key, reserved string) bool {
	if api != APIGoogleGenerativeAI {
		return key == reserved
	}
	return strings.EqualFold(strings.ReplaceAll(key, "_", ""), reserved)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// BodyOption is one provider option as an adapter merges it into its
// request body with its SDK's JSON-set request option.
type BodyOption struct {
	// Path is where the value goes, such as "seed" or
	// "output_config.effort".
	Path string
	// Value is the option's JSON value, as structpb's AsMap gives it.
	Value any
}

// BodyOptions returns the provider_options of s for api's adapter, after
// [CheckOptions] accepted them, in key order: each top-level key as a
// whole, except an object some of whose keys agentd sets itself
// (Anthropic's output_config, the Responses API's text), whose keys are
// set one by one so agentd's stay.
func BodyOptions(api string, s *agentdv1.ModelSettings) []BodyOption {
	po := s.GetProviderOptions()
	if po == nil {
		return nil
	}
	partial := map[string]bool{}
	for _, res := range rules(Model{API: api}, Options{}).reserved {
		if head, _, nested := strings.Cut(res.path, "."); nested {
			partial[head] = true
		}
	}
	m := po.AsMap()
	var out []BodyOption
	for _, k := range sortedKeys(m) {
		if sub, ok := m[k].(map[string]any); ok && partial[k] {
			for _, sk := range sortedKeys(sub) {
				out = append(out, BodyOption{Path: k + "." + sk, Value: sub[sk]})
			}
			continue
		}
		out = append(out, BodyOption{Path: k, Value: m[k]})
	}
	return out
}

// NativeStructuredOutput reports whether model's API can constrain an
// answer to a JSON Schema natively while tools are offered (hasTools),
// so [Options.OutputSchema] applies; otherwise a run with an output
// schema offers the reserved finalizer tool instead.
//
// Chat Completions (response_format json_schema) and Responses
// (text.format json_schema) take a schema together with tools; a Chat
// Completions server without it is marked StructuredOutputTool by the
// catalog (openai.Compat.NoJSONSchema). Anthropic takes output_config
// format from Claude 4.5 on. Gemini refuses a response schema together
// with function calling, so it is native only for a call without tools.
func NativeStructuredOutput(model Model, hasTools bool) bool {
	if model.StructuredOutputTool {
		return false
	}
	switch model.API {
	case APIFaux, APIOpenAICompletions, APIOpenAIResponses:
		return true
	case APIAnthropicMessages:
		major, minor, ok := claudeVersion(model.ID)
		return ok && (major > 4 || major == 4 && minor >= 5)
	case APIGoogleGenerativeAI:
		return !hasTools
	}
	return false
}

// claudeVersion reads the model version from a Claude id such as
// "claude-sonnet-4-5", "claude-opus-4-20250514" (4.0) or
// "claude-3-7-sonnet-latest": the first number of one or two digits, and
// the one right after it if it has one or two digits (a date is not a
// minor version).
func claudeVersion(id string) (major, minor int, ok bool) {
	parts := strings.FieldsFunc(strings.ToLower(id), func(r rune) bool { return r == '-' || r == '.' || r == '@' || r == ':' })
	small := func(s string) (int, bool) {
		if len(s) == 0 || len(s) > 2 {
			return 0, false
		}
		n, err := strconv.Atoi(s)
		return n, err == nil
	}
	for i, p := range parts {
		if n, isNum := small(p); isNum {
			if i+1 < len(parts) {
				minor, _ = small(parts[i+1])
			}
			return n, minor, true
		}
	}
	return 0, 0, false
}
