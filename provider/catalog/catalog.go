// Package catalog knows which models agentd can call: an embedded list of
// common models, extended and overridden by a JSON config file, and a
// Registry that turns a ModelRef into the [provider.Model] and the adapter
// StreamFunc that serve it.
package catalog

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/anthropic"
	"github.com/agentd/agentd/provider/google"
	"github.com/agentd/agentd/provider/openai"
	"github.com/agentd/agentd/provider/openairesponses"
)

//go:embed models.json
var builtinJSON []byte

// Config is the config file: providers by name. A provider that exists in
// the embedded catalog is merged field by field (a set field wins) and its
// models are merged by id; a new name adds a provider.
type Config struct {
	// Providers are keyed by the name sessions use in ModelRef.provider.
	Providers map[string]ProviderConfig `json:"providers"`
}

// ProviderConfig configures one provider.
type ProviderConfig struct {
	// API is the wire protocol: "anthropic-messages", "openai-completions",
	// "openai-responses" or "google-generative-ai". A model may override it.
	API string `json:"api,omitempty"`
	// BaseURL overrides the provider's endpoint; setting it in the config
	// file marks a keyless local server (Ollama, vLLM) as configured.
	BaseURL string `json:"base_url,omitempty"`
	// APIKey is the key itself; prefer APIKeyEnv so the file holds no secret.
	APIKey string `json:"api_key,omitempty"`
	// APIKeyEnv names the environment variable holding the key.
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// Profile names an openai.Profiles entry for Chat Completions servers.
	Profile string `json:"profile,omitempty"`
	// Compat overrides the profile's switches.
	Compat *openai.Compat `json:"compat,omitempty"`
	// Headers are sent with every request.
	Headers map[string]string `json:"headers,omitempty"`
	// FirstByteTimeout bounds the wait from a call to its first event, as
	// a Go duration ("90s", "5m"); unset means
	// provider.DefaultTimeouts().FirstByte.
	FirstByteTimeout Duration `json:"first_byte_timeout,omitempty"`
	// IdleTimeout bounds the gap between two events of a stream; unset
	// means provider.DefaultTimeouts().Idle.
	IdleTimeout Duration `json:"idle_timeout,omitempty"`
	// Models are the provider's models.
	Models []ModelSpec `json:"models,omitempty"`
}

// Duration is a time.Duration written in the config file as a Go duration
// string, such as "90s" or "5m".
type Duration time.Duration

// UnmarshalJSON reads a duration string; it must be positive.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"90s\" or \"5m\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v <= 0 {
		return fmt.Errorf("duration %q must be positive", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// ModelSpec describes one model in the catalog.
type ModelSpec struct {
	// ID is the provider's model id, as sent on the wire.
	ID string `json:"id"`
	// API overrides the provider's wire protocol for this model, so that
	// OpenAI's reasoning models go through the Responses API (which keeps
	// their encrypted reasoning between turns) while the others stay on Chat
	// Completions.
	API string `json:"api,omitempty"`
	// Name is shown to people; it defaults to ID.
	Name string `json:"name,omitempty"`
	// ContextWindow is the most tokens one request may hold.
	ContextWindow int64 `json:"context_window,omitempty"`
	// MaxOutputTokens is the most tokens one answer may hold.
	MaxOutputTokens int64 `json:"max_output_tokens,omitempty"`
	// Input lists what the model reads: "text", and "image" if it sees images.
	Input []string `json:"input,omitempty"`
	// Reasoning says whether the model thinks before answering.
	Reasoning *bool `json:"reasoning,omitempty"`
	// Price is the model's price; nil keeps the built-in model's price
	// (none for a new model: its usage costs nothing).
	Price *Price `json:"price,omitempty"`
}

// Price is per million tokens in US dollars.
type Price struct {
	// Input is the price of a million input tokens.
	Input float64 `json:"input"`
	// Output is the price of a million output tokens.
	Output float64 `json:"output"`
	// CacheRead is the price of a million tokens read from the prompt cache.
	CacheRead float64 `json:"cache_read"`
	// CacheWrite is the price of a million tokens written to the prompt cache.
	CacheWrite float64 `json:"cache_write"`
}

// Builtin returns the embedded catalog.
func Builtin() Config {
	var c Config
	if err := json.Unmarshal(builtinJSON, &c); err != nil {
		panic("catalog: embedded models.json: " + err.Error())
	}
	return c
}

// LoadConfig reads a config file; unknown fields are errors, so a typo does
// not silently leave a provider unconfigured.
func LoadConfig(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("open model config: %w", err)
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("parse model config %s: %w", path, err)
	}
	return c, nil
}

