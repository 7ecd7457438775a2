// Package openaisdk builds the openai-go client options the OpenAI adapters
// share.
package openaisdk

import (
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/agentd/agentd/provider"
)

// NewClient returns an openai-go client for e with the SDK's own retries
// off: [provider.WithRetry] owns the policy, so every attempt is visible.
// An empty key is sent as "none", which keyless local servers accept and
// the SDK requires.
func NewClient(e provider.Endpoint) openai.Client {
	key := e.APIKey
	if key == "" {
		key = "none"
	}
	opts := []option.RequestOption{option.WithAPIKey(key), option.WithMaxRetries(0)}
	if e.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(e.BaseURL))
	}
	if e.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(e.HTTPClient))
	}
	for k, v := range e.Headers {
		opts = append(opts, option.WithHeader(k, v))
	}
	return openai.NewClient(opts...)
}
