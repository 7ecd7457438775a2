package agent

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agent/contextview"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/replicapb"
)

// Lifecycle hook bounds (SessionConfig.hooks). A hook's timeout has the
// context hook's default and bound, DefaultContextHookTimeout and
// MaxContextHookTimeout: both are a client answering over the wire.
const (
	// MaxHooks bounds SessionConfig.hooks.
	MaxHooks = 32
	// MaxHookContinuations bounds Hook.max_continuations.
	MaxHookContinuations = 16
)

// RedactedByHookText is what the model sees of a tool result that a
// POST_TOOL_USE hook redacted (or that a hook's on_timeout DENY hid).
const RedactedByHookText = "[redacted by hook]"

// hookVerdicts are the answers a hook of ev accepts, in the order the
// proto lists them; nil for no event.
func hookVerdicts(ev agentdv1.HookEvent) []agentdv1.HookVerdict {
	const (
		allow  = agentdv1.HookVerdict_HOOK_VERDICT_ALLOW
		deny   = agentdv1.HookVerdict_HOOK_VERDICT_DENY
		modify = agentdv1.HookVerdict_HOOK_VERDICT_MODIFY
		redact = agentdv1.HookVerdict_HOOK_VERDICT_REDACT
	)
	switch ev {
	case agentdv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE, agentdv1.HookEvent_HOOK_EVENT_USER_PROMPT, agentdv1.HookEvent_HOOK_EVENT_PRE_COMPACT:
		return []agentdv1.HookVerdict{allow, deny, modify}
	case agentdv1.HookEvent_HOOK_EVENT_POST_TOOL_USE:
		return []agentdv1.HookVerdict{allow, modify, redact}
	case agentdv1.HookEvent_HOOK_EVENT_STOP:
		return []agentdv1.HookVerdict{allow, modify}
	}
	return nil
}

// checkHooks checks SessionConfig.hooks, naming the field of each refusal
// ("config.hooks[2].tool_pattern").
func checkHooks(hooks []*agentdv1.Hook) error {
	if len(hooks) > MaxHooks {
		return invalid("config.hooks", "%d hooks exceed the limit of %d", len(hooks), MaxHooks)
	}
	for i, h := range hooks {
		f := fmt.Sprintf("config.hooks[%d]", i)
		ev := h.GetEvent()
		if hookVerdicts(ev) == nil {
			return invalid(f+".event", "required: one of HOOK_EVENT_PRE_TOOL_USE, POST_TOOL_USE, USER_PROMPT, STOP or PRE_COMPACT")
		}
		if p := h.GetToolPattern(); p != "" {
			if !toolEvent(ev) {
				return invalid(f+".tool_pattern", "applies only to PRE_TOOL_USE and POST_TOOL_USE hooks, not %s", ev)
			}
			if _, err := path.Match(p, ""); err != nil {
				return invalid(f+".tool_pattern", "%q is not a glob of Go's path.Match syntax: %v", truncate(p, 70), err)
			}
		}
		if d := h.GetTimeout(); d != nil {
			if err := d.CheckValid(); err != nil {
				return invalid(f+".timeout", "%v", err)
			}
			if v := d.AsDuration(); v <= 0 || v > MaxContextHookTimeout {
				return invalid(f+".timeout", "%v is out of range (above 0, at most %v)", v, MaxContextHookTimeout)
			}
		}
		switch h.GetOnTimeout() {
		case agentdv1.HookTimeoutAction_HOOK_TIMEOUT_ACTION_UNSPECIFIED, agentdv1.HookTimeoutAction_HOOK_TIMEOUT_ACTION_PROCEED,
			agentdv1.HookTimeoutAction_HOOK_TIMEOUT_ACTION_DENY:
		default:
			return invalid(f+".on_timeout", "%d is not a HookTimeoutAction (PROCEED or DENY)", h.GetOnTimeout())
		}
		if len(h.GetName()) > MaxNameBytes {
			return invalid(f+".name", "%d bytes exceed the limit of %d", len(h.GetName()), MaxNameBytes)
		}
		if n := h.GetMaxContinuations(); n != 0 {
			if ev != agentdv1.HookEvent_HOOK_EVENT_STOP {
				return invalid(f+".max_continuations", "applies only to STOP hooks, not %s", ev)
			}
			if n > MaxHookContinuations {
				return invalid(f+".max_continuations", "%d exceeds the limit of %d", n, MaxHookContinuations)
			}
		}
	}
	return nil
}

