package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentd/agentd/agent/contextpolicy"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/tools"
	"github.com/agentd/agentd/tools/mcp"
	"github.com/agentd/agentd/tools/sandbox"
)

// Limits the agent applies to every session.
const (
	// MaxTools bounds the tools of a session.
	MaxTools = 128
	// MaxNameBytes bounds the short names a client chooses: entry labels,
	// context block names, session label keys, request ids and who
	// decided or redacted.
	MaxNameBytes = 128
	// DefaultMaxTurns is the most turns one run may take when neither the
	// session nor Options.MaxTurns says otherwise.
	DefaultMaxTurns = 1000
	// DefaultEventRetention is how long the event log of a finished run is
	// kept for Attach.
	DefaultEventRetention = 24 * time.Hour
	// DefaultMaxConcurrentRuns bounds the runs active at once.
	DefaultMaxConcurrentRuns = 1024
)

// maxCachedSchemas bounds the compiled tool schemas the agent keeps: a
// few hundred kilobytes, room for every tool of many different sessions.
const maxCachedSchemas = 1024

// Options configure an Agent. The zero value of each field means its
// default.
type Options struct {
	// Logger receives operational logs; nil discards them.
	Logger *slog.Logger
	// SchemaVersion is the store's schema version, written into the header
	// of an exported session.
	SchemaVersion int
	// Tools are extra server-executed tools sessions may enable by name;
	// the built-in workspace tools (package tools) are always offered, and
	// a tool here with a built-in's name replaces it.
	Tools []agentloop.Tool
	// WorkspaceTools tunes the built-in tools' limits.
	WorkspaceTools tools.Options
	// Sandbox confines the commands of the built-in bash tool. When it
	// cannot confine on this machine, sessions enabling bash are refused
	// (ErrPrecondition, REFUSAL_SANDBOX_UNAVAILABLE). nil runs bash
	// unconfined, with agentd's authority: the operator turned the sandbox
	// off.
	Sandbox *sandbox.Sandbox
	// ToolEnv are "NAME=value" entries added to the minimal environment
	// of every bash command.
	ToolEnv []string
	// Protected are files no workspace may expose: agentd's database, the
	// files it was configured with. A workspace_root that lies inside the
	// directory of one, or holds it, is refused, like "/".
	Protected []Protected
	// Ceilings bound what each tenant's sessions may enable.
	Ceilings Ceilings
	// MCP holds the MCP servers sessions may enable
	// (SessionConfig.mcp_servers); nil offers none. Its owner closes it
	// after the agent.
	MCP *mcp.Manager
	// Models resolves models of real providers; nil offers only the faux
	// model.
	Models ModelResolver
	// Retry is how failed calls to real providers are retried; the zero
	// value is pi's policy (3 retries, 2 s doubling, Retry-After honoured).
	Retry provider.RetryPolicy
	// MaxTurns bounds SessionConfig.max_turns, and is the default when a
	// session leaves it 0. Default DefaultMaxTurns.
	MaxTurns uint32
	// MaxConcurrentRuns bounds the runs active at once across sessions; a
	// run beyond it is refused with ErrLimit. Default
	// DefaultMaxConcurrentRuns.
	MaxConcurrentRuns int
	// EventRetention is how long the event logs of finished runs are kept;
	// older ones are pruned in the background (the transcript stays).
	// Default DefaultEventRetention.
	EventRetention time.Duration
	// Retention is how long sessions no one touched are kept; the zero
	// value keeps them for ever.
	Retention Retention
	// Metrics receives operational measurements; nil records nothing.
	Metrics Metrics
	// Now is the clock; defaults to time.Now.
	Now func() time.Time
	// ReplicaID names this agentd among the replicas that share a store
	// ([persistence.Shared]): the owner recorded with each run it claims.
	// Required with a shared store; ignored otherwise.
	ReplicaID string
	// Lease is how long this replica's claim on a run lasts without a
	// renewal, on a shared store. Default DefaultLease.
	Lease time.Duration
	// TracerProvider, when set, makes each run an invoke_agent span (a
	// child of the span of the request that started it), each model call
	// a chat span and each tool call an execute_tool span, with the
	// OpenTelemetry GenAI semantic conventions' attributes, and puts the
	// trace id on every event. nil traces nothing.
	TracerProvider trace.TracerProvider
	// CaptureContent records messages, tool arguments and results on the
	// spans; off by default, as they may hold personal data.
	CaptureContent bool
	// WatchHistory is how many recent changes are kept for watchers
	// resuming from a cursor. Default DefaultWatchHistory.
	WatchHistory int
	// WatchBuffer is how many changes one watcher may fall behind before
	// it is told to resync. Default DefaultWatchBuffer.
	WatchBuffer int
	// ContextCacheBytes bounds the context paths kept in memory for the
	// sessions that ran last, so their next prompt does not read its
	// conversation from the store again (an entry counts its encoded size
	// and 1 KiB, about what it takes decoded). Default
	// DefaultContextCacheBytes; negative keeps none.
	ContextCacheBytes int
}

