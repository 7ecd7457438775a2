package provider

import (
	"context"
	"time"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// RetryPolicy says when and how a failed model call is repeated. The zero
// value is usable: it means DefaultRetryPolicy's numbers.
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
	// Sleep waits d or until ctx ends; tests pass a fake clock. Defaults to a
	// timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Retryable decides whether a failure is worth repeating; defaults to
	// IsRetryable.
	Retryable func(*agentdv1.AssistantMessage) bool
	// OnRetry is told of every failed attempt that will be retried, before
	// the wait: attempt counts from 1, delay is the wait ahead, failed is the
	// complete ERROR message of the attempt. The service stores failed in the
	// transcript (replay skips ERROR messages, so the model never sees it)
	// and tells clients a retry is coming.
	OnRetry func(attempt int, delay time.Duration, failed *agentdv1.AssistantMessage)
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
	if p.Sleep == nil {
		p.Sleep = sleepCtx
	}
	if p.Retryable == nil {
		p.Retryable = IsRetryable
	}
	return p
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
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

// WithRetry wraps next so that a retryable failure that happened before any
// content reached the consumer is repeated after a backoff. The consumer sees
// one coherent stream: the start event is held back until the first content
// event or the final outcome, so a retried attempt leaves no trace in the
// stream; it is reported through OnRetry instead. A failure after content
// has streamed is returned as is (repeating it would duplicate text the
// client already showed), and so is any failure once retries run out or ctx
// ends.
func WithRetry(next StreamFunc, p RetryPolicy) StreamFunc {
	p = p.withDefaults()
	return func(ctx context.Context, model Model, c *agentdv1.Context, opts Options) Stream {
		return func(yield func(Event) bool) {
			for attempt := 0; ; attempt++ {
				failed, retryAfter, done := forwardAttempt(next(ctx, model, c, opts), yield)
				if done {
					return
				}
				if attempt >= p.MaxRetries || p.MaxRetries < 0 || !p.Retryable(failed) || ctx.Err() != nil {
					yield(Event{Type: EventError, Message: failed, RetryAfter: retryAfter})
					return
				}
				delay, ok := p.Delay(attempt+1, retryAfter)
				if !ok {
					yield(Event{Type: EventError, Message: failed, RetryAfter: retryAfter})
					return
				}
				if p.OnRetry != nil {
					p.OnRetry(attempt+1, delay, failed)
				}
				if err := p.Sleep(ctx, delay); err != nil {
					m := &agentdv1.AssistantMessage{
						Api: failed.GetApi(), Provider: failed.GetProvider(), Model: failed.GetModel(),
						Usage:      &agentdv1.Usage{Cost: &agentdv1.Cost{}},
						StopReason: agentdv1.StopReason_STOP_REASON_ABORTED, ErrorMessage: AbortedMessage,
						Timestamp: failed.GetTimestamp(),
					}
					yield(Event{Type: EventError, Message: m})
					return
				}
			}
		}
	}
}

// forwardAttempt relays one attempt. It returns done=true when the attempt
// reached the consumer (content streamed, success, or the consumer stopped);
// otherwise the attempt failed before any content and failed is its final
// message, not yet shown to anyone.
func forwardAttempt(s Stream, yield func(Event) bool) (failed *agentdv1.AssistantMessage, retryAfter time.Duration, done bool) {
	var held *Event
	passing := false
	for ev := range s {
		if passing {
			if !yield(ev) {
				return nil, 0, true
			}
			continue
		}
		switch ev.Type {
		case EventStart:
			e := ev
			held = &e
			continue
		case EventError:
			if ev.Message.GetStopReason() == agentdv1.StopReason_STOP_REASON_ERROR {
				return ev.Message, ev.RetryAfter, false
			}
		}
		passing = true
		if held != nil && !yield(*held) {
			return nil, 0, true
		}
		if !yield(ev) {
			return nil, 0, true
		}
	}
	if !passing {
		// The stream ended without a terminal event: let the loop see what
		// little there was and report it the way it does.
		if held != nil {
			yield(*held)
		}
	}
	return nil, 0, true
}
