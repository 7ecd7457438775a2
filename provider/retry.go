package provider

import (
	"time"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// RetryPolicy says when and how a failed model call is repeated. The zero
// value is usable: it means DefaultRetryPolicy's numbers. The agent loop
// applies it (agentloop.Config.Retry) to every failed answer, whether the
// failure came before any content (an HTTP status) or in the middle of a
// stream (an error event, a stall): the failed answer is kept in the
// transcript and skipped by Replay, so a retry never repeats text the model
// sees.
type RetryPolicy struct {
	// MaxRetries is how many times a call is repeated after the first try
	// (pi: 3). Negative disables retries.
	MaxRetries int
	// BaseDelay is the first wait; the n-th retry waits BaseDelay × 2^(n-1)
	// (pi: 2 s).
	BaseDelay time.Duration
	// MaxDelay caps the wait. A Retry-After larger than MaxDelay is not
	// waited for: the failure is returned instead, as pi does.
	MaxDelay time.Duration
	// Retryable decides whether a failure is worth repeating; defaults to
	// IsRetryable.
	Retryable func(*agentdv1.AssistantMessage) bool
}

// DefaultRetryPolicy is pi's: 3 retries, 2 s doubling, capped at 60 s.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxRetries: 3, BaseDelay: 2 * time.Second, MaxDelay: 60 * time.Second}
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy()
	if p.MaxRetries == 0 {
		p.MaxRetries = d.MaxRetries
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = d.BaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = d.MaxDelay
	}
	if p.Retryable == nil {
		p.Retryable = IsRetryable
	}
	return p
}

// Delay is the wait before retry number attempt (from 1), honouring the
// provider's Retry-After; ok is false when that wait exceeds MaxDelay.
func (p RetryPolicy) Delay(attempt int, retryAfter time.Duration) (d time.Duration, ok bool) {
	p = p.withDefaults()
	if retryAfter > 0 {
		return retryAfter, retryAfter <= p.MaxDelay
	}
	d = p.BaseDelay << (attempt - 1)
	if d > p.MaxDelay || d <= 0 {
		d = p.MaxDelay
	}
	return d, true
}

// Decide says whether a call whose attempt number attempt (from 1) failed
// with the answer failed is made again, and after how long: retryAfter is
// the wait the provider asked for (0 when it did not say). It refuses when
// retries are off or used up, when the failure is not worth repeating
// (IsRetryable), and when the provider asks for a wait beyond MaxDelay.
func (p RetryPolicy) Decide(failed *agentdv1.AssistantMessage, attempt int, retryAfter time.Duration) (time.Duration, bool) {
	p = p.withDefaults()
	if p.MaxRetries < 0 || attempt > p.MaxRetries || !p.Retryable(failed) {
		return 0, false
	}
	return p.Delay(attempt, retryAfter)
}