// Protected is a file no workspace may expose, and what it is.
type Protected struct {
	// Path of the file.
	Path string
	// What names it in refusals, such as "database" or "--auth-config
	// file".
	What string
}

// protectedDir is the directory of a Protected file, resolved.
type protectedDir struct{ dir, what string }

// Metrics receives the agent's operational measurements.
type Metrics interface {
	// RunStarted counts a run that became active.
	RunStarted()
	// RunEnded counts a run that is no longer active.
	RunEnded()
	// EventProduced counts an event a run logged.
	EventProduced()
	// StoreLatency observes how long a store write (op) took.
	StoreLatency(op string, d time.Duration)
	// LeasesHeld reports how many run leases this replica holds.
	LeasesHeld(n int)
	// LeaseLost counts a run whose lease this replica lost while it ran.
	LeaseLost()
	// SessionExpired counts a session the retention sweep deleted.
	SessionExpired()
	// ContextCacheBytes reports what the context cache holds now.
	ContextCacheBytes(n int)
}

// noMetrics records nothing.
type noMetrics struct{}

func (noMetrics) RunStarted()                        {}
func (noMetrics) RunEnded()                          {}
func (noMetrics) EventProduced()                     {}
func (noMetrics) StoreLatency(string, time.Duration) {}
func (noMetrics) LeasesHeld(int)                     {}
func (noMetrics) LeaseLost()                         {}
func (noMetrics) SessionExpired()                    {}
func (noMetrics) ContextCacheBytes(int)              {}

// Agent runs the agent loop for the sessions of one store: the Go
// counterpart of pi's Agent class, for many sessions at once. It owns one
// active run per session, the persisting sink (each message is committed
// at its message_end before the event is published), each run's event log
// (in memory while the run streams, durable in the store in batches), the
// waits for client-executed tools and approvals, retries of failed model
// calls, and the repair of runs a stopped agentd left behind.
//
// On a store with one owner (the SQLite engine locks its file) an Agent
// assumes it is the only one writing runs. On a shared store
// ([persistence.Shared]) several agents, the replicas, serve the same
// sessions: each run is claimed by one replica with a lease it renews,
// its writes are fenced by that claim, runs whose lease expired are
// closed by whichever replica sees it first, followers read another
// replica's run from the store when it signals new events, and requests
// for another replica's run are handed to it through the store.
type Agent struct {
	store     persistence.Store
	shared    persistence.Shared // nil unless the store is shared
	opts      Options
	tools     map[string]agentloop.Tool
	protected []protectedDir
	tracer    *tracer // nil without a TracerProvider
	watch     *watchHub
	// schemas keeps the tools' compiled parameter schemas: every run
	// builds its tool set, mostly of the same tools.
	schemas *agentloop.SchemaCache
	// contexts keeps the context paths of the sessions that ran last; nil
	// when Options.ContextCacheBytes is negative.
	contexts *contextCache

	mu        sync.Mutex
	bySession map[string]*Run // active runs
	byID      map[string]*Run // active runs, and ended ones until their log is stored
	appending map[string]bool // sessions held by AppendMessages
	// compacting are the lifecycle hooks of the manual compactions
	// (Compact) running here, by session.
	compacting map[string]*hookSet
	closing    bool
	wg         sync.WaitGroup // run goroutines

	stop chan struct{}  // closed by Close: background loops return
	bg   sync.WaitGroup // background loops
	// feedDone is closed by Close once every run ended (a shared store
	// only): the feed's writer stores what is left and returns.
	feedDone     chan struct{}
	feedDoneOnce sync.Once
}

