package agentloop

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

// State is the conversation a run starts from. The loop never modifies
// Messages or the messages in it; it builds its own context slice.
type State struct {
	// SystemPrompt goes with every model call; empty means none.
	SystemPrompt string
	// Messages is the transcript so far (the path from root to leaf).
	Messages []*agentdv1.AgentMessage
	// Tools the model may call; nil means none.
	Tools *ToolSet
}

// TransformFunc adjusts one request's view of the transcript (prune, inject
// context). It gets a deep copy, so it cannot corrupt the transcript; an
// error or panic makes the loop use the untransformed messages and emit a
// non-fatal error event with stage "transform_context".
type TransformFunc func(ctx context.Context, msgs []*agentdv1.AgentMessage) ([]*agentdv1.AgentMessage, error)

// ConvertFunc turns agent messages into what the model understands. It gets
// a deep copy; an error or panic makes the loop fall back to
// DefaultConvertToLLM and emit a non-fatal error event with stage
// "convert_to_llm".
type ConvertFunc func(ctx context.Context, msgs []*agentdv1.AgentMessage) ([]*agentdv1.Message, error)

// ContextFunc builds the context of one model call from the run's
// messages; see Config.Context.
type ContextFunc func(ctx context.Context, msgs []*agentdv1.AgentMessage, tools *ToolSet) (*agentdv1.Context, error)

// TurnInfo is what ShouldStopAfterTurn sees.
type TurnInfo struct {
	// Turn counts the run's turns from 1.
	Turn uint32
	// Message is the turn's assistant answer.
	Message *agentdv1.AssistantMessage
	// ToolResults answer Message's tool calls, in call order.
	ToolResults []*agentdv1.ToolResultMessage
	// Messages is the run's transcript so far; read-only.
	Messages []*agentdv1.AgentMessage
	// NewMessages are the messages this run produced so far; read-only.
	NewMessages []*agentdv1.AgentMessage
}

// Config is how a run behaves. Only Stream is required.
type Config struct {
	// Model is passed to Stream and names the model on errors the loop
	// itself synthesizes.
	Model provider.Model
	// Stream calls the model.
	Stream provider.StreamFunc
	// StreamOptions are passed to Stream unchanged.
	StreamOptions provider.Options

	// Context, when set, builds the whole context of every model call (and
	// of CheckContinue) from the run's messages, which it must not modify,
	// instead of TransformContext, ConvertToLLM and the replay: the owner
	// of a pipeline of its own, such as package agent, supplies it so
	// that one function builds what the model receives. The loop makes no
	// copy for it. An error ends the run as a sink failure does.
	Context ContextFunc

	// TransformContext runs before ConvertToLLM on every model call; nil
	// means identity.
	TransformContext TransformFunc
	// ConvertToLLM defaults to DefaultConvertToLLM.
	ConvertToLLM ConvertFunc

	// BeforeToolCall may block or refuse each validated call; nil allows
	// all.
	BeforeToolCall BeforeToolCallFunc
	// AfterToolCall may rewrite each executed call's result; nil keeps
	// them.
	AfterToolCall AfterToolCallFunc

	// AdmitMessage may keep each prompt, steering or follow-up message out
	// of the transcript, or record messages after it; nil admits all.
	AdmitMessage AdmitFunc
	// BeforeStop may continue a run that would end normally; nil lets it
	// end.
	BeforeStop BeforeStopFunc

	// Steering messages are polled after each turn (after the whole tool
	// batch); FollowUp messages only when the agent would otherwise stop.
	// Their QueueMode decides how many are taken at a time. Either may be nil.
	Steering *Queue
	FollowUp *Queue

	// ToolExecution is PARALLEL by default; a tool whose definition is
	// sequential forces its whole batch sequential.
	ToolExecution agentdv1.ToolExecutionMode

	// ShouldStopAfterTurn may end the run after a turn_end (a turn limit,
	// a budget). The run then ends COMPLETED.
	ShouldStopAfterTurn func(ctx context.Context, info TurnInfo) bool

	// Retry decides whether a model call whose answer failed (stop reason
	// ERROR, before or after content streamed) is made again in the same
	// turn, and after how long; nil never retries. The failed answer stays
	// in the transcript, and the next call's context leaves it out (see
	// [provider.Replay]), so a retry repeats nothing the model sees. An error
	// event with stage "provider_retry" announces each retry. An abort
	// during the wait ends the call ABORTED.
	Retry RetryFunc

	// Now stamps events and tool results; defaults to time.Now.
	Now func() time.Time
}

