package provider

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Timeouts bound how long a model call may stay silent. A call that
// exceeds one ends with an ERROR answer whose message starts with
// TimedOutPrefix and keeps what had streamed; the retry policy treats it
// like a broken connection. Zero fields take DefaultTimeouts' values.
type Timeouts struct {
	// FirstByte is the longest wait from the call to its first event,
	// which for the HTTP APIs comes with the response headers.
	FirstByte time.Duration
	// Idle is the longest gap between two events of a stream that has
	// started.
	Idle time.Duration
}

// DefaultTimeouts suit slow reasoning models, which may think for minutes
// before their first visible token but whose servers answer the request,
// and keep a stream alive with pings or reasoning events, much sooner:
// two minutes to the first event, four between events.
func DefaultTimeouts() Timeouts {
	return Timeouts{FirstByte: 2 * time.Minute, Idle: 4 * time.Minute}
}

func (t Timeouts) withDefaults() Timeouts {
	d := DefaultTimeouts()
	if t.FirstByte <= 0 {
		t.FirstByte = d.FirstByte
	}
	if t.Idle <= 0 {
		t.Idle = d.Idle
	}
	return t
}

// errTimedOut is the cause a timed-out call's context is cancelled with.
var errTimedOut = errors.New("model call timed out")

// WithTimeouts wraps next so that a call that sends nothing for
// t.FirstByte, or whose stream stalls for t.Idle, is cancelled and ends
// with an ERROR answer saying which limit it hit. The caller's own
// cancellation still ends the call as ABORTED.
func WithTimeouts(next StreamFunc, t Timeouts) StreamFunc {
	t = t.withDefaults()
	return func(ctx context.Context, model Model, c *agentdv1.Context, opts Options) Stream {
		return func(yield func(Event) bool) {
			callCtx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			start := time.Now()
			// lastEvent is the time of the latest event (UnixNano), 0
			// before the first; the watchdog reads it, so the stream pays
			// one atomic store per event and no timer reset.
			var lastEvent atomic.Int64
			var timedOut atomic.Pointer[string]
			stop := make(chan struct{})
			watchdog := make(chan struct{})
			go func() {
				defer close(watchdog)
				timer := time.NewTimer(t.FirstByte)
				defer timer.Stop()
				for {
					select {
					case <-stop:
						return
					case <-timer.C:
					}
					var wait time.Duration
					var msg string
					if last := lastEvent.Load(); last == 0 {
						wait = t.FirstByte - time.Since(start)
						msg = fmt.Sprintf("%sthe provider sent nothing for %v (first-byte timeout)", TimedOutPrefix, t.FirstByte)
					} else {
						wait = t.Idle - time.Since(time.Unix(0, last))
						msg = fmt.Sprintf("%sthe provider's stream stalled for %v (idle timeout)", TimedOutPrefix, t.Idle)
					}
					if wait > 0 {
						timer.Reset(wait)
						continue
					}
					timedOut.Store(&msg)
					cancel(errTimedOut)
					return
				}
			}()
			defer func() {
				close(stop)
				<-watchdog
			}()
			for ev := range next(callCtx, model, c, opts) {
				lastEvent.Store(time.Now().UnixNano())
				if msg := timedOut.Load(); msg != nil && ctx.Err() == nil && ev.Type == EventError {
					// The adapter saw a cancelled context and ended the
					// call ABORTED; it was a timeout, not the caller.
					m := proto.CloneOf(ev.Message)
					if m == nil {
						m = &agentdv1.AssistantMessage{Api: model.API, Provider: model.Provider, Model: model.ID, Usage: &agentdv1.Usage{Cost: &agentdv1.Cost{}}}
					}
					m.StopReason, m.ErrorMessage = agentdv1.StopReason_STOP_REASON_ERROR, *msg
					ev = Event{Type: EventError, Message: m}
				}
				if !yield(ev) {
					return
				}
			}
		}
	}
}