// New returns an agent over store. It first repairs what an earlier
// process left behind: runs that started and never ended are closed as
// interrupted, a tool call of theirs that never got a result gets an error
// result, and their event logs end with the repair's agent_end, so every
// session is idle and consistent and Attach ends. Then it prunes expired
// event logs, now and periodically, until Close.
func New(ctx context.Context, store persistence.Store, opts Options) (*Agent, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = noMetrics{}
	}
	if opts.MaxTurns == 0 {
		opts.MaxTurns = DefaultMaxTurns
	}
	if opts.MaxConcurrentRuns <= 0 {
		opts.MaxConcurrentRuns = DefaultMaxConcurrentRuns
	}
	if opts.EventRetention <= 0 {
		opts.EventRetention = DefaultEventRetention
	}
	a := &Agent{
		store:      store,
		opts:       opts,
		tools:      make(map[string]agentloop.Tool, len(opts.Tools)),
		bySession:  map[string]*Run{},
		byID:       map[string]*Run{},
		appending:  map[string]bool{},
		compacting: map[string]*hookSet{},
		stop:       make(chan struct{}),
		watch:      newWatchHub(opts.WatchHistory, opts.WatchBuffer, opts.Now),
		schemas:    agentloop.NewSchemaCache(maxCachedSchemas),
		contexts:   newContextCache(opts.ContextCacheBytes, opts.Metrics.ContextCacheBytes),
	}
	if opts.TracerProvider != nil {
		t := newTracer(opts.TracerProvider, opts.CaptureContent)
		a.tracer = &t
	}
	if shared, ok := store.(persistence.Shared); ok {
		if opts.ReplicaID == "" {
			return nil, errors.New("agent: a shared store needs Options.ReplicaID")
		}
		if opts.Lease <= 0 {
			opts.Lease = DefaultLease
		}
		a.opts.Lease = opts.Lease
		a.shared = shared
	}
	for _, p := range opts.Protected {
		dir := filepath.Dir(filepath.Clean(p.Path))
		if resolved, err := filepath.EvalSymlinks(dir); err == nil {
			dir = resolved
		}
		if !filepath.IsAbs(dir) {
			abs, err := filepath.Abs(dir)
			if err != nil {
				return nil, fmt.Errorf("agent: protected %s %q: %w", p.What, p.Path, err)
			}
			dir = abs
		}
		a.protected = append(a.protected, protectedDir{dir: dir, what: p.What})
	}
	for _, t := range opts.Tools {
		name := t.Definition().GetName()
		if _, dup := a.tools[name]; dup {
			return nil, fmt.Errorf("agent: two server tools are named %q", name)
		}
		a.tools[name] = t
	}
	// The ceilings are resolved in a copy: the caller's stay as given.
	a.opts.Ceilings.Tenants = maps.Clone(opts.Ceilings.Tenants)
	a.opts.Ceilings.Default.WorkspaceRoots.Values = slices.Clone(opts.Ceilings.Default.WorkspaceRoots.Values)
	for name, c := range a.opts.Ceilings.Tenants {
		c.WorkspaceRoots.Values = slices.Clone(c.WorkspaceRoots.Values)
		a.opts.Ceilings.Tenants[name] = c
	}
	if err := a.checkCeilings(&a.opts.Ceilings); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if a.shared != nil {
		if err := a.startFeed(ctx); err != nil {
			return nil, err
		}
	}
	if err := a.repair(ctx); err != nil {
		a.closeFeed()
		close(a.stop)
		a.bg.Wait()
		return nil, err
	}
	a.bg.Add(1)
	go a.pruneLoop()
	if opts.Retention.any() {
		a.bg.Add(1)
		go a.retentionLoop()
	}
	if a.shared != nil {
		a.bg.Add(3)
		go a.leaseLoop()
		go a.repairLoop()
		go a.controlLoop()
	}
	return a, nil
}