func toolEvent(ev agentdv1.HookEvent) bool {
	return ev == agentdv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE || ev == agentdv1.HookEvent_HOOK_EVENT_POST_TOOL_USE
}

// hookName is what hook_requested and HookNotice call the hook.
func hookName(i int, h *agentdv1.Hook) string {
	if h.GetName() != "" {
		return h.GetName()
	}
	return fmt.Sprintf("hooks[%d]", i)
}

// eventName is an event as text shows it ("pre_tool_use").
func eventName(ev agentdv1.HookEvent) string {
	return strings.ToLower(strings.TrimPrefix(ev.String(), "HOOK_EVENT_"))
}

// hookSet asks a session's lifecycle hooks during one run (or one manual
// compaction): each matching hook in turn emits hook_requested and waits
// for SubmitHookResult (answer), its timeout or the end of the run, like
// the context hook (askHook). The first decision other than ALLOW is final
// for that point.
type hookSet struct {
	hooks []*agentdv1.Hook
	// prefix starts each request id: "<prefix>-hook-<n>".
	prefix  string
	pending *pendingCalls
	publish func(*agentdv1.AgentEvent)
	report  func(stage string, err error)
	now     func() time.Time
	// tools validates the arguments of a PRE_TOOL_USE MODIFY; nil outside
	// a run.
	tools *agentloop.ToolSet

	mu    sync.Mutex
	asked int
	// continued counts the continuations of each STOP hook, by index.
	continued map[int]uint32
	// added is the content USER_PROMPT hooks added to this run's model
	// calls, by the request id of the notice that records it.
	added map[string][]*agentdv1.ContentBlock
}

// newHookSet returns the hooks of a run or compaction, or nil when the
// session declares none.
func newHookSet(hooks []*agentdv1.Hook, prefix string, pending *pendingCalls, publish func(*agentdv1.AgentEvent),
	report func(string, error), now func() time.Time, tools *agentloop.ToolSet) *hookSet {
	if len(hooks) == 0 {
		return nil
	}
	return &hookSet{hooks: hooks, prefix: prefix, pending: pending, publish: publish, report: report, now: now, tools: tools,
		continued: map[int]uint32{}, added: map[string][]*agentdv1.ContentBlock{}}
}

// has reports whether any hook is asked at ev.
func (hs *hookSet) has(ev agentdv1.HookEvent) bool {
	if hs == nil {
		return false
	}
	return slices.ContainsFunc(hs.hooks, func(h *agentdv1.Hook) bool { return h.GetEvent() == ev })
}

// hookOutcome is how one hook decided.
type hookOutcome struct {
	index int
	hook  *agentdv1.Hook
	req   *agentdv1.HookRequested
	// ans is the answer; nil when nobody answered.
	ans      *agentdv1.SubmitHookResultRequest
	timedOut bool
	// aborted: the run ended while the hook waited.
	aborted bool
	timeout time.Duration
}

// verdict is the decision: the answer's, or the on_timeout rule's.
func (o hookOutcome) verdict() agentdv1.HookVerdict {
	switch {
	case o.ans != nil:
		return o.ans.GetVerdict()
	case o.timedOut && o.hook.GetOnTimeout() == agentdv1.HookTimeoutAction_HOOK_TIMEOUT_ACTION_DENY:
		return agentdv1.HookVerdict_HOOK_VERDICT_DENY
	case o.timedOut:
		return agentdv1.HookVerdict_HOOK_VERDICT_ALLOW
	}
	return agentdv1.HookVerdict_HOOK_VERDICT_UNSPECIFIED
}