// RetryFunc decides whether a failed model call is made again: failed is
// the attempt's ERROR answer, attempt counts the failed attempts of this
// call (from 1), retryAfter is the wait the provider asked for (0 when it
// did not say). provider.RetryPolicy.Decide is one.
type RetryFunc func(failed *agentdv1.AssistantMessage, attempt int, retryAfter time.Duration) (delay time.Duration, retry bool)

// PreconditionError says why Continue cannot start; the gRPC layer maps it to
// FAILED_PRECONDITION. Its text is pi's.
type PreconditionError struct {
	// Message is pi's text, such as "Cannot continue from message role: assistant".
	Message string
}

// Error returns pi's text unchanged, so clients see the reference wording.
func (e *PreconditionError) Error() string { return e.Message }

// The texts of Continue's refusals, exactly as pi words them.
const (
	ErrTextNoMessages    = "Cannot continue: no messages in context"
	ErrTextFromAssistant = "Cannot continue from message role: assistant"
)

// Run appends prompts to the transcript and runs the agent until it stops.
// It returns the messages the run produced, prompts included, in transcript
// order. Provider and tool failures are data (an ERROR assistant message, an
// error tool result), not errors: the returned error is non-nil only for a
// misconfiguration, a sink failure (*SinkError) or a panic in the loop's own
// callbacks. Whatever happens after agent_start, exactly one agent_end is
// offered to the sink.
func Run(ctx context.Context, prompts []*agentdv1.AgentMessage, state State, cfg Config, sink Sink) ([]*agentdv1.AgentMessage, error) {
	if err := checkConfig(cfg, sink); err != nil {
		return nil, err
	}
	r := newRun(ctx, state, cfg, sink)
	defer r.cancel(nil)
	return r.execute(func() error {
		return r.start(prompts, SourcePrompt, false)
	})
}

// Continue resumes from the transcript without a new prompt, for example
// after a failed model call or a restart. The last message the model would
// see (CheckContinue) must be a user message or a tool result; when it is
// an assistant message, queued steering (then follow-up) messages are
// delivered instead, and with nothing queued Continue refuses with a
// *PreconditionError before any event.
func Continue(ctx context.Context, state State, cfg Config, sink Sink) ([]*agentdv1.AgentMessage, error) {
	if err := checkConfig(cfg, sink); err != nil {
		return nil, err
	}
	err := CheckContinue(ctx, state, cfg)
	var pe *PreconditionError
	switch {
	case err == nil:
		r := newRun(ctx, state, cfg, sink)
		defer r.cancel(nil)
		return r.execute(func() error {
			if err := r.em.send(evAgentStart()); err != nil {
				return err
			}
			pending, err := r.takeQueued(r.cfg.Steering, SourceSteering)
			if err != nil {
				return err
			}
			if err := r.turnStart(); err != nil {
				return err
			}
			return r.loop(pending)
		})
	case !errors.As(err, &pe) || pe.Message != ErrTextFromAssistant:
		return nil, err
	case cfg.Steering.Len() > 0:
		r := newRun(ctx, state, cfg, sink)
		defer r.cancel(nil)
		return r.execute(func() error {
			return r.start(r.cfg.Steering.Drain(), SourceSteering, true)
		})
	case cfg.FollowUp.Len() > 0:
		r := newRun(ctx, state, cfg, sink)
		defer r.cancel(nil)
		return r.execute(func() error {
			return r.start(r.cfg.FollowUp.Drain(), SourceFollowUp, true)
		})
	}
	return nil, err
}

// CheckContinue reports whether Continue could start from state with
// nothing queued: it builds the context the next model call would get
// (BuildContext: transformContext, convertToLlm, then [provider.Replay], which
// leaves failed answers out) and refuses, with the *PreconditionError
// Continue would return, when that context is empty or ends with an
// assistant message. So after a failed answer the model sees the message
// before it last, and Continue retries the call.
func CheckContinue(ctx context.Context, state State, cfg Config) error {
	c, _ := BuildContext(ctx, state, cfg)
	msgs := c.GetMessages()
	if len(msgs) == 0 {
		return &PreconditionError{Message: ErrTextNoMessages}
	}
	if msgs[len(msgs)-1].GetAssistant() != nil {
		return &PreconditionError{Message: ErrTextFromAssistant}
	}
	return nil
}

