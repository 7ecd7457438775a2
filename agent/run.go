package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agent/contextpolicy"
	"github.com/agentd/agentd/agent/contextview"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/tools"
)

// Run is an active run of a session: its control (cancel, queues, the
// waits for clients) and its event log.
type Run struct {
	a         *Agent
	id        string
	sessionID string
	tenant    string            // the session's
	labels    map[string]string // the session's when the run started, for watchers' label filters
	// ctx is the run's own context: independent of the request that
	// started it, cancelled by Abort, a dropped stream without detach, or
	// shutdown.
	ctx      context.Context
	cancel   context.CancelCauseFunc
	steering *agentloop.Queue
	followUp *agentloop.Queue
	log      *eventLog
	// writer is how the run writes: the store, or its claim on a shared
	// store.
	writer persistence.RunWriter
	// fenced says the run's claim was lost: its writes are refused, and
	// its agent_end says why.
	fenced atomic.Bool
	// pending are the run's tool calls waiting for a client's answer.
	pending pendingCalls
	// approvals are the run's approval rules and what resolving needs.
	approvals runApprovals
	// ws is the session's workspace, opened by the first built-in tool of
	// the run and closed when the run's goroutine returns.
	wsOnce sync.Once
	ws     *tools.Workspace
	wsErr  error
	// launched is closed once the run has started, or failed to
	// (launchErr); an idempotent retry waits for it.
	launched  chan struct{}
	launchErr error
	// done is closed when the run's goroutine has returned.
	done chan struct{}
	// context is the run's context pipeline state; nil until launched.
	context *runContext
	// transcript follows the run's path for the context cache; nil
	// without one.
	transcript *runTranscript
	// budget enforces the session's budget; nil until launched.
	budget *budget
	// span is the run's invoke_agent span; nil without tracing.
	span trace.Span
	// hooks are the session's lifecycle hooks; nil when it has none.
	hooks *hookSet
	// output is the run's output schema and its answers; nil without one.
	output *runOutput
	// refused is set when a USER_PROMPT hook refused the run's prompt:
	// the run ends without storing it, and its Prompt call fails with it.
	refused atomic.Pointer[Error]
	// request is the run's record of what started it (runsettings.go);
	// set before the run is stored.
	request *agentdv1.RunRequest
	// promptPending says the run's prompt is not stored yet (notePrompt).
	promptPending atomic.Bool
	// origin is the subagent's origin its agent_start names; nil for a
	// session no spawn_agent call created (agent/subagents.go).
	origin *agentdv1.SessionOrigin
	// subagents bound the run's children per profile.
	subagents subagentSlots
}

// ID returns the run's id.
func (r *Run) ID() string { return r.id }

// workspace opens the run's workspace once.
func (r *Run) workspace(open func() (*tools.Workspace, error)) (*tools.Workspace, error) {
	r.wsOnce.Do(func() { r.ws, r.wsErr = open() })
	return r.ws, r.wsErr
}

// abort cancels the run and stops its event log from waiting for followers.
func (r *Run) abort(reason string) {
	r.cancel(errors.New(reason))
	r.log.stopThrottling()
}