// ask asks the hooks of ev that apply (to toolName, for the tool events)
// in declared order, each with a copy of base completed by per (which may
// also skip a hook by returning false). It returns the first outcome
// other than ALLOW (decided), and the timeouts that proceeded before it,
// which the caller records.
func (hs *hookSet) ask(ctx context.Context, ev agentdv1.HookEvent, toolName string, base *agentdv1.HookRequested,
	per func(i int, req *agentdv1.HookRequested) bool) (final hookOutcome, decided bool, proceeded []hookOutcome) {
	if hs == nil {
		return hookOutcome{}, false, nil
	}
	for i, h := range hs.hooks {
		if h.GetEvent() != ev {
			continue
		}
		if p := h.GetToolPattern(); toolEvent(ev) && p != "" {
			if ok, _ := path.Match(p, toolName); !ok {
				continue
			}
		}
		req := proto.CloneOf(base)
		if per != nil && !per(i, req) {
			continue
		}
		o := hs.askOne(ctx, i, h, req)
		switch {
		case o.aborted:
			return o, true, proceeded
		case o.verdict() == agentdv1.HookVerdict_HOOK_VERDICT_ALLOW:
			if o.timedOut {
				proceeded = append(proceeded, o)
			}
		default:
			return o, true, proceeded
		}
	}
	return hookOutcome{}, false, proceeded
}

// askOne emits hook_requested for hook i and waits for its answer.
func (hs *hookSet) askOne(ctx context.Context, i int, h *agentdv1.Hook, req *agentdv1.HookRequested) hookOutcome {
	timeout := durationOr(h.GetTimeout(), DefaultContextHookTimeout)
	hs.mu.Lock()
	hs.asked++
	id := fmt.Sprintf("%s-hook-%d", hs.prefix, hs.asked)
	hs.mu.Unlock()
	req.RequestId, req.Event, req.Hook, req.HookIndex = id, h.GetEvent(), hookName(i, h), uint32(i)
	req.Deadline = timestamppb.New(hs.now().Add(timeout))
	o := hookOutcome{index: i, hook: h, req: req, timeout: timeout}
	c := hs.pending.open(id, waitHook)
	c.hook = req
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	hs.publish(&agentdv1.AgentEvent{Time: timestamppb.New(hs.now()), Event: &agentdv1.AgentEvent_HookRequested{HookRequested: req}})
	select {
	case a := <-c.answer:
		o.ans = a.(*agentdv1.SubmitHookResultRequest)
	case <-timer.C:
		hs.pending.stop(c, "timed out")
		o.timedOut = true
		then := "the run goes on as if it had answered ALLOW (on_timeout PROCEED)"
		if o.verdict() == agentdv1.HookVerdict_HOOK_VERDICT_DENY {
			then = "the run goes on as if it had answered DENY (on_timeout DENY)"
		}
		hs.report("hook", fmt.Errorf("the %s hook %q did not answer %s within %v; %s", eventName(h.GetEvent()), req.Hook, id, timeout, then))
	case <-ctx.Done():
		hs.pending.stop(c, "abandoned when the run was aborted")
		o.aborted = true
	}
	return o
}

// notice is the HookNotice that records o, with action unless nobody
// answered (TIMED_OUT).
func (hs *hookSet) notice(o hookOutcome, action agentdv1.HookAction) *agentdv1.AgentMessage {
	n := &agentdv1.HookNotice{
		RequestId: o.req.GetRequestId(), Event: o.req.GetEvent(), Hook: o.req.GetHook(), Action: action,
		ToolCallId: o.req.GetToolCall().GetId(), ToolName: o.req.GetToolCall().GetName(),
		Timestamp: timestamppb.New(hs.now()), VisibleInUi: true,
	}
	if o.ans == nil {
		n.Action, n.DecidedBy = agentdv1.HookAction_HOOK_ACTION_TIMED_OUT, "timeout"
		rule := "PROCEED"
		if o.verdict() == agentdv1.HookVerdict_HOOK_VERDICT_DENY {
			rule = "DENY"
		}
		n.Reason = fmt.Sprintf("nobody answered within %v; its on_timeout rule %s decided", o.timeout, rule)
	} else {
		n.Reason, n.DecidedBy, n.IncludeInModelContext = o.ans.GetReason(), o.ans.GetDecidedBy(), o.ans.GetIncludeInModelContext()
		if n.DecidedBy == "" {
			n.DecidedBy = "client"
		}
	}
	return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_HookNotice{HookNotice: n}}
}

// record records the notices of outcomes through the loop's scope.
func record(run agentloop.Scope, msgs ...*agentdv1.AgentMessage) error {
	for _, m := range msgs {
		if err := run.Record(m); err != nil {
			return err
		}
	}
	return nil
}

func (hs *hookSet) timeoutNotices(proceeded []hookOutcome) []*agentdv1.AgentMessage {
	out := make([]*agentdv1.AgentMessage, 0, len(proceeded))
	for _, o := range proceeded {
		out = append(out, hs.notice(o, agentdv1.HookAction_HOOK_ACTION_TIMED_OUT))
	}
	return out
}