// Merge overlays o on c (o wins) and returns the result; neither is changed.
func Merge(c, o Config) Config {
	out := Config{Providers: map[string]ProviderConfig{}}
	for k, v := range c.Providers {
		v.Models = append([]ModelSpec(nil), v.Models...)
		out.Providers[k] = v
	}
	for name, p := range o.Providers {
		base, ok := out.Providers[name]
		if !ok {
			out.Providers[name] = p
			continue
		}
		if p.API != "" {
			base.API = p.API
		}
		if p.BaseURL != "" {
			base.BaseURL = p.BaseURL
		}
		if p.APIKey != "" {
			base.APIKey = p.APIKey
		}
		if p.APIKeyEnv != "" {
			base.APIKeyEnv = p.APIKeyEnv
		}
		if p.Profile != "" {
			base.Profile = p.Profile
		}
		if p.Compat != nil {
			base.Compat = p.Compat
		}
		if p.Headers != nil {
			base.Headers = p.Headers
		}
		if p.FirstByteTimeout > 0 {
			base.FirstByteTimeout = p.FirstByteTimeout
		}
		if p.IdleTimeout > 0 {
			base.IdleTimeout = p.IdleTimeout
		}
		for _, m := range p.Models {
			base.Models = mergeModel(base.Models, m)
		}
		out.Providers[name] = base
	}
	return out
}

func mergeModel(list []ModelSpec, m ModelSpec) []ModelSpec {
	for i, old := range list {
		if old.ID != m.ID {
			continue
		}
		if m.Name != "" {
			old.Name = m.Name
		}
		if m.API != "" {
			old.API = m.API
		}
		if m.ContextWindow > 0 {
			old.ContextWindow = m.ContextWindow
		}
		if m.MaxOutputTokens > 0 {
			old.MaxOutputTokens = m.MaxOutputTokens
		}
		if m.Input != nil {
			old.Input = m.Input
		}
		if m.Reasoning != nil {
			old.Reasoning = m.Reasoning
		}
		if m.Price != nil {
			old.Price = m.Price
		}
		list[i] = old
		return list
	}
	return append(list, m)
}

// Options tune a Registry.
type Options struct {
	// Getenv reads environment variables; defaults to os.Getenv.
	Getenv func(string) string
	// HTTPClient is given to every adapter; nil means the SDK default.
	HTTPClient *http.Client
}

type entry struct {
	model  provider.Model
	spec   ModelSpec
	stream provider.StreamFunc
}

type providerState struct {
	name       string
	cfg        ProviderConfig
	configured bool
	// streams holds one adapter per wire protocol the provider's models use.
	streams map[string]provider.StreamFunc
}

// Registry resolves model references. It is immutable once built and safe
// for concurrent use.
type Registry struct {
	providers map[string]*providerState
	models    map[string]*entry // key provider + "\x00" + id
	order     []string
}