// abortAndWait cancels the run and waits until its goroutine has returned.
func (r *Run) abortAndWait(ctx context.Context, reason string) error {
	r.abort(reason)
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runID derives a run id from a client's request id, so a retried request
// finds its run (also after a restart, through the store's run records);
// without a request id every run gets a fresh id.
func runID(sessionID, requestID string) string {
	if requestID == "" {
		return RunIDPrefix + persistence.NewID()
	}
	sum := sha256.Sum256([]byte(sessionID + "\x00" + requestID))
	return RunIDPrefix + hex.EncodeToString(sum[:10])
}

// StartRequest says which run Start starts.
type StartRequest struct {
	// SessionID names the session.
	SessionID string
	// RequestID, when set, makes the call idempotent.
	RequestID string
	// Prompt is appended first (Prompt); nil continues from the transcript
	// as it is (Continue).
	Prompt *agentdv1.AgentMessage
	// ParentEntryID, when set, is where the run hangs its messages instead
	// of the leaf (edit and resend): the run's context is the path to it,
	// and the leaf moves to it when the run starts.
	ParentEntryID string
	// FromRoot starts the run on a new root of the tree (edit and resend
	// of the first message): its context is the prompt alone.
	FromRoot bool
	// TenantLimits are the limits of the session's tenant, decided here
	// beside this agent's own.
	TenantLimits TenantLimits
	// Run is the request's per-run settings (model, thinking level,
	// system prompt addition, tool subset, model settings, output schema)
	// and metadata, stored with the run as its RunRequest; nil means none.
	// Method, RequestID, ParentEntryID and FromRoot are filled in from the
	// fields above.
	Run *agentdv1.RunRequest
	// Session is the session as the caller just read it (to check who may
	// run it), so Start does not read it again; nil makes Start read it.
	Session *persistence.Session
	// parent is the live run whose spawn_agent call starts this run of a
	// subagent's session; nil otherwise.
	parent *Run
}

// TenantLimits are what a tenant's runs may use; zero values limit
// nothing.
type TenantLimits struct {
	// MaxConcurrentRuns is the most runs the tenant may have active on
	// this agent at once; a run beyond it is refused with
	// ERROR_REASON_TENANT_LIMIT.
	MaxConcurrentRuns int
	// MaxCostPerDayUSD is the most the tenant's model calls may cost per
	// UTC day; once it is spent, a new run is refused with
	// ERROR_REASON_TENANT_LIMIT until the day ends.
	MaxCostPerDayUSD float64
}

// DayStart is the start of t's day in UTC, when daily limits reset.
func DayStart(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// checkDailyCost refuses a new run of a tenant that spent its daily cost
// limit, naming the limit and when it resets.
func (a *Agent) checkDailyCost(ctx context.Context, tenant string, l TenantLimits) error {
	if l.MaxCostPerDayUSD <= 0 {
		return nil
	}
	now := a.opts.Now()
	start := DayStart(now)
	spent, err := a.store.TenantSpend(ctx, tenant, start)
	if err != nil {
		return fmt.Errorf("sum the spending of tenant %q: %w", tenant, err)
	}
	if spent.CostUSD < l.MaxCostPerDayUSD {
		return nil
	}
	reset := start.Add(24 * time.Hour)
	e := refuse(agentdv1.ErrorReason_ERROR_REASON_TENANT_LIMIT, "tenant %q has spent $%.4f today, its maxCostPerDayUsd is $%.4f (agentd's --auth-config); it resets at %s",
		tenant, spent.CostUSD, l.MaxCostPerDayUSD, reset.Format(time.RFC3339)).with("tenant", tenant, "limit", "maxCostPerDayUsd")
	e.RetryDelay, e.QuotaSubject = reset.Sub(now), "tenant:"+tenant
	return e
}

// Start starts a run of the session, with the request's prompt appended
// first (Prompt), or from the transcript as it is when the prompt is nil
// (Continue), and returns its id; Follow streams its events. The run goes on in the
// background until it ends or is aborted, whatever happens to ctx after
// Start returns, or while it starts: once a run is registered it starts,
// or fails for a reason of its own.
//
// A requestID makes the call idempotent: a retry returns the run the first
// call started, while it runs and after it ended (also after a restart,
// for as long as its events are retained), and never appends the prompt
// again; a retry that arrives while the first call is still starting the
// run waits for that, and gets its outcome.
func (a *Agent) Start(ctx context.Context, req StartRequest) (string, error) {
	sessionID, requestID := req.SessionID, req.RequestID
	sess := req.Session
	if sess == nil || sess.ID != sessionID {
		var err error
		if sess, err = a.store.GetSession(ctx, sessionID); err != nil {
			return "", err
		}
	}
	cfg := proto.CloneOf(sess.Config)
	if err := a.applyRunSettings(sess.Tenant, cfg, req.Run); err != nil {
		return "", err
	}
	model, stream, retry, err := a.modelFor(cfg)
	if err != nil {
		return "", refuse(agentdv1.ErrorReason_ERROR_REASON_MODEL_UNAVAILABLE, "session %q: its model cannot be used now: %v", sessionID, err)
	}
	if err := a.checkModelCeilings(sess.Tenant, cfg); err != nil {
		return "", err
	}
	if err := a.checkDailyCost(ctx, sess.Tenant, req.TenantLimits); err != nil {
		return "", err
	}
	id := runID(sessionID, requestID)
	r, existing, err := a.register(sess, id, cfg, req.TenantLimits.MaxConcurrentRuns)
	if err != nil {
		return "", err
	}
	if existing != nil {
		select {
		case <-existing.launched:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		if existing.launchErr != nil {
			return "", existing.launchErr
		}
		return existing.id, nil
	}
	if a.tracer != nil {
		r.span = a.tracer.startRun(ctx, r, model)
		r.log.setTraceID(r.span.SpanContext().TraceID())
	}
	// From here on the client's cancellation no longer matters: a retry
	// with the same request id may already be waiting for this launch.
	runSess := *sess
	runSess.Config = cfg // the run's configuration: the session's with the request's overrides
	err = a.launch(context.WithoutCancel(ctx), r, &runSess, model, stream, retry, req)
	if errors.Is(err, errStoredRun) {
		// The request started this run earlier, and it is no longer in
		// memory: its events are in the store.
		a.unregister(r, nil)
		return id, nil
	}
	if err != nil {
		a.unregister(r, err)
		return "", err
	}
	close(r.launched)
	return id, nil
}

// toolsUnusable is the refusal of a run or preview whose tools were valid
// when the session was configured and are not now: what changed is the
// server (a workspace root gone, an MCP server no longer configured, a
// ceiling lowered, the sandbox unavailable). A typed refusal keeps its
// kind.
func toolsUnusable(sessionID string, err error) error {
	var typed *Error
	if errors.As(err, &typed) {
		out := *typed
		out.Message = fmt.Sprintf("session %q: its tools cannot be used now: %s", sessionID, typed.Message)
		return &out
	}
	return refuse(agentdv1.ErrorReason_ERROR_REASON_TOOLS_UNAVAILABLE, "session %q: its tools cannot be used now: %v", sessionID, err)
}

// errStoredRun says the run of a request id is in the store already.
var errStoredRun = errors.New("the run was started before")

// register reserves the session for a new run with id runID. When a run
// with that id is already known (an idempotent retry), it returns that run
// as existing instead.
func (a *Agent) register(sess *persistence.Session, runID string, cfg *agentdv1.SessionConfig, maxTenantRuns int) (r, existing *Run, err error) {
	sessionID := sess.ID
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closing {
		return nil, nil, refuse(agentdv1.ErrorReason_ERROR_REASON_SHUTTING_DOWN, "agentd is shutting down; retry against the restarted server")
	}
	if r := a.byID[runID]; r != nil {
		if r.sessionID != sessionID {
			return nil, nil, refuse(agentdv1.ErrorReason_ERROR_REASON_REQUEST_ID_REUSED, "request_id was already used for run %q of another session; use a new request_id", runID)
		}
		return nil, r, nil
	}
	if r := a.bySession[sessionID]; r != nil {
		return nil, nil, busyRefusal(sessionID, r.id)
	}
	if a.appending[sessionID] {
		return nil, nil, refuse(agentdv1.ErrorReason_ERROR_REASON_CONCURRENT_CHANGE, "session %q is being changed by AppendMessages, UpdateSession or Compact; retry when it returns", sessionID)
	}
	if len(a.bySession) >= a.opts.MaxConcurrentRuns {
		e := refuse(agentdv1.ErrorReason_ERROR_REASON_CONCURRENCY_LIMIT,
			"%d runs are active, the most this agentd allows (--max-runs); retry when one ends", len(a.bySession))
		e.QuotaSubject = "agentd"
		return nil, nil, e
	}
	if n := a.tenantRunsLocked(sess.Tenant); maxTenantRuns > 0 && n >= maxTenantRuns {
		e := refuse(agentdv1.ErrorReason_ERROR_REASON_TENANT_LIMIT,
			"tenant %q has %d runs active, the most its max_concurrent_runs allows (agentd's --auth-config); retry when one ends", sess.Tenant, n).
			with("tenant", sess.Tenant, "limit", "maxConcurrentRuns")
		e.QuotaSubject = "tenant:" + sess.Tenant
		return nil, nil, e
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	r = &Run{
		a:         a,
		ctx:       ctx,
		cancel:    cancel,
		id:        runID,
		sessionID: sessionID,
		tenant:    sess.Tenant,
		labels:    sess.Labels,
		steering:  agentloop.NewQueue(cfg.GetSteeringMode()),
		followUp:  agentloop.NewQueue(cfg.GetFollowUpMode()),
		log:       newEventLog(a.store, a.opts.Logger, sessionID, runID),
		writer:    a.store,
		launched:  make(chan struct{}),
		done:      make(chan struct{}),
	}
	r.pending.settled = func(id string, kind waitKind) { a.watch.settled(r, id, kind) }
	a.bySession[sessionID] = r
	a.byID[runID] = r
	a.wg.Add(1)
	a.opts.Metrics.RunStarted()
	return r, nil, nil
}

// unregister forgets a run that never started its loop; launchErr is what
// a retry waiting for it gets.
func (a *Agent) unregister(r *Run, launchErr error) {
	a.mu.Lock()
	if a.bySession[r.sessionID] == r {
		delete(a.bySession, r.sessionID)
	}
	if a.byID[r.id] == r {
		delete(a.byID, r.id)
	}
	a.mu.Unlock()
	r.launchErr = launchErr
	if r.span != nil {
		if launchErr != nil {
			r.span.SetStatus(codes.Error, launchErr.Error())
		}
		r.span.End()
	}
	close(r.launched)
	r.cancel(errors.New("the run never started"))
	close(r.done)
	a.wg.Done()
	a.opts.Metrics.RunEnded()
}

// launch prepares the run (tools, transcript, the run record) and starts
// its loop in the background.
func (a *Agent) launch(ctx context.Context, r *Run, sess *persistence.Session, model provider.Model, stream provider.StreamFunc,
	retry agentloop.RetryFunc, req StartRequest) error {
	requestID, prompt := req.RequestID, req.Prompt
	cfg := sess.Config
	// The run needs only what its model calls see: after a compaction,
	// the summary's kept entries and what follows.
	if req.FromRoot && (prompt == nil || req.ParentEntryID != "") {
		return invalid("from_root", "starts a new root with a prompt; it cannot go with Continue or parent_entry_id")
	}
	path, err := a.runContextPath(ctx, r, req.ParentEntryID, req.FromRoot)
	if err != nil {
		return err
	}
	if err := a.checkStartInDoubt(ctx, r, req, path); err != nil {
		return err
	}
	if r.request, err = a.runRecord(ctx, req, cfg, path); err != nil {
		return err
	}
	var offered mcpTools
	var snapshots []*agentdv1.McpToolsSnapshot
	if len(cfg.GetMcpServers()) > 0 && a.opts.MCP != nil {
		stored := mcpTools{}
		if !req.FromRoot {
			if stored, err = a.storedMCPTools(ctx, r.sessionID, req.ParentEntryID, cfg, path); err != nil {
				return err
			}
		}
		offered, snapshots = a.runMCPTools(ctx, r.sessionID, cfg, stored)
	}
	if a.tracer != nil {
		stream = a.tracer.stream(stream)
	}
	kit, err := a.toolKit(r.tenant, cfg, r, offered)
	if err != nil {
		return toolsUnusable(r.sessionID, err)
	}
	if kit.set, err = runToolSubset(a.schemas, kit.set, req.Run.GetTools()); err != nil {
		return err
	}
	if r.output, err = newRunOutput(cfg, r.request, model, len(kit.set.Definitions()) > 0, a.opts.Now); err != nil {
		return err
	}
	if kit.set, err = r.output.withTool(a.schemas, kit.set); err != nil {
		return toolsUnusable(r.sessionID, err)
	}
	streamOpts, err := runStreamOptions(model, cfg, r.sessionID, kit.set)
	if err != nil {
		return err
	}
	maxTurns := cfg.GetMaxTurns()
	if maxTurns == 0 {
		maxTurns = a.opts.MaxTurns
	}
	if r.budget, err = a.openBudget(ctx, r.sessionID, cfg.GetBudget()); err != nil {
		return err
	}
	if err := a.linkSubagent(ctx, r, sess, req); err != nil {
		return err
	}
	r.approvals.tools, r.approvals.ceiling, r.approvals.root = kit.set, a.opts.Ceilings.ceiling(r.tenant), cfg.GetWorkspaceRoot()
	gate := approvalGate{run: r, policies: kit.policies, now: a.opts.Now,
		timeout:        durationOr(cfg.GetApprovalTimeout(), DefaultApprovalTimeout),
		includeInModel: cfg.GetIncludeApprovalsInModelContext()}
	r.hooks = newHookSet(cfg.GetHooks(), r.id, &r.pending, r.publish, r.report, a.opts.Now, kit.set)
	loopCfg := agentloop.Config{
		Model:          model,
		Stream:         stream,
		StreamOptions:  streamOpts,
		Steering:       r.steering,
		FollowUp:       r.followUp,
		ToolExecution:  cfg.GetToolExecution(),
		BeforeToolCall: gate.before,
		ShouldStopAfterTurn: func(_ context.Context, info agentloop.TurnInfo) bool {
			return r.budget.turnEnded(r, info.Turn, len(info.ToolResults)) || info.Turn >= maxTurns
		},
		Now: a.opts.Now,
	}
	r.hooks.configure(r, &loopCfg)
	r.output.streamOptions(&loopCfg.StreamOptions)
	r.output.configure(&loopCfg)
	rc := &runContext{run: r, shaper: newShaper(cfg, model), stream: stream, view: contextview.NewBuilderSized(path, r.transcriptTokens()), memo: contextpolicy.NewMemo()}
	loopCfg.Context = rc.build
	loopCfg.Retry = rc.retry(retry)
	r.context = rc
	state := agentloop.State{SystemPrompt: cfg.GetSystemPrompt(), Messages: transcriptMessages(path), Tools: kit.set}
	if prompt == nil {
		if err := agentloop.CheckContinue(ctx, state, loopCfg); err != nil {
			return refuse(agentdv1.ErrorReason_ERROR_REASON_CANNOT_CONTINUE, "%v: Continue needs a transcript whose last message the model sees is a user message or a tool result; use Prompt instead", err)
		}
	}
	if err := a.startRun(ctx, r); err != nil {
		var busy *Error
		if errors.As(err, &busy) || !errors.Is(err, persistence.ErrConflict) {
			return err
		}
		stored, gerr := a.store.GetRun(ctx, r.id)
		if gerr != nil {
			return gerr
		}
		if stored.EventsPruned {
			return refuse(agentdv1.ErrorReason_ERROR_REASON_REQUEST_ID_REUSED, "request_id %q was already accepted as run %q, whose events are no longer retained; GetTranscript shows what it stored", requestID, r.id)
		}
		return errStoredRun
	}
	if req.ParentEntryID != "" || req.FromRoot {
		// After StartRun, so an idempotent retry of a run that went on
		// from here never moves the leaf back. An empty id moves it before
		// the first entry.
		if err := r.writer.SetLeaf(ctx, r.sessionID, req.ParentEntryID); err != nil {
			if eerr := r.writer.EndRun(ctx, r.id, persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_ERROR, ErrorMessage: "could not move the leaf: " + err.Error()}); eerr != nil {
				a.opts.Logger.ErrorContext(ctx, "could not record the end of a run that never started", "session", r.sessionID, "run", r.id, "err", eerr)
			}
			return err
		}
	}
	// From here on the run's appends extend the path it read.
	a.followAppends(r)
	if len(snapshots) > 0 {
		// After the leaf moved, so the snapshots hang on the run's branch,
		// before its prompt.
		if err := a.appendEntries(ctx, r.writer, r.sessionID, mcpSnapshotEntries(r.id, snapshots)...); err != nil {
			if eerr := r.writer.EndRun(ctx, r.id, persistence.RunEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_ERROR, ErrorMessage: "could not store the MCP tool snapshots: " + err.Error()}); eerr != nil {
				a.opts.Logger.ErrorContext(ctx, "could not record the end of a run that never started", "session", r.sessionID, "run", r.id, "err", eerr)
			}
			return err
		}
	}
	r.promptPending.Store(prompt != nil)
	go a.execute(r, state, loopCfg, prompt)
	return nil
}

// execute runs the loop and guarantees the run is recorded as ended and its
// log ended and stored, whatever the loop did.
func (a *Agent) execute(r *Run, state agentloop.State, cfg agentloop.Config, prompt *agentdv1.AgentMessage) {
	defer a.exited(r)
	defer r.cancel(nil)
	r.budget.start(r)
	defer r.budget.stop()
	var err error
	ctx := r.ctx
	if r.span != nil {
		ctx = trace.ContextWithSpan(ctx, r.span)
	}
	if prompt != nil {
		_, err = agentloop.Run(ctx, []*agentdv1.AgentMessage{prompt}, state, cfg, r.sink)
	} else {
		_, err = agentloop.Continue(ctx, state, cfg, r.sink)
	}
	if err != nil {
		a.opts.Logger.Warn("run stopped by an internal failure", "session", r.sessionID, "run", r.id, "err", err)
	}
	if !r.log.isEnded() {
		// The loop promises agent_end; should it ever break that promise the
		// session must still become idle and the run be closed.
		msg := "the run ended without agent_end"
		if r.fenced.Load() || errors.Is(err, persistence.ErrFenced) {
			msg = a.leaseLostText(r.id)
		} else if err != nil {
			msg = err.Error()
		}
		end := &agentdv1.AgentEnd{Outcome: agentdv1.RunOutcome_RUN_OUTCOME_ERROR, ErrorMessage: msg}
		ctx := context.WithoutCancel(r.ctx)
		started := r.log.started()
		a.endRun(ctx, r, end)
		// A run always has both ends, even one that failed before starting.
		if !started {
			r.publish(&agentdv1.AgentEvent{Time: timestamppb.New(a.opts.Now()), Event: &agentdv1.AgentEvent_AgentStart{AgentStart: &agentdv1.AgentStart{}}})
		}
		r.publish(&agentdv1.AgentEvent{Time: timestamppb.New(a.opts.Now()), Event: &agentdv1.AgentEvent_AgentEnd{AgentEnd: end}})
		r.storeLastEvents(ctx)
		a.forget(r)
	}
}

// sink persists each message at its message_end before any client sees the
// event, then publishes the event to the run's log and followers.
func (r *Run) sink(ctx context.Context, ev *agentdv1.AgentEvent) error {
	a := r.a
	switch e := ev.GetEvent().(type) {
	case *agentdv1.AgentEvent_MessageEnd:
		r.output.messageEnded(e.MessageEnd.GetMessage())
		entry := &agentdv1.Entry{RunId: r.id, Payload: &agentdv1.Entry_Message{Message: e.MessageEnd.GetMessage()}}
		if err := a.appendEntries(ctx, r.writer, r.sessionID, entry); err != nil {
			if errors.Is(err, persistence.ErrFenced) {
				r.leaseLost()
			}
			a.opts.Logger.ErrorContext(ctx, "could not store a message; aborting the run", "session", r.sessionID, "run", r.id, "err", err)
			return fmt.Errorf("store the message: %w", err)
		}
		e.MessageEnd.EntryId = entry.GetId()
		r.notePrompt(ctx, entry)
		r.context.appendEntry(entry)
		r.publish(ev)
		r.budget.answered(r, entry)
		// The event log covers every message the transcript holds.
		r.log.flushOrWarn()
		return nil
	case *agentdv1.AgentEvent_AgentEnd:
		if refused := r.refusal(); refused != nil {
			e.AgentEnd.Outcome, e.AgentEnd.ErrorMessage = agentdv1.RunOutcome_RUN_OUTCOME_ERROR, refused.Message
		}
		if r.fenced.Load() {
			e.AgentEnd.ErrorMessage = a.leaseLostText(r.id)
		} else if errEv := r.budget.end(e.AgentEnd, a.opts.Now()); errEv != nil {
			r.publish(errEv)
		} else if errEv := r.output.end(e.AgentEnd); errEv != nil {
			r.publish(errEv)
		}
		a.endRun(ctx, r, e.AgentEnd)
		r.publish(ev)
		r.storeLastEvents(ctx)
		a.forget(r)
		return nil
	}
	r.markSubagent(ev)
	r.publish(ev)
	return nil
}

// publish logs an event for followers (the log stores it in a batch).
func (r *Run) publish(ev *agentdv1.AgentEvent) {
	r.decorate(ev)
	if _, _, _, waits := requestOf(ev); waits {
		// A client that saw the request must find it pending: the watch
		// has it before the run's followers can read it.
		if r.log.appendThen(ev, func() { r.a.watch.runEvent(r, ev) }) {
			r.a.opts.Metrics.EventProduced()
		}
		return
	}
	if r.log.append(ev) {
		r.a.opts.Metrics.EventProduced()
		r.a.watch.runEvent(r, ev)
	}
}

// storeLastEvents stores the events of an ended run, trying a few times:
// afterwards the run holds no events in memory, and Attach reads them from
// the store.
func (r *Run) storeLastEvents(ctx context.Context) {
	var err error
	for attempt := range 3 {
		if err = r.log.flush(ctx); err == nil {
			return
		}
		time.Sleep(time.Duration(attempt+1) * 50 * time.Millisecond)
	}
	r.a.opts.Logger.ErrorContext(ctx, "could not store the last events of a run; Attach will miss them", "session", r.sessionID, "run", r.id, "err", err)
	r.log.release()
}

// endRun records the run's end and frees the session before agent_end
// becomes visible, so a client that sees agent_end can prompt again at
// once. Messages queued too late to be delivered are reported, not lost
// silently.
func (a *Agent) endRun(ctx context.Context, r *Run, end *agentdv1.AgentEnd) {
	endRunSpan(r.span, end)
	if err := r.writer.EndRun(ctx, r.id, runEnd(end)); err != nil {
		a.opts.Logger.ErrorContext(ctx, "could not record the end of a run; it will be closed as interrupted at the next start",
			"session", r.sessionID, "run", r.id, "err", err)
	}
	// Before the session is free, so its next prompt finds the path.
	a.cacheContext(r)
	if undelivered := a.finish(r); len(undelivered) > 0 {
		r.publish(&agentdv1.AgentEvent{Time: timestamppb.New(a.opts.Now()), Event: &agentdv1.AgentEvent_Error{Error: &agentdv1.AgentError{
			Message: fmt.Sprintf("%d queued message(s) arrived after the run had stopped and were not delivered; send them again with Prompt", len(undelivered)),
			Stage:   "queue",
		}}})
	}
}

// finish marks the session idle. It returns the messages still queued,
// which the run can no longer deliver.
func (a *Agent) finish(r *Run) (undelivered []*agentdv1.AgentMessage) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.bySession[r.sessionID] == r {
		delete(a.bySession, r.sessionID)
		a.opts.Metrics.RunEnded()
	}
	// Steer and FollowUp push under a.mu after checking bySession, so no
	// message can be queued after this point.
	return append(r.steering.Clear(), r.followUp.Clear()...)
}

// forget drops an ended run whose events are stored: from now on Attach
// reads them from the store, and the run holds nothing in memory.
func (a *Agent) forget(r *Run) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byID[r.id] == r {
		delete(a.byID, r.id)
	}
}

// exited records that the run's goroutine returned.
func (a *Agent) exited(r *Run) {
	if r.ws != nil {
		r.ws.Close()
	}
	close(r.done)
	a.wg.Done()
}
