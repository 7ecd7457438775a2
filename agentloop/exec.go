package agentloop

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// The error texts the model gets for calls that never run, exactly as pi
// words them.
const (
	errTextBlocked = "Tool execution was blocked"
)

// NotFoundText is the error result for a call to an unknown tool.
func NotFoundText(name string) string { return "Tool " + name + " not found" }

// prepared is a tool call after lookup and validation: either an immediate
// (error) result or a call ready for its BeforeToolCall hook and execution.
type prepared struct {
	call      *agentdv1.ToolCall
	entry     *toolEntry
	args      *structpb.Struct
	immediate bool
	result    Result
}

type finalized struct {
	call    *agentdv1.ToolCall
	result  Result
	isError bool
	message *agentdv1.ToolResultMessage
}

func errorResult(text string) Result {
	return Result{Content: []*agentdv1.ContentBlock{textBlock(text)}}
}

// executeToolCalls runs one assistant message's tool calls and returns their
// results in call order, and whether the batch asked to terminate.
func (r *run) executeToolCalls(msg *agentdv1.AssistantMessage, calls []*agentdv1.ToolCall) ([]*agentdv1.ToolResultMessage, bool, error) {
	sequential := r.cfg.ToolExecution == agentdv1.ToolExecutionMode_TOOL_EXECUTION_MODE_SEQUENTIAL
	for _, c := range calls {
		if e := r.state.Tools.lookup(c.GetName()); e != nil && e.def.GetSequential() {
			sequential = true
		}
	}
	var done []*finalized
	var err error
	if sequential {
		done, err = r.runSequential(msg, calls)
	} else {
		done, err = r.runParallel(msg, calls)
	}
	if err != nil {
		return nil, false, err
	}
	results := make([]*agentdv1.ToolResultMessage, 0, len(done))
	terminate := len(done) > 0
	for _, f := range done {
		if !f.result.Terminate {
			terminate = false
		}
		results = append(results, f.message)
	}
	return results, terminate, nil
}

func (r *run) runSequential(msg *agentdv1.AssistantMessage, calls []*agentdv1.ToolCall) ([]*finalized, error) {
	out := make([]*finalized, 0, len(calls))
	for _, c := range calls {
		if err := r.em.send(evToolStart(c.GetId(), c.GetName(), c)); err != nil {
			return nil, err
		}
		f := r.run1(msg, r.prepare(c))
		if err := r.em.send(evToolEnd(f.message)); err != nil {
			return nil, err
		}
		if err := r.appendToolResult(f.message); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// runParallel announces and validates the calls in order, then runs each
// valid one in its own goroutine: its BeforeToolCall hook (which may wait
// for a person), the tool and its AfterToolCall hook. tool_execution_end
// comes in completion order, the result messages in call order.
func (r *run) runParallel(msg *agentdv1.AssistantMessage, calls []*agentdv1.ToolCall) ([]*finalized, error) {
	out := make([]*finalized, len(calls))
	var runnable []int
	preps := make([]prepared, len(calls))
	for i, c := range calls {
		if err := r.em.send(evToolStart(c.GetId(), c.GetName(), c)); err != nil {
			return nil, err
		}
		preps[i] = r.prepare(c)
		if preps[i].immediate {
			out[i] = r.finalize(preps[i].call, preps[i].result, true)
			if err := r.em.send(evToolEnd(out[i].message)); err != nil {
				return nil, err
			}
			continue
		}
		runnable = append(runnable, i)
	}
	var wg sync.WaitGroup
	for _, i := range runnable {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := r.run1(msg, preps[i])
			out[i] = f
			// Completion order; a sink failure is picked up after Wait.
			_ = r.em.send(evToolEnd(f.message))
		}()
	}
	wg.Wait()
	if err := r.em.failure(); err != nil {
		return nil, err
	}
	for _, f := range out {
		if err := r.appendToolResult(f.message); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (r *run) appendToolResult(m *agentdv1.ToolResultMessage) error {
	am := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: m}}
	if err := r.em.send(evMessageStart(am)); err != nil {
		return err
	}
	if err := r.em.send(evMessageEnd(am)); err != nil {
		return err
	}
	r.recordMu.Lock()
	r.messages = append(r.messages, am)
	r.newMessages = append(r.newMessages, am)
	r.recordMu.Unlock()
	return nil
}

// prepare looks the tool up and validates the arguments.
func (r *run) prepare(c *agentdv1.ToolCall) prepared {
	p := prepared{call: c}
	e := r.state.Tools.lookup(c.GetName())
	if e == nil {
		p.immediate, p.result = true, errorResult(NotFoundText(c.GetName()))
		return p
	}
	args, err := e.schema.validateArguments(c.GetName(), c.GetArguments())
	if err != nil {
		p.immediate, p.result = true, errorResult(err.Error())
		return p
	}
	p.entry, p.args = e, args
	return p
}

// run1 finishes one call: an immediate result as is, otherwise the
// BeforeToolCall hook, the tool and the AfterToolCall hook.
func (r *run) run1(msg *agentdv1.AssistantMessage, p prepared) *finalized {
	if p.immediate {
		return r.finalize(p.call, p.result, true)
	}
	if r.cfg.BeforeToolCall != nil {
		d, err := safeBefore(r.ctx, r.cfg.BeforeToolCall, r.callInfo(msg, p))
		if err != nil {
			return r.finalize(p.call, errorResult(err.Error()), true)
		}
		if d.Block {
			reason := d.Reason
			if reason == "" {
				reason = errTextBlocked
			}
			return r.finalize(p.call, errorResult(reason), true)
		}
		if d.Args != nil {
			args, err := p.entry.schema.validateArguments(p.call.GetName(), d.Args)
			if err != nil {
				return r.finalize(p.call, errorResult(err.Error()), true)
			}
			p.args = args
		}
	}
	return r.executeAndFinalize(msg, p)
}

// callInfo describes a call to its hooks, with the run's messages so far.
func (r *run) callInfo(msg *agentdv1.AssistantMessage, p prepared) ToolCallInfo {
	r.recordMu.Lock()
	msgs := r.messages // Record may append concurrently; this slice header is stable
	r.recordMu.Unlock()
	return ToolCallInfo{AssistantMessage: msg, ToolCall: p.call, Args: p.args, Messages: msgs, Run: scope{r}}
}

func safeBefore(ctx context.Context, f BeforeToolCallFunc, info ToolCallInfo) (d BeforeDecision, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("beforeToolCall panicked: %v", p)
		}
	}()
	return f(ctx, info)
}