// NewRegistry builds a registry from a config (usually
// Merge(Builtin(), LoadConfig(path))). API keys come from the config or the
// environment variable it names; they are handed to the adapters and never
// exposed by the registry.
func NewRegistry(cfg Config, opts Options) (*Registry, error) {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	r := &Registry{providers: map[string]*providerState{}, models: map[string]*entry{}}
	names := make([]string, 0, len(cfg.Providers))
	for n := range cfg.Providers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		pc := cfg.Providers[name]
		key := pc.APIKey
		if key == "" && pc.APIKeyEnv != "" {
			key = opts.Getenv(pc.APIKeyEnv)
		}
		if key == "" && pc.API == provider.APIGoogleGenerativeAI {
			key = opts.Getenv("GOOGLE_API_KEY") // the SDK's second name for it
		}
		ps := &providerState{name: name, cfg: pc, streams: map[string]provider.StreamFunc{}}
		// A keyless provider is configured when its base URL is set and no
		// key is expected (a local server).
		ps.configured = key != "" || (pc.API == provider.APIOpenAICompletions && pc.BaseURL != "" && pc.APIKeyEnv == "" && pc.APIKey == "")
		apis := []string{pc.API}
		for _, m := range pc.Models {
			if m.API != "" && m.API != pc.API {
				apis = append(apis, m.API)
			}
		}
		for _, api := range apis {
			if _, done := ps.streams[api]; done {
				continue
			}
			stream, err := newAdapter(name, api, key, pc, opts)
			if err != nil {
				return nil, err
			}
			if stream != nil {
				stream = provider.WithTimeouts(stream, provider.Timeouts{
					FirstByte: time.Duration(pc.FirstByteTimeout), Idle: time.Duration(pc.IdleTimeout)})
			}
			ps.streams[api] = stream
		}
		r.providers[name] = ps
		for _, m := range pc.Models {
			if m.ID == "" {
				return nil, fmt.Errorf("provider %q: a model without id", name)
			}
			api := pc.API
			if m.API != "" {
				api = m.API
			}
			pm := provider.Model{Provider: name, ID: m.ID, API: api, Name: m.Name, ContextWindow: m.ContextWindow,
				MaxOutputTokens: m.MaxOutputTokens, Reasoning: m.Reasoning != nil && *m.Reasoning}
			if pm.Name == "" {
				pm.Name = m.ID
			}
			pm.TextOnly = len(m.Input) > 0
			for _, in := range m.Input {
				if in == "image" {
					pm.TextOnly = false
				}
			}
			if api == provider.APIOpenAICompletions {
				// newAdapter has already refused an unknown profile.
				compat, _ := compatOf(name, pc)
				pm.StructuredOutputTool = compat.NoJSONSchema
			}
			if m.Price != nil {
				pm.Price = provider.Price{Input: m.Price.Input, Output: m.Price.Output, CacheRead: m.Price.CacheRead, CacheWrite: m.Price.CacheWrite}
			}
			k := name + "\x00" + m.ID
			if _, dup := r.models[k]; !dup {
				r.order = append(r.order, k)
			}
			r.models[k] = &entry{model: pm, spec: m, stream: ps.streams[api]}
		}
	}
	return r, nil
}

// newAdapter builds the adapter for one provider and wire protocol. A
// provider without a key still gets an adapter where the SDK allows it, so
// Resolve can report it as not configured; the Gemini SDK refuses to be
// built without a key, so such a provider gets none.
func newAdapter(name, api, key string, pc ProviderConfig, opts Options) (provider.StreamFunc, error) {
	switch api {
	case provider.APIAnthropicMessages:
		return anthropic.New(anthropic.Config{APIKey: key, BaseURL: pc.BaseURL, HTTPClient: opts.HTTPClient, Headers: pc.Headers}).Stream, nil
	case provider.APIOpenAICompletions:
		compat, err := compatOf(name, pc)
		if err != nil {
			return nil, err
		}
		return openai.New(openai.Config{Endpoint: provider.Endpoint{APIKey: key, BaseURL: pc.BaseURL, HTTPClient: opts.HTTPClient, Headers: pc.Headers}, Compat: compat}).Stream, nil
	case provider.APIOpenAIResponses:
		return openairesponses.New(openairesponses.Config{APIKey: key, BaseURL: pc.BaseURL, HTTPClient: opts.HTTPClient, Headers: pc.Headers}).Stream, nil
	case provider.APIGoogleGenerativeAI:
		if key == "" {
			return nil, nil
		}
		// genai.NewClient uses its context only to look up Google Cloud
		// credentials, which the Gemini API backend does not need.
		g, err := google.New(context.Background(), google.Config{APIKey: key, BaseURL: pc.BaseURL, HTTPClient: opts.HTTPClient, Headers: pc.Headers})
		if err != nil {
			return nil, fmt.Errorf("provider %q: %w", name, err)
		}
		return g.Stream, nil
	default:
		return nil, fmt.Errorf("provider %q: unsupported api %q (want %s, %s, %s or %s)", name, api,
			provider.APIAnthropicMessages, provider.APIOpenAICompletions, provider.APIOpenAIResponses, provider.APIGoogleGenerativeAI)
	}
}