// beforeToolCall asks the PRE_TOOL_USE hooks before next (the approval
// gate), which gets the arguments a hook replaced; the loop validates the
// replacement again.
func (hs *hookSet) beforeToolCall(next agentloop.BeforeToolCallFunc) agentloop.BeforeToolCallFunc {
	return func(ctx context.Context, info agentloop.ToolCallInfo) (agentloop.BeforeDecision, error) {
		call := info.ToolCall
		base := &agentdv1.HookRequested{ToolCall: &agentdv1.ToolCall{Id: call.GetId(), Name: call.GetName(), Arguments: info.Args}}
		o, decided, proceeded := hs.ask(ctx, agentdv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE, call.GetName(), base, nil)
		if err := record(info.Run, hs.timeoutNotices(proceeded)...); err != nil {
			return agentloop.BeforeDecision{}, err
		}
		if decided {
			switch {
			case o.aborted:
				return agentloop.BeforeDecision{Block: true, Reason: fmt.Sprintf("the run was aborted while the hook %q waited; the tool did not run", o.req.GetHook())}, nil
			case o.verdict() == agentdv1.HookVerdict_HOOK_VERDICT_DENY:
				if err := record(info.Run, hs.notice(o, agentdv1.HookAction_HOOK_ACTION_DENIED)); err != nil {
					return agentloop.BeforeDecision{}, err
				}
				reason := fmt.Sprintf("Tool call denied by the hook %q", o.req.GetHook())
				if o.ans == nil {
					reason = fmt.Sprintf("the hook %q did not answer within %v and its on_timeout is DENY; the tool did not run", o.req.GetHook(), o.timeout)
				} else if r := o.ans.GetReason(); r != "" {
					reason += ": " + r
				}
				return agentloop.BeforeDecision{Block: true, Reason: reason}, nil
			case o.verdict() == agentdv1.HookVerdict_HOOK_VERDICT_MODIFY:
				if err := record(info.Run, hs.notice(o, agentdv1.HookAction_HOOK_ACTION_ARGUMENTS_REPLACED)); err != nil {
					return agentloop.BeforeDecision{}, err
				}
				info.Args = o.ans.GetArguments()
				d := agentloop.BeforeDecision{}
				var err error
				if next != nil {
					d, err = next(ctx, info)
				}
				if err == nil && !d.Block && d.Args == nil {
					d.Args = info.Args
				}
				return d, err
			}
		}
		if next == nil {
			return agentloop.BeforeDecision{}, nil
		}
		return next(ctx, info)
	}
}

// afterToolCall asks the POST_TOOL_USE hooks about a result before the
// model sees it.
func (hs *hookSet) afterToolCall(ctx context.Context, info agentloop.AfterToolCallInfo) (*agentloop.ResultOverride, error) {
	call := info.ToolCall
	base := &agentdv1.HookRequested{
		ToolCall: &agentdv1.ToolCall{Id: call.GetId(), Name: call.GetName(), Arguments: info.Args},
		ToolResult: &agentdv1.ToolResultMessage{ToolCallId: call.GetId(), ToolName: call.GetName(), Content: info.Result.Content,
			Details: info.Result.Details, IsError: info.IsError},
	}
	o, decided, proceeded := hs.ask(ctx, agentdv1.HookEvent_HOOK_EVENT_POST_TOOL_USE, call.GetName(), base, nil)
	if err := record(info.Run, hs.timeoutNotices(proceeded)...); err != nil {
		return nil, err
	}
	if !decided || o.aborted {
		return nil, nil
	}
	if o.verdict() == agentdv1.HookVerdict_HOOK_VERDICT_MODIFY {
		if err := record(info.Run, hs.notice(o, agentdv1.HookAction_HOOK_ACTION_RESULT_REPLACED)); err != nil {
			return nil, err
		}
		ov := &agentloop.ResultOverride{}
		if len(o.ans.GetContent()) > 0 {
			ov.Content = o.ans.GetContent()
		}
		if o.ans.GetReplaceDetails() {
			ov.Details, ov.RemoveDetails = o.ans.GetDetails(), o.ans.GetDetails() == nil
		}
		return ov, nil
	}
	// REDACT, or DENY after a timeout.
	if err := record(info.Run, hs.notice(o, agentdv1.HookAction_HOOK_ACTION_RESULT_REDACTED)); err != nil {
		return nil, err
	}
	return &agentloop.ResultOverride{Content: []*agentdv1.ContentBlock{textBlock(RedactedByHookText)}, RemoveDetails: true}, nil
}

