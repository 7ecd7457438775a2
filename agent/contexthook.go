package agent

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agent/contextpolicy"
	"github.com/agentd/agentd/agent/contextview"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// Context hook bounds; a lifecycle hook (Hook.timeout) has the same.
const (
	// DefaultContextHookTimeout is how long a call waits for SubmitContext
	// (or SubmitHookResult) when the hook sets no timeout.
	DefaultContextHookTimeout = 10 * time.Second
	// MaxContextHookTimeout bounds ContextHook.timeout and Hook.timeout.
	MaxContextHookTimeout = 10 * time.Minute
)

// askHook emits context_requested and waits for SubmitContext; on a
// timeout, an abort or a bad answer it returns items unchanged and
// reports why.
func (rc *runContext) askHook(ctx context.Context, hook *agentdv1.ContextHook, items []contextview.Item) []contextview.Item {
	r := rc.run
	timeout := durationOr(hook.GetTimeout(), DefaultContextHookTimeout)
	rc.mu.Lock()
	rc.hookRequests++
	id := fmt.Sprintf("%s-ctx-%d", r.id, rc.hookRequests)
	rc.mu.Unlock()
	est := contextview.EstimateItems(items)
	sizes := contextview.Sizes(items)
	req := &agentdv1.ContextRequested{RequestId: id, TotalTokens: est.Total, Deadline: timestamppb.New(r.a.opts.Now().Add(timeout))}
	for i, it := range items {
		ci := &agentdv1.ContextItem{EntryId: it.EntryID, Kind: contextpolicy.Kind(it.Message), Tokens: sizes[i]}
		if hook.GetIncludeMessages() {
			ci.Message = it.Message
		}
		req.Items = append(req.Items, ci)
	}
	c := r.pending.open(id, waitContext)
	c.offered = items
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	r.publish(&agentdv1.AgentEvent{Time: timestamppb.New(r.a.opts.Now()), Event: &agentdv1.AgentEvent_ContextRequested{ContextRequested: req}})
	select {
	case a := <-c.answer:
		ans := a.(contextAnswer)
		if ans.err != nil {
			r.report("context_hook", fmt.Errorf("the context hook's answer was refused (%v); the call goes ahead with the policies' context", ans.err))
			return items
		}
		return ans.items
	case <-timer.C:
		r.pending.stop(c, "timed out")
		r.report("context_hook", fmt.Errorf("the context hook did not answer %s within %v; the call goes ahead with the policies' context", id, timeout))
		return items
	case <-ctx.Done():
		r.pending.stop(c, "abandoned when the run was aborted")
		return items
	}
}

// contextAnswer is what SubmitContext delivers to a waiting hook: the
// items, or why the answer was refused.
type contextAnswer struct {
	items []contextview.Item
	err   error
}

// answerContext delivers a SubmitContext answer to the run's waiting
// context request, or refuses it (and lets the call go ahead with the
// policies' context) when it names an entry the request did not offer.
func (r *Run) answerContext(requestID string, sel []*agentdv1.ContextSelection) error {
	sessionID := r.sessionID
	offered, err := r.pending.offered(sessionID, requestID)
	if err != nil {
		return err
	}
	byID := map[string]contextview.Item{}
	for _, it := range offered {
		byID[it.EntryID] = it
	}
	used := map[string]bool{}
	var items []contextview.Item
	var bad error
	for i, s := range sel {
		if m := s.GetMessage(); m != nil {
			items = append(items, contextview.NewItem("", m))
			continue
		}
		it, ok := byID[s.GetEntryId()]
		switch {
		case !ok:
			bad = invalid(fmt.Sprintf("items[%d].entry_id", i), "%q is not an entry of context request %q; keep only entry ids its context_requested event listed", truncate(s.GetEntryId(), 70), requestID)
		case used[s.GetEntryId()]:
			bad = invalid(fmt.Sprintf("items[%d].entry_id", i), "%q is named twice; keep each entry at most once", truncate(s.GetEntryId(), 70))
		}
		if bad != nil {
			break
		}
		used[s.GetEntryId()] = true
		items = append(items, it)
	}
	if bad == nil && len(items) == 0 {
		bad = invalid("items", "at least one item is required")
	}
	if bad != nil {
		if err := r.pending.deliver(sessionID, requestID, waitContext, contextAnswer{err: bad}); err != nil {
			return err
		}
		return bad
	}
	return r.pending.deliver(sessionID, requestID, waitContext, contextAnswer{items: items})
}