func checkConfig(cfg Config, sink Sink) error {
	if cfg.Stream == nil {
		return errors.New("agentloop: Config.Stream is nil")
	}
	if sink == nil {
		return errors.New("agentloop: sink is nil")
	}
	return nil
}

type run struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	cfg    Config
	state  State
	em     *emitter

	// messages is the run's context: the transcript plus what this run
	// appended. newMessages is what this run appended. Tools running
	// concurrently append through Record, which holds recordMu; the loop
	// itself appends only while no tool runs.
	messages    []*agentdv1.AgentMessage
	newMessages []*agentdv1.AgentMessage
	recordMu    sync.Mutex

	turn  uint32
	usage agentdv1.Usage
	// lastAssistant decides the outcome.
	lastAssistant *agentdv1.AssistantMessage
}

func newRun(ctx context.Context, state State, cfg Config, sink Sink) *run {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	rctx, cancel := context.WithCancelCause(ctx)
	r := &run{
		ctx:    rctx,
		cancel: cancel,
		cfg:    cfg,
		state:  state,
	}
	r.em = &emitter{sink: sink, ctx: context.WithoutCancel(ctx), now: cfg.Now, cancel: cancel}
	r.messages = make([]*agentdv1.AgentMessage, len(state.Messages), len(state.Messages)+16)
	copy(r.messages, state.Messages)
	return r
}

// execute runs body, turns a panic into a fatal error, and always ends with
// one agent_end.
func (r *run) execute(body func() error) (msgs []*agentdv1.AgentMessage, err error) {
	var fatal error
	func() {
		defer func() {
			if p := recover(); p != nil {
				fatal = fmt.Errorf("agentloop: panic: %v", p)
			}
		}()
		fatal = body()
	}()
	var sinkErr *SinkError
	if errors.As(fatal, &sinkErr) || errors.Is(fatal, errClosed) {
		fatal = nil
	}
	if fatal != nil {
		// The sink may still work: tell clients why the run ends.
		_ = r.em.send(evError("loop", fatal.Error(), true))
	}
	end := &agentdv1.AgentEnd{Usage: r.totalUsage()}
	switch failure := r.em.failure(); {
	case failure != nil:
		end.Outcome = agentdv1.RunOutcome_RUN_OUTCOME_ERROR
		end.ErrorMessage = failure.Error()
	case fatal != nil:
		end.Outcome = agentdv1.RunOutcome_RUN_OUTCOME_ERROR
		end.ErrorMessage = fatal.Error()
	case r.lastAssistant.GetStopReason() == agentdv1.StopReason_STOP_REASON_ERROR:
		end.Outcome = agentdv1.RunOutcome_RUN_OUTCOME_ERROR
		end.ErrorMessage = r.lastAssistant.GetErrorMessage()
	case r.lastAssistant.GetStopReason() == agentdv1.StopReason_STOP_REASON_ABORTED:
		end.Outcome = agentdv1.RunOutcome_RUN_OUTCOME_ABORTED
		end.ErrorMessage = r.lastAssistant.GetErrorMessage()
	default:
		end.Outcome = agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED
	}
	sinkFailure := r.em.failure()
	r.em.final(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_AgentEnd{AgentEnd: end}})
	if sinkFailure != nil {
		return r.newMessages, sinkFailure
	}
	if fatal != nil {
		return r.newMessages, fatal
	}
	if failure := r.em.failure(); failure != nil {
		// Only agent_end itself was refused.
		return r.newMessages, failure
	}
	return r.newMessages, nil
}

func (r *run) totalUsage() *agentdv1.Usage {
	u := &agentdv1.Usage{
		Input: r.usage.Input, Output: r.usage.Output, CacheRead: r.usage.CacheRead,
		CacheWrite: r.usage.CacheWrite, TotalTokens: r.usage.TotalTokens, Cost: &agentdv1.Cost{},
	}
	if r.usage.Cost != nil {
		*u.Cost = agentdv1.Cost{Input: r.usage.Cost.Input, Output: r.usage.Cost.Output,
			CacheRead: r.usage.Cost.CacheRead, CacheWrite: r.usage.Cost.CacheWrite, Total: r.usage.Cost.Total}
	}
	return u
}