// admit asks the USER_PROMPT hooks about a prompt, steering or follow-up
// message of run r. A refused prompt is stored nowhere: the run ends and
// its Prompt call fails with the refusal (Run.refusal). A refused queued
// message is dropped, with a notice and an error event in its place.
func (hs *hookSet) admit(r *Run) agentloop.AdmitFunc {
	return func(ctx context.Context, info agentloop.AdmitInfo) (agentloop.Admission, error) {
		base := &agentdv1.HookRequested{Message: info.Message, Source: info.Source.String()}
		o, decided, proceeded := hs.ask(ctx, agentdv1.HookEvent_HOOK_EVENT_USER_PROMPT, "", base, nil)
		after := hs.timeoutNotices(proceeded)
		if !decided {
			return agentloop.Admission{After: after}, nil
		}
		switch {
		case o.aborted:
			return agentloop.Admission{Drop: true}, nil
		case o.verdict() == agentdv1.HookVerdict_HOOK_VERDICT_DENY:
			if info.Source == agentloop.SourcePrompt {
				r.refused.Store(promptRefusal(o))
				return agentloop.Admission{Drop: true}, nil
			}
			if err := record(info.Run, append(after, hs.notice(o, agentdv1.HookAction_HOOK_ACTION_DENIED))...); err != nil {
				return agentloop.Admission{}, err
			}
			if o.ans != nil {
				hs.report("hook", fmt.Errorf("the user_prompt hook %q refused a %s message (%s); it was not delivered", o.req.GetHook(), info.Source, o.ans.GetReason()))
			}
			return agentloop.Admission{Drop: true}, nil
		}
		// MODIFY: the content joins this run's model calls; a notice the
		// model sees carries it itself, in every later run too.
		n := hs.notice(o, agentdv1.HookAction_HOOK_ACTION_CONTEXT_ADDED)
		n.GetHookNotice().Content = o.ans.GetContent()
		if !o.ans.GetIncludeInModelContext() {
			hs.mu.Lock()
			hs.added[o.req.GetRequestId()] = o.ans.GetContent()
			hs.mu.Unlock()
		}
		return agentloop.Admission{After: append(after, n)}, nil
	}
}

// promptRefusal is the error the Prompt call of a refused prompt fails
// with.
func promptRefusal(o hookOutcome) *Error {
	var e *Error
	if o.ans == nil {
		e = refuse(agentdv1.ErrorReason_ERROR_REASON_PROMPT_REFUSED, "the user_prompt hook %q did not answer within %v and its on_timeout is DENY; the prompt was not stored",
			o.req.GetHook(), o.timeout)
	} else {
		e = refuse(agentdv1.ErrorReason_ERROR_REASON_PROMPT_REFUSED, "the user_prompt hook %q refused the prompt; it was not stored", o.req.GetHook())
		if r := o.ans.GetReason(); r != "" {
			e.Message += ": " + r
		}
	}
	return e.with("hook", o.req.GetHook(), "request_id", o.req.GetRequestId())
}

// withAdded puts the content USER_PROMPT hooks added for this run right
// after the notice that records it, for this run's model calls only.
func (hs *hookSet) withAdded(items []contextview.Item) []contextview.Item {
	if hs == nil {
		return items
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if len(hs.added) == 0 {
		return items
	}
	var out []contextview.Item
	for i, it := range items {
		content, ok := hs.added[it.Message.GetHookNotice().GetRequestId()]
		if !ok || it.Message.GetHookNotice() == nil {
			if out != nil {
				out = append(out, it)
			}
			continue
		}
		if out == nil {
			out = append(make([]contextview.Item, 0, len(items)+1), items[:i]...)
		}
		out = append(out, it, contextview.NewItem("", &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{
			Content: content, Timestamp: it.Message.GetHookNotice().GetTimestamp()}}}))
	}
	if out == nil {
		return items
	}
	return out
}

