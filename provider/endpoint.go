package provider

import (
	"net/http"
	"time"
)

// Endpoint is how an HTTP adapter reaches its provider. Every adapter's
// Config is, or embeds, one.
type Endpoint struct {
	// APIKey authenticates every request. It is never logged, and adapters
	// redact it from error messages.
	APIKey string
	// BaseURL overrides the provider's public endpoint (tests, proxies,
	// OpenAI-compatible servers); empty means the provider's own.
	BaseURL string
	// HTTPClient overrides the HTTP client.
	HTTPClient *http.Client
	// Headers are added to every request.
	Headers map[string]string
	// Now stamps messages; nil means time.Now.
	Now func() time.Time
}

// Clock returns Now, or time.Now when Now is nil.
func (e Endpoint) Clock() func() time.Time {
	if e.Now == nil {
		return time.Now
	}
	return e.Now
}
