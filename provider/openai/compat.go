package openai

// Compat holds the per-server switches that let one Chat Completions adapter
// serve OpenAI and the many servers that imitate it. The zero value is
// OpenAI's own behaviour with every reasoning field read.
type Compat struct {
	// MaxTokensField names the output cap: "max_completion_tokens" (OpenAI,
	// Groq) or "max_tokens" (most compatible servers). Empty means
	// max_completion_tokens.
	MaxTokensField string `json:"max_tokens_field,omitempty"`
	// NoDeveloperRole sends the system prompt with role "system" even to
	// reasoning models; servers that do not know "developer" need it.
	NoDeveloperRole bool `json:"no_developer_role,omitempty"`
	// ReasoningFields are the delta fields that carry reasoning text, in
	// order of preference: "reasoning_content" (DeepSeek, vLLM, llama.cpp),
	// "reasoning" (Ollama, OpenRouter, Groq), "reasoning_text". Empty reads
	// all three.
	ReasoningFields []string `json:"reasoning_fields,omitempty"`
	// ReasoningEffort says how a thinking level is sent: "reasoning_effort"
	// (OpenAI, Groq, vLLM), "openrouter" ({"reasoning":{"effort"}}) or
	// "none" (the server takes no such parameter). Empty means
	// reasoning_effort.
	ReasoningEffort string `json:"reasoning_effort,omitempty"`
	// NoStreamUsage leaves out stream_options.include_usage, for servers that
	// reject it; usage is then read from whatever the final chunk carries.
	NoStreamUsage bool `json:"no_stream_usage,omitempty"`
	// ThinkingAsText replays same-model reasoning as plain text instead of in
	// the reasoning field, for servers that reject the field on input.
	ThinkingAsText bool `json:"thinking_as_text,omitempty"`
	// NoJSONSchema marks a server without response_format json_schema
	// usable together with tools (or whose models do not all have it):
	// runs with an output schema answer through the finalizer tool
	// instead (the catalog sets provider.Model.StructuredOutputTool).
	NoJSONSchema bool `json:"no_json_schema,omitempty"`
}

// Profiles are the known compatibility profiles by name, for the config
// file's "profile" key.
func Profiles() map[string]Compat {
	return map[string]Compat{
		"openai":     {},
		"ollama":     {MaxTokensField: "max_tokens", NoDeveloperRole: true, ReasoningFields: []string{"reasoning", "reasoning_content"}, ReasoningEffort: "reasoning_effort"},
		"vllm":       {MaxTokensField: "max_tokens", NoDeveloperRole: true, ReasoningFields: []string{"reasoning_content", "reasoning"}, ReasoningEffort: "none"},
		"llama.cpp":  {MaxTokensField: "max_tokens", NoDeveloperRole: true, ReasoningFields: []string{"reasoning_content"}, ReasoningEffort: "none", NoJSONSchema: true},
		"lmstudio":   {MaxTokensField: "max_tokens", NoDeveloperRole: true, ReasoningFields: []string{"reasoning_content", "reasoning"}, ReasoningEffort: "none", NoJSONSchema: true},
		"openrouter": {MaxTokensField: "max_tokens", ReasoningFields: []string{"reasoning", "reasoning_content"}, ReasoningEffort: "openrouter", NoJSONSchema: true},
		"groq":       {MaxTokensField: "max_completion_tokens", NoDeveloperRole: true, ReasoningFields: []string{"reasoning"}, ReasoningEffort: "reasoning_effort", NoJSONSchema: true},
		"deepseek":   {MaxTokensField: "max_tokens", NoDeveloperRole: true, ReasoningFields: []string{"reasoning_content"}, ReasoningEffort: "none", ThinkingAsText: false, NoJSONSchema: true},
	}
}

func (c Compat) reasoningFields() []string {
	if len(c.ReasoningFields) == 0 {
		return []string{"reasoning_content", "reasoning", "reasoning_text"}
	}
	return c.ReasoningFields
}