// Close refuses new runs, aborts the active ones, waits until each has
// recorded its end and stored its events (or ctx is done), and stops
// pruning. It does not close the store.
func (a *Agent) Close(ctx context.Context) error {
	a.mu.Lock()
	first := !a.closing
	a.closing = true
	active := make([]*Run, 0, len(a.bySession))
	for _, r := range a.bySession {
		active = append(active, r)
	}
	a.mu.Unlock()
	if first {
		close(a.stop)
	}
	for _, r := range active {
		r.abort("agentd is shutting down")
	}
	done := make(chan struct{})
	go func() {
		a.wg.Wait()
		a.closeFeed()
		a.bg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closeFeed lets the feed's writer finish (a shared store only).
func (a *Agent) closeFeed() {
	a.feedDoneOnce.Do(func() {
		if a.feedDone != nil {
			close(a.feedDone)
		}
	})
}

// CheckConfig checks the parts of a session configuration of tenant that
// depend on this agent: the model (a *FieldError, or an *Error with
// ErrPrecondition when its provider is not configured), the turn limit,
// the workspace root, the sandbox settings and the tools, including that
// every tool's schema compiles, so a run never fails on its
// configuration; and that the tenant's ceiling allows all of it (an
// *Error with ErrPermission otherwise).
func (a *Agent) CheckConfig(tenant string, cfg *agentdv1.SessionConfig) error {
	// The ceilings first: what a tenant may not use, it need not learn
	// more about.
	if err := a.checkModelCeilings(tenant, cfg); err != nil {
		return err
	}
	if err := a.checkModel(cfg.GetModel()); err != nil {
		return err
	}
	if cfg.GetMaxTurns() > a.opts.MaxTurns {
		return invalid("config.max_turns", "%d exceeds the limit of %d", cfg.GetMaxTurns(), a.opts.MaxTurns)
	}
	if root := cfg.GetWorkspaceRoot(); root != "" {
		if _, err := a.checkWorkspaceRoot(tenant, root); err != nil {
			return err
		}
	}
	if err := checkSandboxSettings(cfg.GetSandbox()); err != nil {
		return err
	}
	if err := checkContextConfig(cfg); err != nil {
		return err
	}
	if err := checkHooks(cfg.GetHooks()); err != nil {
		return err
	}
	if err := checkBudget(cfg.GetBudget()); err != nil {
		return err
	}
	if err := checkOutputConfig(cfg); err != nil {
		return err
	}
	if ref := cfg.GetCompaction().GetModel(); ref != nil {
		if err := a.checkModel(ref); err != nil {
			if fe, ok := err.(*FieldError); ok {
				fe.Field = strings.Replace(fe.Field, "config.model", "config.compaction.model", 1)
			}
			return err
		}
	}
	if err := checkSpawnReserved(cfg); err != nil {
		return err
	}
	if _, err := a.toolKit(tenant, cfg, nil, nil); err != nil {
		return err
	}
	return a.checkSubagents(tenant, cfg)
}

// checkModelCeilings refuses a model or compaction model beyond the
// tenant's ceiling.
func (a *Agent) checkModelCeilings(tenant string, cfg *agentdv1.SessionConfig) error {
	c := a.opts.Ceilings.ceiling(tenant)
	if err := c.checkModel(tenant, "config.model", cfg.GetModel()); err != nil {
		return err
	}
	if ref := cfg.GetCompaction().GetModel(); ref != nil {
		return c.checkModel(tenant, "config.compaction.model", ref)
	}
	return nil
}

// checkContextConfig checks the context policy, blocks, hook and
// compaction settings.
func checkContextConfig(cfg *agentdv1.SessionConfig) error {
	if field, err := contextpolicy.Check("config.context_policy", cfg.GetContextPolicy()); err != nil {
		return invalid(field, "%v", err)
	}
	if n := len(cfg.GetContextBlocks()); n > MaxContextBlocks {
		return invalid("config.context_blocks", "%d blocks exceed the limit of %d", n, MaxContextBlocks)
	}
	names := map[string]bool{}
	for i, b := range cfg.GetContextBlocks() {
		if b.GetName() == "" || len(b.GetName()) > MaxNameBytes {
			return invalid(fmt.Sprintf("config.context_blocks[%d].name", i), "needs 1 to %d bytes", MaxNameBytes)
		}
		if names[b.GetName()] {
			return invalid(fmt.Sprintf("config.context_blocks[%d].name", i), "%q is used twice; block names are unique", truncate(b.GetName(), 70))
		}
		names[b.GetName()] = true
	}
	if d := cfg.GetContextHook().GetTimeout(); d != nil && (d.AsDuration() <= 0 || d.AsDuration() > MaxContextHookTimeout) {
		return invalid("config.context_hook.timeout", "%v is out of range (above 0, at most %v)", d.AsDuration(), MaxContextHookTimeout)
	}
	if c := cfg.GetCompaction(); c.GetReserveTokens() < 0 || c.GetKeepRecentTokens() < 0 {
		return invalid("config.compaction", "reserve_tokens and keep_recent_tokens may not be negative (0 means the default)")
	}
	if cfg.GetFaux().GetContextWindow() < 0 {
		return invalid("config.faux.context_window", "may not be negative (0 means 128000)")
	}
	return nil
}

// MaxContextBlocks bounds SessionConfig.context_blocks.
const MaxContextBlocks = 64

// ActiveRun returns the id of the session's active run, on this replica
// or (on a shared store) another one, or "".
func (a *Agent) ActiveRun(ctx context.Context, sessionID string) (string, error) {
	if r := a.active(sessionID); r != nil {
		return r.id, nil
	}
	run, err := a.remoteRun(ctx, sessionID)
	if err != nil || run == nil {
		return "", err
	}
	return run.ID, nil
}

// TenantRuns returns how many runs of the sessions of tenant are active
// on this agent.
func (a *Agent) TenantRuns(tenant string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tenantRunsLocked(tenant)
}

func (a *Agent) tenantRunsLocked(tenant string) int {
	n := 0
	for _, r := range a.bySession {
		if r.tenant == tenant {
			n++
		}
	}
	return n
}

// active returns the session's active run, or nil.
func (a *Agent) active(sessionID string) *Run {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bySession[sessionID]
}

// lookup returns a run this agent runs (or has just ended and is storing),
// or nil.
func (a *Agent) lookup(runID string) *Run {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byID[runID]
}

// DeleteSession deletes a session with its transcript, runs and event
// logs. A session with an active run is refused with ErrBusy unless force
// is set, which aborts the run first.
func (a *Agent) DeleteSession(ctx context.Context, sessionID string, force bool) error {
	if r := a.active(sessionID); r != nil {
		if !force {
			return deleteBusy(sessionID, r.id)
		}
		if err := r.abortAndWait(ctx, "session deleted"); err != nil {
			return err
		}
	} else if run, err := a.remoteRun(ctx, sessionID); err != nil {
		return err
	} else if run != nil {
		if !force {
			return deleteBusy(sessionID, run.ID)
		}
		if _, err := a.Abort(ctx, sessionID, run.ID); err != nil && !errors.Is(err, ErrIdle) {
			return err
		}
	}
	gone, err := a.store.GetSession(ctx, sessionID)
	if err != nil {
		return err
	}
	if err := a.store.DeleteSession(ctx, sessionID); err != nil {
		return err
	}
	a.contexts.drop(sessionID)
	a.publishSession(gone, ChangeDeleted, nil)
	return nil
}

func deleteBusy(sessionID, runID string) error {
	return refuse(agentdv1.ErrorReason_ERROR_REASON_SESSION_BUSY, "session %q has an active run %q: Abort it first, wait for agent_end, or set force to abort and delete", sessionID, runID)
}

// appendEntries writes entries through w (the store, or a run's claim on
// it) and measures the store's latency.
func (a *Agent) appendEntries(ctx context.Context, w persistence.RunWriter, sessionID string, entries ...*agentdv1.Entry) error {
	start := time.Now()
	err := w.Append(ctx, sessionID, entries...)
	a.opts.Metrics.StoreLatency("append", time.Since(start))
	return err
}

// transcriptMessages returns the messages on a path, skipping entries that
// are not messages.
func transcriptMessages(path []*agentdv1.Entry) []*agentdv1.AgentMessage {
	msgs := make([]*agentdv1.AgentMessage, 0, len(path))
	for _, e := range path {
		if m := e.GetMessage(); m != nil {
			msgs = append(msgs, m)
		}
	}
	return msgs
}
