package catalog_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/catalog"
	"github.com/agentd/agentd/provider/internal/wiretest"
)

// The genai SDK's dependencies start an opencensus worker at init; it is
// not ours and lives for the process.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "models.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestResolveAndConfigured(t *testing.T) {
	r, err := catalog.NewRegistry(catalog.Builtin(), catalog.Options{Getenv: env(map[string]string{"ANTHROPIC_API_KEY": "sk-ant-x"})})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		provider, id string
		wantErr      error
	}{
		{"anthropic", "claude-sonnet-4-5", nil},
		{"openai", "gpt-4.1", provider.ErrNotConfigured},
		{"anthropic", "no-such-model", provider.ErrUnknownModel},
		{"nobody", "x", provider.ErrUnknownModel},
	}
	for _, tt := range tests {
		m, stream, err := r.Resolve(&agentdv1.ModelRef{Provider: tt.provider, Id: tt.id})
		if !errors.Is(err, tt.wantErr) {
			t.Fatalf("%s/%s: err = %v, want %v", tt.provider, tt.id, err, tt.wantErr)
		}
		if tt.wantErr == nil && (stream == nil || m.API != provider.APIAnthropicMessages || m.ContextWindow != 200000 || m.Price.Output != 15 || !m.Reasoning) {
			t.Fatalf("model = %+v", m)
		}
	}
	if _, _, err := r.Resolve(&agentdv1.ModelRef{Provider: "openai", Id: "gpt-4.1"}); !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Fatalf("not-configured error should name the variable: %v", err)
	}
	if !r.Configured("anthropic") || r.Configured("openai") {
		t.Fatal("configured flags wrong")
	}
}

