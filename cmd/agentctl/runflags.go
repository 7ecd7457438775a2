package main

// The per-run flags of prompt and continue: the settings of that run only
// (PromptRequest and ContinueRequest fields 7 to 15). agentctl parses what
// must be parsed and names the flag when it cannot; agentd validates the
// rest and names the request field.

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// runFlags holds the per-run flags as given.
type runFlags struct {
	metadata         []string
	outputSchema     string
	maxOutputRetries uint32
	model            string
	thinking         string
	systemAppend     string
	tools            []string
	temperature      float64
	maxOutputTokens  int64
	ifBusy           string
}

// runSettings is what runFlags parse to, ready for a PromptRequest or a
// ContinueRequest.
type runSettings struct {
	model            *agentdv1.ModelRef
	thinking         agentdv1.ThinkingLevel
	systemAppend     string
	tools            []string
	modelSettings    *agentdv1.ModelSettings
	outputSchema     *structpb.Struct
	maxOutputRetries *uint32
	metadata         map[string]string
	ifBusy           agentdv1.BusyPolicy
}

// add declares the flags on cmd; --if-busy only with busy (Prompt has it,
// Continue does not).
func (f *runFlags) add(cmd *cobra.Command, busy bool) {
	fs := cmd.Flags()
	fs.StringArrayVar(&f.metadata, "metadata", nil, "key=value stored with the run and echoed on agent_start and agent_end; repeatable")
	fs.StringVar(&f.outputSchema, "output-schema", "", "a JSON Schema file (root an object schema) the run's final answer must match; the answer is printed as JSON")
	fs.Uint32Var(&f.maxOutputRetries, "max-output-retries", 0, "corrections allowed when the answer does not match --output-schema (default: the session's)")
	fs.StringVar(&f.model, "model", "", "this run's model, provider/id (default: the session's)")
	fs.StringVar(&f.thinking, "thinking", "", "this run's thinking level: off, minimal, low, medium, high or xhigh")
	fs.StringVar(&f.systemAppend, "system-append", "", "text appended to the session's system prompt for this run")
	fs.StringArrayVar(&f.tools, "tool", nil, "offer only this of the session's tools, by name; repeatable (default: all)")
	fs.Float64Var(&f.temperature, "temperature", 0, "this run's sampling temperature")
	fs.Int64Var(&f.maxOutputTokens, "max-output-tokens", 0, "this run's most output tokens per model call")
	if busy {
		fs.StringVar(&f.ifBusy, "if-busy", "", "while another run is active: reject (default), enqueue, steer or interrupt")
	}
}

// parse turns the flags cmd was given into settings.
func (f *runFlags) parse(cmd *cobra.Command) (*runSettings, error) {
	changed := cmd.Flags().Changed
	s := &runSettings{systemAppend: f.systemAppend, tools: f.tools}
	var err error
	if s.metadata, err = metadataFlag(f.metadata); err != nil {
		return nil, err
	}
	if changed("output-schema") {
		if s.outputSchema, err = schemaFile(f.outputSchema); err != nil {
			return nil, err
		}
	}
	if changed("max-output-retries") {
		n := f.maxOutputRetries
		s.maxOutputRetries = &n
	}
	if changed("model") {
		provider, id, ok := strings.Cut(f.model, "/")
		if !ok {
			return nil, fmt.Errorf("--model %q: write provider/id, such as anthropic/claude-sonnet-4-5", f.model)
		}
		s.model = &agentdv1.ModelRef{Provider: provider, Id: id}
	}
	if changed("thinking") {
		if s.thinking, err = thinkingLevel(f.thinking); err != nil {
			return nil, err
		}
	}
	if changed("temperature") || changed("max-output-tokens") {
		s.modelSettings = &agentdv1.ModelSettings{MaxOutputTokens: f.maxOutputTokens}
		if changed("temperature") {
			t := f.temperature
			s.modelSettings.Temperature = &t
		}
	}
	if changed("if-busy") {
		if s.ifBusy, err = busyPolicy(f.ifBusy); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// prompt sets the settings on a PromptRequest.
func (s *runSettings) prompt(req *agentdv1.PromptRequest) *agentdv1.PromptRequest {
	req.Model, req.ThinkingLevel, req.SystemPromptAppend, req.Tools = s.model, s.thinking, s.systemAppend, s.tools
	req.ModelSettings, req.OutputSchema, req.MaxOutputRetries = s.modelSettings, s.outputSchema, s.maxOutputRetries
	req.Metadata, req.IfBusy = s.metadata, s.ifBusy
	return req
}

// continueRequest sets the settings on a ContinueRequest.
func (s *runSettings) continueRequest(req *agentdv1.ContinueRequest) *agentdv1.ContinueRequest {
	req.Model, req.ThinkingLevel, req.SystemPromptAppend, req.Tools = s.model, s.thinking, s.systemAppend, s.tools
	req.ModelSettings, req.OutputSchema, req.MaxOutputRetries = s.modelSettings, s.outputSchema, s.maxOutputRetries
	req.Metadata = s.metadata
	return req
}

// metadataFlag parses the key=value pairs of --metadata.
func metadataFlag(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	md := make(map[string]string, len(pairs))
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--metadata %q: write key=value, such as job=nightly-42", kv)
		}
		if _, dup := md[k]; dup {
			return nil, fmt.Errorf("--metadata %q: key %q given twice", kv, k)
		}
		md[k] = v
	}
	return md, nil
}

// schemaFile reads the JSON Schema of --output-schema: a JSON object.
func schemaFile(path string) (*structpb.Struct, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--output-schema: %v", err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("--output-schema %s: not JSON: %v", path, err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("--output-schema %s: write a JSON Schema object, such as {\"type\": \"object\"}", path)
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		return nil, fmt.Errorf("--output-schema %s: %v", path, err)
	}
	return s, nil
}

// thinkingLevel is the level a word of --thinking names.
func thinkingLevel(word string) (agentdv1.ThinkingLevel, error) {
	v, ok := agentdv1.ThinkingLevel_value["THINKING_LEVEL_"+strings.ToUpper(word)]
	if !ok || v == int32(agentdv1.ThinkingLevel_THINKING_LEVEL_UNSPECIFIED) {
		return 0, fmt.Errorf("--thinking %q: use off, minimal, low, medium, high or xhigh", word)
	}
	return agentdv1.ThinkingLevel(v), nil
}

// busyPolicy is the policy a word of --if-busy names.
func busyPolicy(word string) (agentdv1.BusyPolicy, error) {
	v, ok := agentdv1.BusyPolicy_value["BUSY_POLICY_"+strings.ToUpper(word)]
	if !ok || v == int32(agentdv1.BusyPolicy_BUSY_POLICY_UNSPECIFIED) {
		return 0, fmt.Errorf("--if-busy %q: use reject, enqueue, steer or interrupt", word)
	}
	return agentdv1.BusyPolicy(v), nil
}

// structuredJSON is a run's structured output as one line of JSON, keys
// sorted, so scripts can compare and parse it.
func structuredJSON(o *structpb.Struct) string {
	b, err := json.Marshal(o.AsMap())
	if err != nil {
		return fmt.Sprintf("(structured output not printable: %v)", err)
	}
	return string(b)
}
