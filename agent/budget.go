package agent

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// checkBudget checks config.budget's limits.
func checkBudget(b *agentdv1.Budget) error {
	if b == nil {
		return nil
	}
	if c := b.GetMaxCostUsd(); c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
		return invalid("config.budget.max_cost_usd", "%v is not a cost: give a positive number of US dollars, or 0 for no limit", c)
	}
	if b.GetMaxTokens() < 0 {
		return invalid("config.budget.max_tokens", "%d is negative: give a positive number of tokens, or 0 for no limit", b.GetMaxTokens())
	}
	if d := b.GetMaxRunTime(); d != nil && (d.CheckValid() != nil || d.AsDuration() < 0) {
		return invalid("config.budget.max_run_time", "%v is not a positive duration (0 for no limit)", d)
	}
	return nil
}

// budget enforces a session's Budget on one run. The cost and token
// limits count the session's spending before the run (from the store)
// and the run's answers as they are stored.
//
// A subagent's spending also counts against the budgets of the sessions
// above it: parent is the budget of the session that spawned this one
// (its live run's, or one read from the store), and a session's spending
// is that of its whole tree of subagents (treeSpend).
type budget struct {
	limits *agentdv1.Budget
	spent  persistence.Spend // the session's tree's, up to the last stored answer
	// sessionID is the session whose budget this is; run is its run when
	// the budget is a live run's (nil for one read from the store).
	sessionID string
	run       *Run
	parent    *budget

	mu       sync.Mutex
	exceeded string // the limit reached, as the client is told
	timer    *time.Timer
}

// openBudget reads what the session spent and refuses a run that could not
// make a single model call within the cost or token limit.
func (a *Agent) openBudget(ctx context.Context, sessionID string, limits *agentdv1.Budget) (*budget, error) {
	b := &budget{limits: limits}
	if limits.GetMaxCostUsd() == 0 && limits.GetMaxTokens() == 0 {
		return b, nil
	}
	spent, err := a.treeSpend(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	b.spent = spent
	if reason := b.overSpent(); reason != "" {
		e := refuse(agentdv1.ErrorReason_ERROR_REASON_BUDGET_EXCEEDED, "session %q: %s; raise config.budget with UpdateSession to go on", sessionID, reason).
			with("session_id", sessionID)
		e.QuotaSubject = "session:" + sessionID
		return nil, e
	}
	return b, nil
}

// overSpent names the cost or token limit the spending reached, if any.
func (b *budget) overSpent() string {
	if max := b.limits.GetMaxCostUsd(); max > 0 && b.spent.CostUSD >= max {
		return fmt.Sprintf("the session has spent $%.4f, its budget's max_cost_usd is $%.4f", b.spent.CostUSD, max)
	}
	if max := b.limits.GetMaxTokens(); max > 0 && b.spent.Tokens >= max {
		return fmt.Sprintf("the session has used %d tokens, its budget's max_tokens is %d", b.spent.Tokens, max)
	}
	return ""
}

// start arms the run's time limit.
func (b *budget) start(r *Run) {
	d := b.limits.GetMaxRunTime().AsDuration()
	if d <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.timer = time.AfterFunc(d, func() {
		b.exceed(r, fmt.Sprintf("the run lasted its budget's max_run_time of %s", d))
	})
}

// stop disarms the time limit.
func (b *budget) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timer != nil {
		b.timer.Stop()
	}
}

// answered counts a stored message; an answer that reaches the cost or
// token limit ends the run: its tool calls, if any, do not run.
func (b *budget) answered(r *Run, e *agentdv1.Entry) {
	s, ok := persistence.EntrySpend(e)
	if !ok {
		return
	}
	b.mu.Lock()
	b.spent = b.spent.Add(s)
	reason := b.overSpent()
	b.mu.Unlock()
	if reason != "" {
		b.exceed(r, reason)
	}
	for p := b.parent; p != nil; p = p.parent {
		p.mu.Lock()
		p.spent = p.spent.Add(s)
		reason := p.overSpent()
		p.mu.Unlock()
		if reason == "" {
			continue
		}
		// The subagent ends first, with the reason of its own; the
		// parent's run, when it is live, ends as well, and its abort
		// reaches its other children.
		b.exceed(r, fmt.Sprintf("%s, counting its subagents (session %q spawned this one)", reason, p.sessionID))
		if p.run != nil {
			p.exceed(p.run, reason+", counting its subagents")
		}
	}
}

// turnEnded reports whether the run must stop after this turn because it
// took its budget's max_turns_per_run; a turn after which the run would
// end anyway is no excess.
func (b *budget) turnEnded(r *Run, turn uint32, toolResults int) bool {
	max := b.limits.GetMaxTurnsPerRun()
	if max == 0 || turn < max {
		return false
	}
	if toolResults > 0 {
		b.record(fmt.Sprintf("the run took its budget's max_turns_per_run of %d turns", max))
	}
	return true
}

// exceed records the limit reached and aborts the run; the first limit
// reached is the one reported.
func (b *budget) exceed(r *Run, reason string) {
	if b.record(reason) {
		r.abort(reason)
	}
}

func (b *budget) record(reason string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.exceeded != "" {
		return false
	}
	b.exceeded = reason
	return true
}

// end rewrites the run's agent_end when a limit ended it, and returns the
// error event that precedes it (nil otherwise).
func (b *budget) end(end *agentdv1.AgentEnd, now time.Time) *agentdv1.AgentEvent {
	b.mu.Lock()
	reason := b.exceeded
	b.mu.Unlock()
	if reason == "" {
		return nil
	}
	end.Outcome = agentdv1.RunOutcome_RUN_OUTCOME_BUDGET_EXCEEDED
	end.ErrorMessage = "budget exceeded: " + reason
	return &agentdv1.AgentEvent{Time: timestamppb.New(now), Event: &agentdv1.AgentEvent_Error{Error: &agentdv1.AgentError{
		Message: end.ErrorMessage, Stage: "budget", Fatal: true}}}
}
