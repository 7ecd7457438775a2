package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/provider/faux"
)

// costing is an answer that states its usage.
func costing(m *agentdv1.AssistantMessage, tokens int64, cost float64) *agentdv1.AssistantMessage {
	m.Usage = &agentdv1.Usage{TotalTokens: tokens, Cost: &agentdv1.Cost{Total: cost}}
	return m
}

// noop is a server tool that answers at once.
var noop = agentloop.FuncTool{
	Def: &agentdv1.Tool{Name: "noop", Description: "does nothing", Parameters: &structpb.Struct{Fields: map[string]*structpb.Value{"type": structpb.NewStringValue("object")}}},
	Fn: func(context.Context, agentloop.Call) (agentloop.Result, error) {
		return agentloop.Result{Content: []*agentdv1.ContentBlock{faux.Text("done")}}, nil
	},
}

// A run that reaches a limit of its session's budget ends with
// BUDGET_EXCEEDED and an error event naming the limit, leaves a transcript
// Continue accepts once the budget is raised, and a session over its cost
// or token limit refuses the next Prompt without storing it.
func TestBudgets(t *testing.T) {
	call := func(id string) *agentdv1.AssistantMessage { return faux.Message(faux.ToolCall(id, "noop", nil)) }
	tests := []struct {
		name     string
		budget   *agentdv1.Budget
		answers  []*agentdv1.AssistantMessage
		slow     bool
		says     string
		raise    *agentdv1.Budget
		refusals bool // a Prompt after the run is refused
	}{
		{"cost", &agentdv1.Budget{MaxCostUsd: 1},
			[]*agentdv1.AssistantMessage{costing(call("a"), 10, 0.6), costing(call("b"), 10, 0.6), costing(text("after"), 1, 0.1)},
			false, "the session has spent $1.2000, its budget's max_cost_usd is $1.0000", &agentdv1.Budget{MaxCostUsd: 5}, true},
		{"tokens", &agentdv1.Budget{MaxTokens: 100},
			[]*agentdv1.AssistantMessage{costing(call("a"), 60, 0), costing(call("b"), 60, 0), costing(text("after"), 1, 0)},
			false, "the session has used 120 tokens, its budget's max_tokens is 100", &agentdv1.Budget{MaxTokens: 1000}, true},
		{"turns", &agentdv1.Budget{MaxTurnsPerRun: 2},
			[]*agentdv1.AssistantMessage{call("a"), call("b"), text("after")},
			false, "the run took its budget's max_turns_per_run of 2 turns", &agentdv1.Budget{MaxTurnsPerRun: 2}, false},
		{"wall time", &agentdv1.Budget{MaxRunTime: durationpb.New(300 * time.Millisecond)},
			[]*agentdv1.AssistantMessage{text(strings.Repeat("word ", 400)), text("after")},
			true, "the run lasted its budget's max_run_time of 300ms", &agentdv1.Budget{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, agent.Options{Tools: []agentloop.Tool{noop}})
			cfg := script(tc.answers...)
			cfg.Tools = []*agentdv1.Tool{{Name: "noop", Approval: agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW}}
			cfg.Budget = tc.budget
			if tc.slow {
				cfg.Faux.TokensPerSecond = 50
			}
			id := h.session(cfg)
			_, evs := h.prompt(id, "go")
			got := decode(t, evs)
			end := got[len(got)-1].GetAgentEnd()
			errEv := got[len(got)-2].GetError()
			if end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_BUDGET_EXCEEDED || !strings.Contains(end.GetErrorMessage(), tc.says) {
				t.Fatalf("agent_end %v, want BUDGET_EXCEEDED saying %q (%s)", end, tc.says, kinds(got))
			}
			if errEv.GetStage() != "budget" || !errEv.GetFatal() || errEv.GetMessage() != end.GetErrorMessage() {
				t.Errorf("event before agent_end: %v, want a fatal budget error naming the limit", got[len(got)-2])
			}
			run, err := h.store.GetRun(context.Background(), got[0].GetRunId())
			if err != nil || run.Outcome != agentdv1.RunOutcome_RUN_OUTCOME_BUDGET_EXCEEDED {
				t.Errorf("stored run: %+v, %v", run, err)
			}
			path, _ := h.store.Path(context.Background(), id)
			last := path[len(path)-1].GetMessage()
			if tc.slow && last.GetAssistant().GetStopReason() != agentdv1.StopReason_STOP_REASON_ABORTED {
				t.Errorf("the answer cut by the time limit: %v, want it stored as ABORTED", last)
			}
			if tc.refusals {
				before := len(path)
				_, err := h.a.Start(context.Background(), agent.StartRequest{SessionID: id, Prompt: user("more")})
				wantKind(t, err, agent.ErrLimit, "raise config.budget")
				if after, _ := h.store.Path(context.Background(), id); len(after) != before {
					t.Errorf("a refused Prompt stored %d entries", len(after)-before)
				}
			}
			cfg.Budget = tc.raise
			cfg.Faux.TokensPerSecond = 0
			if _, _, err := h.a.UpdateSession(context.Background(), id, persistence.SessionUpdate{Config: cfg}); err != nil {
				t.Fatal(err)
			}
			runID, err := h.a.Start(context.Background(), agent.StartRequest{SessionID: id})
			if err != nil {
				t.Fatalf("Continue after raising the budget: %v", err)
			}
			evs, err = h.follow(id, runID, 0)
			if err != nil {
				t.Fatal(err)
			}
			got = decode(t, evs)
			if end := got[len(got)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
				t.Errorf("Continue ended %v (%s)", end, kinds(got))
			}
		})
	}
}

func TestBudgetChecks(t *testing.T) {
	h := newHarness(t, agent.Options{})
	for field, b := range map[string]*agentdv1.Budget{
		"config.budget.max_cost_usd": {MaxCostUsd: -1},
		"config.budget.max_tokens":   {MaxTokens: -5},
		"config.budget.max_run_time": {MaxRunTime: durationpb.New(-time.Second)},
	} {
		err := h.a.CheckConfig("", &agentdv1.SessionConfig{Budget: b})
		if fe, ok := err.(*agent.FieldError); !ok || fe.Field != field {
			t.Errorf("%v: got %v, want a field error on %s", b, err, field)
		}
	}
}