// beforeStop asks the STOP hooks whether the run ends; a MODIFY continues
// it with the hook's content as a user message, at most
// max_continuations (0 means 1) times per hook and run, after which the
// hook is no longer asked.
func (hs *hookSet) beforeStop(ctx context.Context, info agentloop.StopInfo) ([]*agentdv1.AgentMessage, error) {
	base := &agentdv1.HookRequested{Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: info.Message}}}
	o, decided, proceeded := hs.ask(ctx, agentdv1.HookEvent_HOOK_EVENT_STOP, "", base, func(i int, req *agentdv1.HookRequested) bool {
		limit := max(hs.hooks[i].GetMaxContinuations(), 1)
		hs.mu.Lock()
		n := hs.continued[i]
		hs.mu.Unlock()
		req.Continuations = n
		return n < limit
	})
	if err := record(info.Run, hs.timeoutNotices(proceeded)...); err != nil {
		return nil, err
	}
	if !decided || o.aborted {
		return nil, nil
	}
	if o.verdict() != agentdv1.HookVerdict_HOOK_VERDICT_MODIFY {
		// DENY after a timeout: the run ends, and the notice says why.
		return nil, record(info.Run, hs.notice(o, agentdv1.HookAction_HOOK_ACTION_TIMED_OUT))
	}
	hs.mu.Lock()
	hs.continued[o.index]++
	hs.mu.Unlock()
	if err := record(info.Run, hs.notice(o, agentdv1.HookAction_HOOK_ACTION_CONTINUED)); err != nil {
		return nil, err
	}
	return []*agentdv1.AgentMessage{{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{
		Content: o.ans.GetContent(), Timestamp: timestamppb.New(hs.now())}}}}, nil
}

// vetoError is a PRE_COMPACT hook's veto of a compaction.
type vetoError struct{ e *Error }

func (v vetoError) Error() string { return v.e.Error() }
func (v vetoError) Unwrap() error { return v.e }

// preCompact asks the PRE_COMPACT hooks before a compaction. It returns
// the instructions the summary is written with and the notices to store
// before it, or a vetoError naming the hook that vetoed it.
func (hs *hookSet) preCompact(ctx context.Context, reason agentdv1.CompactionReason, tokensBefore int64, instructions string) (string, []*agentdv1.AgentMessage, error) {
	base := &agentdv1.HookRequested{CompactionReason: reason, TokensBefore: tokensBefore, Instructions: instructions}
	o, decided, proceeded := hs.ask(ctx, agentdv1.HookEvent_HOOK_EVENT_PRE_COMPACT, "", base, nil)
	notes := hs.timeoutNotices(proceeded)
	if !decided {
		return instructions, notes, nil
	}
	if o.aborted {
		return "", nil, vetoError{refuse(agentdv1.ErrorReason_ERROR_REASON_FAILED_PRECONDITION, "the compaction was abandoned while the pre_compact hook %q waited", o.req.GetHook())}
	}
	if o.verdict() == agentdv1.HookVerdict_HOOK_VERDICT_MODIFY {
		return o.ans.GetInstructions(), append(notes, hs.notice(o, agentdv1.HookAction_HOOK_ACTION_INSTRUCTIONS_SUPPLIED)), nil
	}
	notes = append(notes, hs.notice(o, agentdv1.HookAction_HOOK_ACTION_DENIED))
	e := refuse(agentdv1.ErrorReason_ERROR_REASON_FAILED_PRECONDITION, "the pre_compact hook %q vetoed the compaction", o.req.GetHook())
	if o.ans == nil {
		e.Message = fmt.Sprintf("the pre_compact hook %q did not answer within %v and its on_timeout is DENY: the compaction is vetoed", o.req.GetHook(), o.timeout)
	} else if r := o.ans.GetReason(); r != "" {
		e.Message += ": " + r
	}
	return "", notes, vetoError{e.with("hook", o.req.GetHook(), "request_id", o.req.GetRequestId())}
}