func (r *run) addUsage(u *agentdv1.Usage) {
	if u == nil {
		return
	}
	r.usage.Input += u.GetInput()
	r.usage.Output += u.GetOutput()
	r.usage.CacheRead += u.GetCacheRead()
	r.usage.CacheWrite += u.GetCacheWrite()
	r.usage.TotalTokens += u.GetTotalTokens()
	if c := u.GetCost(); c != nil {
		if r.usage.Cost == nil {
			r.usage.Cost = &agentdv1.Cost{}
		}
		r.usage.Cost.Input += c.GetInput()
		r.usage.Cost.Output += c.GetOutput()
		r.usage.Cost.CacheRead += c.GetCacheRead()
		r.usage.Cost.CacheWrite += c.GetCacheWrite()
		r.usage.Cost.Total += c.GetTotal()
	}
}

func (r *run) turnStart() error {
	r.turn++
	return r.em.send(evTurnStart(r.turn))
}

// start emits agent_start, admits the prompts (AdmitMessage), then the
// first turn_start and the prompts, then loops. source says where the
// prompts come from; fromQueue says they were taken from a queue
// (Continue), which clients learn from a queue_update. Steering is not
// polled before the first turn when the prompts are steering messages
// themselves. A run whose prompts are all refused ends without a turn.
func (r *run) start(prompts []*agentdv1.AgentMessage, source MessageSource, fromQueue bool) error {
	if err := r.em.send(evAgentStart()); err != nil {
		return err
	}
	prompts, n, err := r.admit(prompts, source)
	if err != nil {
		return err
	}
	if n == 0 && len(prompts) == 0 && r.cfg.AdmitMessage != nil {
		return nil
	}
	if err := r.turnStart(); err != nil {
		return err
	}
	if fromQueue {
		if err := r.queueUpdate(); err != nil {
			return err
		}
	}
	if err := r.appendMessages(prompts); err != nil {
		return err
	}
	var pending []*agentdv1.AgentMessage
	if source != SourceSteering {
		if pending, err = r.takeQueued(r.cfg.Steering, SourceSteering); err != nil {
			return err
		}
	}
	return r.loop(pending)
}

// appendMessages emits message_start and message_end for each message and
// adds it to the run's context.
func (r *run) appendMessages(msgs []*agentdv1.AgentMessage) error {
	for _, m := range msgs {
		if err := r.em.send(evMessageStart(m)); err != nil {
			return err
		}
		if err := r.em.send(evMessageEnd(m)); err != nil {
			return err
		}
		r.messages = append(r.messages, m)
		r.newMessages = append(r.newMessages, m)
	}
	return nil
}

func (r *run) queueUpdate() error {
	return r.em.send(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_QueueUpdate{QueueUpdate: &agentdv1.QueueUpdate{
		Steering: r.cfg.Steering.Snapshot(), FollowUp: r.cfg.FollowUp.Snapshot(),
	}}})
}

// loop is pi's runLoop: turns continue while the model calls tools or
// steering messages wait; follow-ups restart it when it would stop.
func (r *run) loop(pending []*agentdv1.AgentMessage) error {
	firstTurn := true
	for {
		hasMoreToolCalls := true
		for hasMoreToolCalls || len(pending) > 0 {
			if !firstTurn {
				if err := r.turnStart(); err != nil {
					return err
				}
			}
			firstTurn = false
			if len(pending) > 0 {
				if err := r.queueUpdate(); err != nil {
					return err
				}
				if err := r.appendMessages(pending); err != nil {
					return err
				}
				pending = nil
			}
			msg, err := r.streamAssistant()
			if err != nil {
				return err
			}
			if provider.IsFailedAnswer(msg) {
				return r.em.send(evTurnEnd(r.turn, msg, nil))
			}
			var results []*agentdv1.ToolResultMessage
			hasMoreToolCalls = false
			if calls := toolCalls(msg); len(calls) > 0 {
				batch, terminate, err := r.executeToolCalls(msg, calls)
				if err != nil {
					return err
				}
				results = batch
				hasMoreToolCalls = !terminate
			}
			if err := r.em.send(evTurnEnd(r.turn, msg, results)); err != nil {
				return err
			}
			if r.cfg.ShouldStopAfterTurn != nil && r.cfg.ShouldStopAfterTurn(r.ctx, TurnInfo{
				Turn: r.turn, Message: msg, ToolResults: results, Messages: r.messages, NewMessages: r.newMessages,
			}) {
				return nil
			}
			if pending, err = r.takeQueued(r.cfg.Steering, SourceSteering); err != nil {
				return err
			}
		}
		var err error
		if pending, err = r.takeQueued(r.cfg.FollowUp, SourceFollowUp); err != nil {
			return err
		}
		if len(pending) == 0 {
			if pending, err = r.beforeStop(); err != nil || len(pending) == 0 {
				return err
			}
		}
	}
}

