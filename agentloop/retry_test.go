package agentloop_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/faux"
)

// quickRetry is pi's policy with waits short enough for tests.
func quickRetry() agentloop.RetryFunc {
	return provider.RetryPolicy{BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond}.Decide
}

// A failed model call is made again whether it failed before any content
// (an HTTP status) or in the middle of its answer (an error event, a
// stall): the failed answer ends as a message of its own, stays in the run
// and is left out of the next call's context.
func TestRetryFailedModelCalls(t *testing.T) {
	tests := []struct {
		name      string
		replies   []faux.Response
		wantTrace []string
		wantEnd   agentdv1.RunOutcome
		wantCalls int
	}{
		{"failure before content", []faux.Response{faux.Reply(faux.Errored("529 overloaded_error: Overloaded")), faux.Reply(faux.Message(faux.Text("ok")))},
			[]string{"message_start:assistant", "message_end:assistant", "error:provider_retry",
				"message_start:assistant", "text_start", "text_delta*", "text_end", "message_end:assistant", "turn_end:0", "agent_end:COMPLETED"},
			agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED, 2},
		{"failure mid-answer", []faux.Response{faux.Reply(faux.Errored("overloaded_error: Overloaded", faux.Text("half an ans"))), faux.Reply(faux.Message(faux.Text("ok")))},
			[]string{"message_start:assistant", "text_start", "text_delta*", "text_end", "message_end:assistant", "error:provider_retry",
				"message_start:assistant", "text_start", "text_delta*", "text_end", "message_end:assistant", "turn_end:0", "agent_end:COMPLETED"},
			agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED, 2},
		{"not retryable", []faux.Response{faux.Reply(faux.Errored("401 authentication_error: bad key")), faux.Reply(faux.Message(faux.Text("never")))},
			[]string{"message_start:assistant", "message_end:assistant", "turn_end:0", "agent_end:ERROR"},
			agentdv1.RunOutcome_RUN_OUTCOME_ERROR, 1},
		{"retries used up", []faux.Response{faux.Reply(faux.Errored("503 unavailable")), faux.Reply(faux.Errored("503 unavailable")),
			faux.Reply(faux.Errored("503 unavailable")), faux.Reply(faux.Errored("503 unavailable")), faux.Reply(faux.Message(faux.Text("never")))},
			[]string{"message_start:assistant", "message_end:assistant", "error:provider_retry", "message_start:assistant", "message_end:assistant", "error:provider_retry",
				"message_start:assistant", "message_end:assistant", "error:provider_retry", "message_start:assistant", "message_end:assistant", "turn_end:0", "agent_end:ERROR"},
			agentdv1.RunOutcome_RUN_OUTCOME_ERROR, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := faux.New(faux.Options{}, tt.replies...)
			cfg := cfgFor(p)
			cfg.Retry = quickRetry()
			rec := &recorder{}
			msgs, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{}, cfg, rec.sink)
			if err != nil {
				t.Fatal(err)
			}
			equalTrace(t, rec.trace()[4:], tt.wantTrace)
			if got := rec.agentEnds()[0].GetOutcome(); got != tt.wantEnd {
				t.Fatalf("outcome %v, want %v", got, tt.wantEnd)
			}
			if p.Calls() != tt.wantCalls || len(msgs) != 1+tt.wantCalls {
				t.Fatalf("%d model calls and %d messages, want %d calls, every answer kept", p.Calls(), len(msgs), tt.wantCalls)
			}
			// Every retry saw the prompt last, never a failed answer.
			for i, c := range p.Contexts() {
				if m := c.GetMessages(); len(m) != 1 || m[0].GetUser() == nil {
					t.Fatalf("call %d saw %d messages: %v", i+1, len(m), m)
				}
			}
			for _, ev := range rec.all() {
				if e := ev.GetError(); e != nil && !strings.Contains(e.GetMessage(), "; retry ") {
					t.Fatalf("retry event %q does not say a retry is coming", e.GetMessage())
				}
			}
		})
	}
}

// An abort during the wait before a retry ends the call ABORTED, at once.
func TestAbortWhileWaitingToRetry(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := faux.New(faux.Options{}, faux.Reply(faux.Errored("429 rate_limit_error: slow down")), faux.Reply(faux.Message(faux.Text("never"))))
	cfg := cfgFor(p)
	cfg.Retry = func(*agentdv1.AssistantMessage, int, time.Duration) (time.Duration, bool) { return time.Hour, true }
	rec := &recorder{}
	rec.hook = func(ev *agentdv1.AgentEvent) error {
		if ev.GetError().GetStage() == "provider_retry" {
			cancel()
		}
		return nil
	}
	msgs, err := agentloop.Run(ctx, []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{}, cfg, rec.sink)
	if err != nil {
		t.Fatal(err)
	}
	last := msgs[len(msgs)-1].GetAssistant()
	if last.GetStopReason() != agentdv1.StopReason_STOP_REASON_ABORTED || last.GetErrorMessage() != provider.AbortedMessage || p.Calls() != 1 {
		t.Fatalf("last answer %v after %d calls", last, p.Calls())
	}
	if ends := rec.agentEnds(); len(ends) != 1 || ends[0].GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_ABORTED {
		t.Fatalf("agent_end %v", ends)
	}
}

// Continue decides on what the model would see: after a failed answer the
// message before it is last, so Continue makes the call again.
func TestContinueAfterAFailedAnswer(t *testing.T) {
	for _, stop := range []agentdv1.StopReason{agentdv1.StopReason_STOP_REASON_ERROR, agentdv1.StopReason_STOP_REASON_ABORTED} {
		t.Run(stop.String(), func(t *testing.T) {
			failed := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: faux.Stopped(stop, faux.Text("half"))}}
			state := agentloop.State{Messages: []*agentdv1.AgentMessage{userMsg("go"), failed}}
			p := faux.New(faux.Options{}, faux.Reply(faux.Message(faux.Text("whole"))))
			cfg := cfgFor(p)
			if err := agentloop.CheckContinue(context.Background(), state, cfg); err != nil {
				t.Fatalf("CheckContinue: %v", err)
			}
			rec := &recorder{}
			if _, err := agentloop.Continue(context.Background(), state, cfg, rec.sink); err != nil {
				t.Fatal(err)
			}
			if m := p.Contexts()[0].GetMessages(); len(m) != 1 || m[0].GetUser() == nil {
				t.Fatalf("the call saw %v", m)
			}
			if ends := rec.agentEnds(); ends[0].GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
				t.Fatalf("agent_end %v", ends)
			}
		})
	}
}