// answer delivers a SubmitHookResult answer to the waiting request, or
// refuses it (the request keeps waiting) when the verdict is not one its
// event accepts or a MODIFY lacks what it changes; replacement arguments
// are validated against the tool's schema, naming the failing field
// ("arguments.path").
func (hs *hookSet) answer(sessionID string, ans *agentdv1.SubmitHookResultRequest) error {
	id := ans.GetRequestId()
	if hs == nil {
		return refuse(agentdv1.ErrorReason_ERROR_REASON_NOT_WAITING, "hook request %q of session %q is not waiting for an answer", id, sessionID).with("id", id)
	}
	req, err := hs.pending.hookRequest(sessionID, id)
	if err != nil {
		return err
	}
	ev, v := req.GetEvent(), ans.GetVerdict()
	if accepted := hookVerdicts(ev); !slices.Contains(accepted, v) {
		names := make([]string, len(accepted))
		for i, a := range accepted {
			names[i] = a.String()
		}
		return invalid("verdict", "%s does not answer a %s hook; it accepts %s", v, ev, strings.Join(names, ", "))
	}
	if v == agentdv1.HookVerdict_HOOK_VERDICT_MODIFY {
		switch ev {
		case agentdv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE:
			if ans.GetArguments() == nil {
				return invalid("arguments", "required with HOOK_VERDICT_MODIFY: the arguments tool call %q runs with instead", req.GetToolCall().GetId())
			}
			args, err := hs.tools.ValidateArguments(req.GetToolCall().GetName(), ans.GetArguments())
			if err != nil {
				return argumentsRefusal(req.GetToolCall().GetName(), err, fmt.Sprintf("hook request %q still waits for an answer", id))
			}
			ans = proto.CloneOf(ans)
			ans.Arguments = args
		case agentdv1.HookEvent_HOOK_EVENT_POST_TOOL_USE:
			if len(ans.GetContent()) == 0 && !ans.GetReplaceDetails() {
				return invalid("content", "HOOK_VERDICT_MODIFY of a result needs content, or replace_details, or both")
			}
		case agentdv1.HookEvent_HOOK_EVENT_USER_PROMPT, agentdv1.HookEvent_HOOK_EVENT_STOP:
			if len(ans.GetContent()) == 0 {
				return invalid("content", "required with HOOK_VERDICT_MODIFY of a %s hook: at least one text or image block", eventName(ev))
			}
		case agentdv1.HookEvent_HOOK_EVENT_PRE_COMPACT:
			if ans.GetInstructions() == "" {
				return invalid("instructions", "required with HOOK_VERDICT_MODIFY of a pre_compact hook")
			}
		}
	}
	return hs.pending.deliver(sessionID, id, waitHook, ans)
}

// hookRequest returns the request a waiting hook asked.
func (p *pendingCalls) hookRequest(sessionID, id string) (*agentdv1.HookRequested, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, err := p.waitingLocked(sessionID, id, waitHook)
	if err != nil {
		return nil, err
	}
	return c.hook, nil
}

// compactHooks returns the hooks of the manual compaction of a session
// that runs here, or nil.
func (a *Agent) compactHooks(sessionID string) *hookSet {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.compacting[sessionID]
}

// SubmitHookResult answers a hook_requested event of the session's active
// run (or of its Compact call), on whichever replica runs it. An answer
// the hook cannot take (a verdict its event does not accept, arguments
// that fail the tool's schema) is refused with a *FieldError, and the
// hook keeps waiting.
func (a *Agent) SubmitHookResult(ctx context.Context, sessionID string, ans *agentdv1.SubmitHookResultRequest) error {
	_, err := a.control(ctx, sessionID, &replicapb.ReplicaControl{Action: &replicapb.ReplicaControl_Hook{Hook: ans}})
	return err
}

// refusal is why the run's prompt was refused, or nil.
func (r *Run) refusal() *Error { return r.refused.Load() }

func textBlock(s string) *agentdv1.ContentBlock {
	return &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}
}

// configure puts the run's hooks in the loop: PRE_TOOL_USE in front of
// the approval gate, POST_TOOL_USE after each tool, USER_PROMPT before each
// message enters the transcript, STOP where the run would end.
func (hs *hookSet) configure(r *Run, cfg *agentloop.Config) {
	if hs.has(agentdv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE) {
		cfg.BeforeToolCall = hs.beforeToolCall(cfg.BeforeToolCall)
	}
	if hs.has(agentdv1.HookEvent_HOOK_EVENT_POST_TOOL_USE) {
		cfg.AfterToolCall = hs.afterToolCall
	}
	if hs.has(agentdv1.HookEvent_HOOK_EVENT_USER_PROMPT) {
		cfg.AdmitMessage = hs.admit(r)
	}
	if hs.has(agentdv1.HookEvent_HOOK_EVENT_STOP) {
		cfg.BeforeStop = hs.beforeStop
	}
}