func evTurnEnd(turn uint32, msg *agentdv1.AssistantMessage, results []*agentdv1.ToolResultMessage) *agentdv1.AgentEvent {
	return &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_TurnEnd{TurnEnd: &agentdv1.TurnEnd{Turn: turn, Message: msg, ToolResults: results}}}
}

func toolCalls(m *agentdv1.AssistantMessage) []*agentdv1.ToolCall {
	var out []*agentdv1.ToolCall
	for _, b := range m.GetContent() {
		if tc := b.GetToolCall(); tc != nil {
			out = append(out, tc)
		}
	}
	return out
}

// buildContext runs TransformContext and ConvertToLLM fail-safe, reporting
// their failures as non-fatal error events.
func (r *run) buildContext() (*agentdv1.Context, error) {
	return assembleContext(r.ctx, r.state.SystemPrompt, r.messages, r.state.Tools, r.cfg, func(stage string, err error) error {
		return r.em.send(evError(stage, err.Error(), false))
	})
}

// BuildContext returns the Context the next model call would receive for a
// run over state with cfg, without calling the model: the transcript after
// TransformContext, ConvertToLLM and [provider.Replay] for cfg.Model, the
// system prompt and the tools. It
// applies the same fail-safe fallbacks as a run; the failures it fell back
// from are returned alongside, never instead of, the context.
func BuildContext(ctx context.Context, state State, cfg Config) (*agentdv1.Context, []error) {
	var failures []error
	c, _ := assembleContext(ctx, state.SystemPrompt, state.Messages, state.Tools, cfg, func(_ string, err error) error {
		failures = append(failures, err)
		return nil
	})
	return c, failures
}

// assembleContext is the pipeline before every model call: transform (on a
// deep copy), convert (on a deep copy), replay for cfg.Model, then the
// Context. A failing step
// falls back to its input and is reported through onFailure, whose error
// stops the pipeline.
func assembleContext(ctx context.Context, systemPrompt string, msgs []*agentdv1.AgentMessage, tools *ToolSet, cfg Config,
	onFailure func(stage string, err error) error) (*agentdv1.Context, error) {
	if cfg.Context != nil {
		return cfg.Context(ctx, msgs, tools)
	}
	if cfg.TransformContext != nil {
		out, err := safeTransform(ctx, cfg.TransformContext, cloneMessages(msgs))
		if err != nil {
			if e := onFailure("transform_context", err); e != nil {
				return nil, e
			}
		} else {
			msgs = out
		}
	}
	var llm []*agentdv1.Message
	if cfg.ConvertToLLM != nil {
		out, err := safeConvert(ctx, cfg.ConvertToLLM, cloneMessages(msgs))
		if err != nil {
			if e := onFailure("convert_to_llm", err); e != nil {
				return nil, e
			}
			llm = DefaultConvertToLLM(msgs)
		} else {
			llm = out
		}
	} else {
		llm = DefaultConvertToLLM(msgs)
	}
	// The same replay rules every adapter applies, here so that a run's
	// calls and GetContext show exactly what the model receives.
	llm = provider.Replay(llm, cfg.Model)
	return &agentdv1.Context{SystemPrompt: systemPrompt, Messages: llm, Tools: tools.Definitions()}, nil
}