func TestConfigFileAddsOllamaAndOverrides(t *testing.T) {
	s := wiretest.New(t, wiretest.Reply{Body: wiretest.File(t, "../openai/testdata/text.sse")})
	path := writeConfig(t, `{
	  "providers": {
	    "ollama": {
	      "api": "openai-completions",
	      "base_url": "`+s.URL+`/v1",
	      "profile": "ollama",
	      "models": [{"id": "qwen3:8b", "context_window": 40960, "max_output_tokens": 8192, "input": ["text"], "reasoning": true}]
	    },
	    "anthropic": {"api_key": "sk-ant-from-file", "models": [{"id": "claude-sonnet-4-5", "context_window": 1000000}]}
	  }
	}`)
	fileCfg, err := catalog.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := catalog.NewRegistry(catalog.Merge(catalog.Builtin(), fileCfg), catalog.Options{Getenv: env(nil)})
	if err != nil {
		t.Fatal(err)
	}
	m, stream, err := r.Resolve(&agentdv1.ModelRef{Provider: "ollama", Id: "qwen3:8b"})
	if err != nil || !m.TextOnly || !m.Reasoning || m.ContextWindow != 40960 {
		t.Fatalf("ollama model %+v err %v", m, err)
	}
	final := provider.Collect(stream(context.Background(), m, &agentdv1.Context{Messages: []*agentdv1.Message{wiretest.User("hi")}}, provider.Options{MaxTokens: 100}))
	if final.GetContent()[0].GetText().GetText() != "Hello, world" || final.GetProvider() != "ollama" {
		t.Fatalf("final = %v", final)
	}
	if body := string(s.Requests()[0].Body); !strings.Contains(body, `"max_tokens":100`) || !strings.Contains(body, `"model":"qwen3:8b"`) {
		t.Fatalf("ollama request = %s", body)
	}
	sonnet, _, err := r.Resolve(&agentdv1.ModelRef{Provider: "anthropic", Id: "claude-sonnet-4-5"})
	if err != nil || sonnet.ContextWindow != 1000000 || sonnet.Price.Input != 3 {
		t.Fatalf("override: %+v %v", sonnet, err)
	}
	list := r.List()
	var sawOllama bool
	for _, lm := range list {
		js, _ := protojson.Marshal(lm)
		if strings.Contains(string(js), "sk-ant-from-file") {
			t.Fatalf("ListModels leaks a key: %s", js)
		}
		if lm.GetRef().GetProvider() == "ollama" {
			sawOllama = true
			if !lm.GetConfigured() || lm.GetMetadata().GetFields()["base_url"].GetStringValue() != s.URL+"/v1" ||
				len(lm.GetInputModalities()) != 1 {
				t.Fatalf("ollama listing = %v", lm)
			}
		}
	}
	if !sawOllama {
		t.Fatal("ollama model not listed")
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := catalog.LoadConfig(writeConfig(t, `{"providers":{"x":{"apikey":"typo"}}}`)); err == nil {
		t.Fatal("unknown field accepted")
	}
	bad := catalog.Config{Providers: map[string]catalog.ProviderConfig{"x": {API: "openai-completions", Profile: "nope"}}}
	if _, err := catalog.NewRegistry(bad, catalog.Options{}); err == nil {
		t.Fatal("unknown profile accepted")
	}
	bad = catalog.Config{Providers: map[string]catalog.ProviderConfig{"x": {API: "carrier-pigeon"}}}
	if _, err := catalog.NewRegistry(bad, catalog.Options{}); err == nil {
		t.Fatal("unknown api accepted")
	}
}

// Timeouts are set per provider in the config file, and a call that
// outlives them ends with a timeout error naming the limit.
func TestProviderTimeoutsFromConfig(t *testing.T) {
	s := wiretest.New(t, wiretest.Reply{NoHeaders: true})
	path := writeConfig(t, `{"providers": {"local": {"api": "openai-completions", "base_url": "`+s.URL+`/v1",
	  "first_byte_timeout": "150ms", "idle_timeout": "1h", "models": [{"id": "m"}]}}}`)
	fileCfg, err := catalog.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Duration(fileCfg.Providers["local"].FirstByteTimeout); got != 150*time.Millisecond {
		t.Fatalf("first_byte_timeout read as %v", got)
	}
	r, err := catalog.NewRegistry(fileCfg, catalog.Options{Getenv: env(nil)})
	if err != nil {
		t.Fatal(err)
	}
	m, stream, err := r.Resolve(&agentdv1.ModelRef{Provider: "local", Id: "m"})
	if err != nil {
		t.Fatal(err)
	}
	final := provider.Collect(stream(context.Background(), m, &agentdv1.Context{Messages: []*agentdv1.Message{wiretest.User("hi")}}, provider.Options{}))
	if final.GetStopReason() != agentdv1.StopReason_STOP_REASON_ERROR || final.GetErrorMessage() != provider.TimedOutPrefix+"the provider sent nothing for 150ms (first-byte timeout)" {
		t.Fatalf("final = %v", final)
	}
	for _, bad := range []string{`"first_byte_timeout": "soon"`, `"idle_timeout": "-1s"`, `"idle_timeout": 30`} {
		if _, err := catalog.LoadConfig(writeConfig(t, `{"providers": {"x": {`+bad+`}}}`)); err == nil {
			t.Fatalf("%s accepted", bad)
		}
	}
}

// A Chat Completions server whose profile (or compat block) has no
// json_schema response format gets models that answer output schemas
// through the finalizer tool; OpenAI's own and the other APIs' do not.
func TestStructuredOutputToolFollowsCompat(t *testing.T) {
	path := writeConfig(t, `{"providers": {
		"local": {"api": "openai-completions", "base_url": "http://localhost:1/v1", "compat": {"no_json_schema": true}, "models": [{"id": "m"}]},
		"vllm": {"api": "openai-completions", "base_url": "http://localhost:2/v1", "profile": "vllm", "models": [{"id": "m"}]},
		"deepseek": {"api": "openai-completions", "base_url": "http://localhost:3/v1", "profile": "deepseek", "models": [{"id": "m"}]}
	}}`)
	file, err := catalog.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := catalog.NewRegistry(catalog.Merge(catalog.Builtin(), file), catalog.Options{Getenv: env(map[string]string{
		"OPENAI_API_KEY": "k", "OPENROUTER_API_KEY": "k", "ANTHROPIC_API_KEY": "k"})})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		provider, id string
		tool         bool
	}{
		{"openai", "gpt-4.1", false},
		{"openai", "gpt-5", false}, // Responses API
		{"anthropic", "claude-sonnet-4-5", false},
		{"openrouter", "openai/gpt-oss-120b", true},
		{"local", "m", true},
		{"vllm", "m", false},
		{"deepseek", "m", true},
	} {
		m, _, err := r.Resolve(&agentdv1.ModelRef{Provider: tc.provider, Id: tc.id})
		if err != nil {
			t.Fatalf("%s/%s: %v", tc.provider, tc.id, err)
		}
		if m.StructuredOutputTool != tc.tool {
			t.Errorf("%s/%s: StructuredOutputTool = %v, want %v", tc.provider, tc.id, m.StructuredOutputTool, tc.tool)
		}
	}
}
