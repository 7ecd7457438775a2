package provider_test

import (
	"context"
	"strings"
	"testing"
	"time"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

// scripted is a model call that streams some text, then stalls until its
// context ends, as a server that stops sending does; pauses are the gaps
// before each delta.
func scripted(pauses ...time.Duration) provider.StreamFunc {
	return func(ctx context.Context, m provider.Model, _ *agentdv1.Context, _ provider.Options) provider.Stream {
		return func(yield func(provider.Event) bool) {
			e := provider.NewEmitter(m, yield, nil)
			i := -1
			for _, p := range pauses {
				select {
				case <-time.After(p):
				case <-ctx.Done():
					e.FailOrAbort(ctx, "context canceled", 0)
					return
				}
				if i < 0 {
					i, _ = e.BeginText()
				}
				e.Delta(i, "x")
			}
			if len(pauses) > 0 && pauses[len(pauses)-1] < 0 {
				e.Done(agentdv1.StopReason_STOP_REASON_STOP)
				return
			}
			<-ctx.Done()
			e.FailOrAbort(ctx, "context canceled", 0)
		}
	}
}

func TestTimeouts(t *testing.T) {
	limits := provider.Timeouts{FirstByte: 60 * time.Millisecond, Idle: 80 * time.Millisecond}
	tests := []struct {
		name     string
		pauses   []time.Duration
		wantText string // "" for no content
		wantErr  string
	}{
		{"nothing arrives", nil, "", "the provider sent nothing for 60ms (first-byte timeout)"},
		{"stalls mid-answer", []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}, "xx", "the provider's stream stalled for 80ms (idle timeout)"},
		// Slow in total, but no gap reaches a limit.
		{"slow but alive", []time.Duration{40 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond, -1}, "xxxxx", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream := provider.WithTimeouts(scripted(tt.pauses...), limits)
			var last provider.Event
			for ev := range stream(context.Background(), claude, &agentdv1.Context{}, provider.Options{}) {
				last = ev
			}
			m := last.Message
			var text string
			if len(m.GetContent()) > 0 {
				text = m.GetContent()[0].GetText().GetText()
			}
			if text != tt.wantText {
				t.Fatalf("content %q, want %q kept", text, tt.wantText)
			}
			if tt.wantErr == "" {
				if last.Type != provider.EventDone {
					t.Fatalf("final %v: %v", last.Type, m)
				}
				return
			}
			if last.Type != provider.EventError || m.GetStopReason() != agentdv1.StopReason_STOP_REASON_ERROR ||
				m.GetErrorMessage() != provider.TimedOutPrefix+tt.wantErr {
				t.Fatalf("final %v %v %q, want ERROR %q", last.Type, m.GetStopReason(), m.GetErrorMessage(), tt.wantErr)
			}
			if !provider.IsRetryable(m) {
				t.Fatalf("a timeout must be retryable like a broken connection: %q", m.GetErrorMessage())
			}
		})
	}

	// The caller's own cancellation stays an abort.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	m := provider.Collect(provider.WithTimeouts(scripted(5*time.Millisecond), limits)(ctx, claude, &agentdv1.Context{}, provider.Options{}))
	if m.GetStopReason() != agentdv1.StopReason_STOP_REASON_ABORTED || strings.Contains(m.GetErrorMessage(), "timed out") {
		t.Fatalf("cancelled call = %v %q, want ABORTED", m.GetStopReason(), m.GetErrorMessage())
	}
}