func safeTransform(ctx context.Context, f TransformFunc, in []*agentdv1.AgentMessage) (out []*agentdv1.AgentMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("transformContext panicked: %v", p)
		}
	}()
	out, err = f(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("transformContext failed: %w", err)
	}
	for i, m := range out {
		if m == nil || m.GetKind() == nil {
			return nil, fmt.Errorf("transformContext returned an empty message at %d", i)
		}
	}
	return out, nil
}

func safeConvert(ctx context.Context, f ConvertFunc, in []*agentdv1.AgentMessage) (out []*agentdv1.Message, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("convertToLlm panicked: %v", p)
		}
	}()
	out, err = f(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("convertToLlm failed: %w", err)
	}
	for i, m := range out {
		if m == nil || m.GetRole() == nil {
			return nil, fmt.Errorf("convertToLlm returned an empty message at %d", i)
		}
	}
	return out, nil
}

// errTextNoFinal is the failure of a model stream that ended without its
// final message; an aborted one says [provider.AbortedMessage].
const errTextNoFinal = "Provider stream ended without a final message"

// streamAssistant makes one model call, retried as cfg.Retry says, and
// emits its message events. The returned message, the call's last answer,
// is already in the run's context, after any failed attempts.
func (r *run) streamAssistant() (*agentdv1.AssistantMessage, error) {
	for attempt := 1; ; attempt++ {
		msg, retryAfter, err := r.streamOnce()
		if err != nil {
			return nil, err
		}
		if r.cfg.Retry == nil || msg.GetStopReason() != agentdv1.StopReason_STOP_REASON_ERROR || r.ctx.Err() != nil {
			return msg, nil
		}
		delay, ok := r.cfg.Retry(msg, attempt, retryAfter)
		if !ok {
			return msg, nil
		}
		if err := r.em.send(evError("provider_retry", RetryText(msg, attempt, delay), false)); err != nil {
			return nil, err
		}
		if !r.wait(delay) {
			// Aborted while waiting: the call ends as an abort does.
			aborted := r.emptyAssistant(r.cfg.Now())
			aborted.StopReason, aborted.ErrorMessage = agentdv1.StopReason_STOP_REASON_ABORTED, provider.AbortedMessage
			return aborted, r.appendAssistant(aborted, nil)
		}
	}
}

// RetryText is the error event that announces a retry of a failed model
// call.
func RetryText(failed *agentdv1.AssistantMessage, attempt int, delay time.Duration) string {
	return fmt.Sprintf("model call failed (%s); retry %d in %v", failed.GetErrorMessage(), attempt, delay.Round(time.Millisecond))
}

// wait sleeps d unless the run is aborted first; it reports whether it
// slept the whole time.
func (r *run) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// streamOnce makes one attempt of a model call and emits its message
// events. It returns the answer, already in the run's context, and on a
// failure the wait the provider asked for.
func (r *run) streamOnce() (*agentdv1.AssistantMessage, time.Duration, error) {
	llmCtx, err := r.buildContext()
	if err != nil {
		return nil, 0, err
	}
	startedAt := r.cfg.Now()
	var (
		header     *agentdv1.AssistantMessage
		final      *agentdv1.AssistantMessage
		retryAfter time.Duration
		acc        provider.Partial
		sendErr    error
		failure    string
	)
	func() {
		defer func() {
			if p := recover(); p != nil {
				failure = fmt.Sprintf("provider panicked: %v", p)
			}
		}()
		stream := r.cfg.Stream(r.ctx, r.cfg.Model, llmCtx, r.cfg.StreamOptions)
		if stream == nil {
			failure = "provider returned no stream"
			return
		}
		for ev := range stream {
			switch ev.Type {
			case provider.EventStart:
				if header != nil {
					continue
				}
				header = ev.Message
				if header == nil {
					header = r.emptyAssistant(startedAt)
				}
				sendErr = r.em.send(evMessageStart(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: header}}))
			case provider.EventDone, provider.EventError:
				final, retryAfter = ev.Message, ev.RetryAfter
				return
			default:
				if header == nil {
					continue // pi ignores deltas before start
				}
				acc.Add(ev)
				sendErr = r.forwardDelta(ev)
			}
			if sendErr != nil {
				return
			}
		}
	}()
	if sendErr != nil {
		return nil, 0, sendErr
	}
	if final == nil {
		m := r.emptyAssistant(startedAt)
		if header != nil {
			m.Api, m.Provider, m.Model, m.Timestamp = header.GetApi(), header.GetProvider(), header.GetModel(), header.GetTimestamp()
		}
		m.Content = acc.Content()
		if failure == "" {
			failure = errTextNoFinal
		}
		m.StopReason = agentdv1.StopReason_STOP_REASON_ERROR
		m.ErrorMessage = failure
		if r.ctx.Err() != nil {
			m.StopReason = agentdv1.StopReason_STOP_REASON_ABORTED
			m.ErrorMessage = provider.AbortedMessage
		}
		final = m
	}
	if final.GetStopReason() == agentdv1.StopReason_STOP_REASON_UNSPECIFIED {
		final.StopReason = agentdv1.StopReason_STOP_REASON_STOP
	}
	if final.Usage == nil {
		final.Usage = &agentdv1.Usage{Cost: &agentdv1.Cost{}}
	}
	return final, retryAfter, r.appendAssistant(final, header)
}