func safeAfter(ctx context.Context, f AfterToolCallFunc, info AfterToolCallInfo) (o *ResultOverride, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("afterToolCall panicked: %v", p)
		}
	}()
	return f(ctx, info)
}

func (r *run) finalize(call *agentdv1.ToolCall, result Result, isError bool) *finalized {
	return &finalized{call: call, result: result, isError: isError, message: &agentdv1.ToolResultMessage{
		ToolCallId: call.GetId(),
		ToolName:   call.GetName(),
		Content:    result.Content,
		Details:    result.Details,
		IsError:    isError,
		Timestamp:  timestamppb.New(r.cfg.Now()),
	}}
}

// executeAndFinalize runs the tool (recovering a panic), then AfterToolCall.
func (r *run) executeAndFinalize(msg *agentdv1.AssistantMessage, p prepared) *finalized {
	// mu orders updates before the tool's end: once Execute returned, late
	// updates (from goroutines the tool leaked) are dropped.
	var mu sync.Mutex
	returned := false
	onUpdate := func(content []*agentdv1.ContentBlock, details *structpb.Value) {
		mu.Lock()
		defer mu.Unlock()
		if returned {
			return
		}
		_ = r.em.send(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_ToolExecutionUpdate{ToolExecutionUpdate: &agentdv1.ToolExecutionUpdate{
			ToolCallId: p.call.GetId(), ToolName: p.call.GetName(), Content: content, Details: details,
		}}})
	}
	result, isError := r.execute1(p, onUpdate)
	mu.Lock()
	returned = true
	mu.Unlock()

	if r.cfg.AfterToolCall != nil {
		o, err := safeAfter(r.ctx, r.cfg.AfterToolCall, AfterToolCallInfo{ToolCallInfo: r.callInfo(msg, p), Result: result, IsError: isError})
		switch {
		case err != nil:
			result, isError = errorResult(err.Error()), true
		case o != nil:
			if o.Content != nil {
				result.Content = o.Content
			}
			if o.Details != nil {
				result.Details = o.Details
			}
			if o.RemoveDetails {
				result.Details = nil
			}
			if o.Terminate != nil {
				result.Terminate = *o.Terminate
			}
			if o.IsError != nil {
				isError = *o.IsError
			}
		}
	}
	return r.finalize(p.call, result, isError)
}

func (r *run) execute1(p prepared, onUpdate UpdateFunc) (res Result, isError bool) {
	defer func() {
		if v := recover(); v != nil {
			res, isError = errorResult(fmt.Sprintf("Tool %s panicked: %v", p.call.GetName(), v)), true
		}
	}()
	res, err := p.entry.tool.Execute(r.ctx, Call{ID: p.call.GetId(), Args: p.args, Update: onUpdate, Run: scope{r}})
	if err != nil {
		return errorResult(err.Error()), true
	}
	return res, res.IsError
}

// scope is the Scope the loop hands to tools and hooks of run r.
type scope struct{ r *run }

// Emit implements Scope.
func (s scope) Emit(ev *agentdv1.AgentEvent) error {
	return s.r.em.send(ev)
}

// Record implements Scope.
func (s scope) Record(msg *agentdv1.AgentMessage) error {
	r := s.r
	r.recordMu.Lock()
	defer r.recordMu.Unlock()
	if err := r.em.send(evMessageStart(msg)); err != nil {
		return err
	}
	if err := r.em.send(evMessageEnd(msg)); err != nil {
		return err
	}
	r.messages = append(r.messages, msg)
	r.newMessages = append(r.newMessages, msg)
	return nil
}
