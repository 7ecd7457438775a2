package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/tools"
)

// Options configure a Service. The zero value of each field means its
// default.
type Options struct {
	// Logger receives operational logs; nil discards them.
	Logger *slog.Logger
	// Tools are extra server-executed tools sessions may enable by name;
	// the built-in workspace tools (package tools) are always offered, and
	// a tool here with a built-in's name replaces it.
	Tools []agentloop.Tool
	// WorkspaceRoots, when set, are the directories a session's
	// workspace_root must lie in; empty allows any existing absolute
	// directory.
	WorkspaceRoots []string
	// WorkspaceTools tunes the built-in tools' limits.
	WorkspaceTools tools.Options
	// Models resolves models of real providers; nil offers only the faux
	// model.
	Models ModelResolver
	// Retry is how failed model calls of real providers are retried; the
	// zero value is pi's policy (3 retries, 2 s doubling, Retry-After
	// honoured). Its OnRetry is set by the service.
	Retry provider.RetryPolicy
	// Limits bound request sizes.
	Limits Limits
	// MaxConcurrentRuns bounds the runs active at once across sessions; a
	// Prompt beyond it gets RESOURCE_EXHAUSTED. Default 1024.
	MaxConcurrentRuns int
	// EventLogLimit is how many events of one run are kept for Attach;
	// older ones are dropped (the transcript stays the durable record).
	// Default 200,000.
	EventLogLimit int
	// FinishedRunRetention is how long the events of a finished run stay
	// available to Attach. Default 10 minutes.
	FinishedRunRetention time.Duration
	// MaxFinishedRuns bounds how many finished runs' events are retained.
	// Default 256.
	MaxFinishedRuns int
	// Metrics receives operational measurements; nil records nothing.
	Metrics *Metrics
	// Now is the clock; defaults to time.Now.
	Now func() time.Time
}

// Service implements agentdv1.AgentServiceServer on top of the agent loop
// and the transcript store.
type Service struct {
	agentdv1.UnimplementedAgentServiceServer

	store          persistence.Store
	logger         *slog.Logger
	tools          map[string]agentloop.Tool
	workspaceRoots []string
	workspaceTools tools.Options
	models         ModelResolver
	retry          provider.RetryPolicy
	limits         Limits
	metrics        *Metrics
	now            func() time.Time
	runs           *runManager
}

// New returns the service over store. It first repairs what an earlier
// process left behind: runs that started and never ended are closed as
// interrupted, and a tool call of theirs that never got a result gets an
// error result, so every session is idle and consistent.
func New(ctx context.Context, store persistence.Store, opts Options) (*Service, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Service{
		store:   store,
		logger:  opts.Logger,
		tools:   make(map[string]agentloop.Tool, len(opts.Tools)),
		models:  opts.Models,
		retry:   opts.Retry,
		limits:  opts.Limits.withDefaults(),
		metrics: opts.Metrics,
		now:     opts.Now,
	}
	for _, root := range opts.WorkspaceRoots {
		resolved, err := filepath.EvalSymlinks(root)
		if err != nil || !filepath.IsAbs(root) {
			return nil, fmt.Errorf("service: workspace root %q must be an existing absolute directory", root)
		}
		s.workspaceRoots = append(s.workspaceRoots, resolved)
	}
	s.workspaceTools = opts.WorkspaceTools
	for _, t := range opts.Tools {
		name := t.Definition().GetName()
		if _, dup := s.tools[name]; dup {
			return nil, fmt.Errorf("service: two server tools are named %q", name)
		}
		s.tools[name] = t
	}
	s.runs = newRunManager(runManagerOptions{
		maxActive:   opts.MaxConcurrentRuns,
		eventLimit:  opts.EventLogLimit,
		retention:   opts.FinishedRunRetention,
		maxFinished: opts.MaxFinishedRuns,
		now:         opts.Now,
		metrics:     opts.Metrics,
		logger:      opts.Logger,
	})
	if err := s.recoverInterruptedRuns(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Close aborts every active run, waits until each has recorded its end
// (or ctx is done), and stops accepting new runs. It does not close the
// store.
func (s *Service) Close(ctx context.Context) error {
	return s.runs.shutdown(ctx)
}

func (s *Service) recoverInterruptedRuns(ctx context.Context) error {
	runs, err := s.store.CloseInterruptedRuns(ctx)
	if err != nil {
		return fmt.Errorf("close interrupted runs: %w", err)
	}
	repaired := map[string]bool{}
	for _, r := range runs {
		if repaired[r.SessionID] {
			continue
		}
		repaired[r.SessionID] = true
		n, err := s.answerOrphanToolCalls(ctx, r.SessionID, r.ID)
		if errors.Is(err, persistence.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("repair session %s after interrupted run %s: %w", r.SessionID, r.ID, err)
		}
		s.logger.WarnContext(ctx, "closed a run interrupted by a stop of agentd", "session", r.SessionID, "run", r.ID, "tool_calls_answered", n)
	}
	return nil
}

// answerOrphanToolCalls appends an error result for every tool call of the
// session's last assistant message that has no result on the current path.
func (s *Service) answerOrphanToolCalls(ctx context.Context, sessionID, runID string) (int, error) {
	path, err := s.store.Path(ctx, sessionID)
	if err != nil {
		return 0, err
	}
	lastAssistant := -1
	for i := len(path) - 1; i >= 0; i-- {
		if path[i].GetMessage().GetAssistant() != nil {
			lastAssistant = i
			break
		}
	}
	if lastAssistant < 0 {
		return 0, nil
	}
	answered := map[string]bool{}
	for _, e := range path[lastAssistant+1:] {
		if tr := e.GetMessage().GetToolResult(); tr != nil {
			answered[tr.GetToolCallId()] = true
		}
	}
	var results []*agentdv1.Entry
	for _, b := range path[lastAssistant].GetMessage().GetAssistant().GetContent() {
		call := b.GetToolCall()
		if call == nil || answered[call.GetId()] {
			continue
		}
		results = append(results, &agentdv1.Entry{RunId: runID, Payload: &agentdv1.Entry_Message{Message: &agentdv1.AgentMessage{
			Kind: &agentdv1.AgentMessage_ToolResult{ToolResult: &agentdv1.ToolResultMessage{
				ToolCallId: call.GetId(),
				ToolName:   call.GetName(),
				Content:    []*agentdv1.ContentBlock{textBlock(provider.NoResultText)},
				IsError:    true,
				Timestamp:  timestamp(s.now()),
			}},
		}}})
	}
	if len(results) == 0 {
		return 0, nil
	}
	return len(results), s.store.Append(ctx, sessionID, results...)
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

// cloneConfig returns a deep copy so that defaults filled in for one run
// never leak into the stored configuration.
func cloneConfig(c *agentdv1.SessionConfig) *agentdv1.SessionConfig {
	if c == nil {
		return &agentdv1.SessionConfig{}
	}
	return proto.Clone(c).(*agentdv1.SessionConfig)
}