// appendAssistant adds a finished answer to the run's context and emits
// its message_end, preceded by a message_start when the stream never sent
// one (header nil).
func (r *run) appendAssistant(final, header *agentdv1.AssistantMessage) error {
	am := &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: final}}
	r.recordMu.Lock()
	r.messages = append(r.messages, am)
	r.newMessages = append(r.newMessages, am)
	r.recordMu.Unlock()
	r.lastAssistant = final
	r.addUsage(final.GetUsage())
	if header == nil {
		h := &agentdv1.AssistantMessage{Api: final.GetApi(), Provider: final.GetProvider(), Model: final.GetModel(), Timestamp: final.GetTimestamp()}
		if err := r.em.send(evMessageStart(&agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: h}})); err != nil {
			return err
		}
	}
	return r.em.send(evMessageEnd(am))
}

func (r *run) emptyAssistant(at time.Time) *agentdv1.AssistantMessage {
	return &agentdv1.AssistantMessage{
		Api: r.cfg.Model.API, Provider: r.cfg.Model.Provider, Model: r.cfg.Model.ID,
		Usage: &agentdv1.Usage{Cost: &agentdv1.Cost{}}, Timestamp: timestamppb.New(at),
	}
}

// forwardDelta sends a block event of the model's stream to the run's
// sink as a message_update.
func (r *run) forwardDelta(ev provider.Event) error {
	i := ev.ContentIndex
	switch ev.Type {
	case provider.EventTextStart:
		return r.em.send(evUpdate(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_TextStart{TextStart: &agentdv1.TextStart{ContentIndex: uint32(i)}}}))
	case provider.EventTextDelta:
		return r.em.send(r.em.textDelta(i, ev.Delta))
	case provider.EventTextEnd:
		return r.em.send(evUpdate(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_TextEnd{TextEnd: &agentdv1.TextEnd{ContentIndex: uint32(i), TextSignature: ev.Signature}}}))
	case provider.EventThinkingStart:
		return r.em.send(evUpdate(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_ThinkingStart{ThinkingStart: &agentdv1.ThinkingStart{ContentIndex: uint32(i), Redacted: ev.Redacted}}}))
	case provider.EventThinkingDelta:
		return r.em.send(r.em.thinkingDelta(i, ev.Delta))
	case provider.EventThinkingEnd:
		return r.em.send(evUpdate(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_ThinkingEnd{ThinkingEnd: &agentdv1.ThinkingEnd{ContentIndex: uint32(i), ThinkingSignature: ev.Signature}}}))
	case provider.EventToolCallStart:
		return r.em.send(evUpdate(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_ToolCallStart{ToolCallStart: &agentdv1.ToolCallStart{ContentIndex: uint32(i), Id: ev.ToolCallID, Name: ev.ToolName}}}))
	case provider.EventToolCallDelta:
		return r.em.send(r.em.toolCallDelta(i, ev.Delta))
	case provider.EventToolCallEnd:
		return r.em.send(evUpdate(&agentdv1.MessageUpdate{Delta: &agentdv1.MessageUpdate_ToolCallEnd{ToolCallEnd: &agentdv1.ToolCallEnd{ContentIndex: uint32(i), ToolCall: ev.ToolCall}}}))
	}
	return nil
}