// compatOf returns the Chat Completions switches of a provider: its
// profile's, replaced by its compat block when it has one.
func compatOf(name string, pc ProviderConfig) (openai.Compat, error) {
	compat := openai.Compat{}
	if pc.Profile != "" {
		p, ok := openai.Profiles()[pc.Profile]
		if !ok {
			return openai.Compat{}, fmt.Errorf("provider %q: unknown profile %q", name, pc.Profile)
		}
		compat = p
	}
	if pc.Compat != nil {
		compat = *pc.Compat
	}
	return compat, nil
}

// Resolve returns the model and the adapter for ref, with the provider's
// timeouts applied; retries are the agent loop's ([provider.RetryPolicy]).
func (r *Registry) Resolve(ref *agentdv1.ModelRef) (provider.Model, provider.StreamFunc, error) {
	ps, ok := r.providers[ref.GetProvider()]
	if !ok {
		return provider.Model{}, nil, fmt.Errorf("%w: provider %q", provider.ErrUnknownModel, ref.GetProvider())
	}
	e, ok := r.models[ref.GetProvider()+"\x00"+ref.GetId()]
	if !ok {
		return provider.Model{}, nil, fmt.Errorf("%w: %q has no model %q", provider.ErrUnknownModel, ref.GetProvider(), ref.GetId())
	}
	if !ps.configured {
		hint := "set its api_key or base_url in the model config file"
		if ps.cfg.APIKeyEnv != "" {
			hint = "set " + ps.cfg.APIKeyEnv + " or " + hint
		}
		return e.model, nil, fmt.Errorf("%w: %q (%s)", provider.ErrNotConfigured, ref.GetProvider(), hint)
	}
	return e.model, e.stream, nil
}

// Configured reports whether a provider can be called now.
func (r *Registry) Configured(providerName string) bool {
	ps, ok := r.providers[providerName]
	return ok && ps.configured
}

// List describes every model for ListModels, in provider then catalog
// order. Metadata holds the base URL, never a key.
func (r *Registry) List() []*agentdv1.Model {
	out := make([]*agentdv1.Model, 0, len(r.order))
	for _, k := range r.order {
		e := r.models[k]
		ps := r.providers[e.model.Provider]
		m := &agentdv1.Model{
			Ref:  &agentdv1.ModelRef{Provider: e.model.Provider, Id: e.model.ID},
			Name: e.model.Name, Api: e.model.API, ContextWindow: e.model.ContextWindow, MaxOutputTokens: e.model.MaxOutputTokens,
			Reasoning: e.model.Reasoning, Configured: ps.configured,
			Price: &agentdv1.ModelPrice{Input: e.model.Price.Input, Output: e.model.Price.Output, CacheRead: e.model.Price.CacheRead, CacheWrite: e.model.Price.CacheWrite},
		}
		m.InputModalities = []agentdv1.Modality{agentdv1.Modality_MODALITY_TEXT}
		if !e.model.TextOnly {
			m.InputModalities = append(m.InputModalities, agentdv1.Modality_MODALITY_IMAGE)
		}
		if ps.cfg.BaseURL != "" {
			m.Metadata, _ = structpb.NewStruct(map[string]any{"base_url": redactURL(ps.cfg.BaseURL)})
		}
		out = append(out, m)
	}
	return out
}

// redactURL drops user info and query, where a careless config might keep a
// key.
func redactURL(u string) string {
	if i := strings.Index(u, "?"); i >= 0 {
		u = u[:i]
	}
	if at := strings.Index(u, "@"); at >= 0 {
		if s := strings.Index(u, "://"); s >= 0 && s < at {
			u = u[:s+3] + u[at+1:]
		}
	}
	return u
}
