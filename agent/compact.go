package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agent/compaction"
	"github.com/agentd/agentd/agent/contextview"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/provider"
)

// compactor runs one compaction for a run or for Compact.
type compactor struct {
	a           *Agent
	sessionID   string
	shaper      shaper
	stream      provider.StreamFunc
	publish     func(*agentdv1.AgentEvent)
	appendEntry func(*agentdv1.Entry)
	// writer stores the summary: the store, or the run's claim on it.
	writer persistence.RunWriter
	// hooks are asked before the compaction (PRE_COMPACT); nil when the
	// session has none.
	hooks *hookSet
}

// errNothingToCompact says a view is too short to compact.
var errNothingToCompact = errors.New("nothing to compact: the whole conversation is within the part kept verbatim (keep_recent_tokens)")

// run plans, summarizes and stores a compaction of path. A failure is
// reported in compaction_end and returned.
func (c compactor) run(ctx context.Context, path []*agentdv1.Entry, reason agentdv1.CompactionReason, instructions, summary string, keepRecent int64, dryRun bool) (*agentdv1.Entry, error) {
	now := c.a.opts.Now
	ev := func(e any) {
		out := &agentdv1.AgentEvent{Time: timestamppb.New(now())}
		switch x := e.(type) {
		case *agentdv1.CompactionStart:
			out.Event = &agentdv1.AgentEvent_CompactionStart{CompactionStart: x}
		case *agentdv1.CompactionEnd:
			out.Event = &agentdv1.AgentEvent_CompactionEnd{CompactionEnd: x}
		}
		c.publish(out)
	}
	if keepRecent <= 0 {
		keepRecent = c.shaper.settings.KeepRecentTokens
	}
	view := contextview.FromPath(path)
	plan, ok := compaction.Prepare(view, keepRecent)
	end := &agentdv1.CompactionEnd{Reason: reason, TokensBefore: plan.TokensBefore, DryRun: dryRun}
	if !ok {
		end.ErrorMessage = errNothingToCompact.Error()
		ev(end)
		return nil, errNothingToCompact
	}
	end.FirstKeptEntryId = plan.FirstKeptEntryID
	end.SummarizedMessages = uint32(len(plan.Summarize))
	if dryRun {
		end.TokensAfter = c.tokensAfter(path, &agentdv1.Entry{Id: "dry-run", Payload: &agentdv1.Entry_Message{Message: summaryMessage(plan, "", reason, now())}})
		ev(end)
		return nil, nil
	}
	if c.hooks.has(agentdv1.HookEvent_HOOK_EVENT_PRE_COMPACT) {
		instr, notices, err := c.hooks.preCompact(ctx, reason, plan.TokensBefore, instructions)
		if serr := c.storeNotices(ctx, notices); serr != nil && err == nil {
			err = serr
		}
		if err != nil {
			end.ErrorMessage = err.Error()
			ev(end)
			return nil, err
		}
		instructions = instr
	}
	ev(&agentdv1.CompactionStart{Reason: reason, TokensBefore: plan.TokensBefore})
	if summary == "" {
		var err error
		summary, err = c.summarize(ctx, plan, instructions)
		if err != nil {
			end.ErrorMessage = "compaction failed: " + err.Error()
			ev(end)
			return nil, err
		}
	}
	msg := summaryMessage(plan, summary, reason, now())
	entry := &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: msg}}
	msg.GetCompactionSummary().TokensAfter = c.tokensAfter(path, entry)
	if err := c.a.appendEntries(context.WithoutCancel(ctx), c.writer, c.sessionID, entry); err != nil {
		end.ErrorMessage = "compaction failed: store the summary: " + err.Error()
		ev(end)
		return nil, err
	}
	c.appendEntry(entry)
	end.EntryId, end.TokensAfter, end.Summary = entry.GetId(), msg.GetCompactionSummary().GetTokensAfter(), msg.GetCompactionSummary()
	ev(end)
	return entry, nil
}

// storeNotices stores the hook notices of a compaction before its summary.
func (c compactor) storeNotices(ctx context.Context, notices []*agentdv1.AgentMessage) error {
	if len(notices) == 0 {
		return nil
	}
	entries := make([]*agentdv1.Entry, len(notices))
	for i, m := range notices {
		entries[i] = &agentdv1.Entry{Payload: &agentdv1.Entry_Message{Message: m}}
	}
	if err := c.a.appendEntries(context.WithoutCancel(ctx), c.writer, c.sessionID, entries...); err != nil {
		return fmt.Errorf("store the hook notices of the compaction: %w", err)
	}
	for _, e := range entries {
		c.appendEntry(e)
	}
	return nil
}

// summaryMessage is the CompactionSummary of a plan.
func summaryMessage(plan compaction.Plan, summary string, reason agentdv1.CompactionReason, at time.Time) *agentdv1.AgentMessage {
	files := compaction.Files(plan.PreviousSummary, plan.Summarize)
	return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_CompactionSummary{CompactionSummary: &agentdv1.CompactionSummary{
		Summary:          compaction.WithFiles(summary, files),
		FirstKeptEntryId: plan.FirstKeptEntryID,
		TokensBefore:     plan.TokensBefore,
		Timestamp:        timestamppb.New(at),
		Reason:           reason,
		ReadFiles:        files.Read,
		ModifiedFiles:    files.Modified,
	}}}
}

// tokensAfter estimates the view of path once entry is appended.
func (c compactor) tokensAfter(path []*agentdv1.Entry, entry *agentdv1.Entry) int64 {
	after := append(append([]*agentdv1.Entry(nil), path...), entry)
	return c.shaper.estimate(contextview.FromPath(after)).Total
}

// summarize asks the summary model (the session's unless the settings name
// one) for the summary. The faux model answers from its script.
func (c compactor) summarize(ctx context.Context, plan compaction.Plan, instructions string) (string, error) {
	cfg := c.shaper.cfg
	ref := cfg.GetCompaction().GetModel()
	if ref == nil {
		ref = cfg.GetModel()
	}
	if isFaux(ref) {
		if s := cfg.GetFaux().GetSummaries(); len(s) > 0 {
			// The script is indexed by the compactions of the whole path,
			// not only of the part a context is built from.
			full, err := c.a.store.Path(ctx, c.sessionID)
			if err != nil {
				return "", err
			}
			n := 0
			for _, e := range full {
				if e.GetMessage().GetCompactionSummary() != nil {
					n++
				}
			}
			if n < len(s) {
				return s[n], nil
			}
		}
		return compaction.Digest(plan), nil
	}
	model, stream := c.shaper.model, c.stream
	if cfg.GetCompaction().GetModel() != nil {
		var err error
		if model, stream, _, err = c.a.modelFor(&agentdv1.SessionConfig{Model: ref}); err != nil {
			return "", fmt.Errorf("the summary model cannot be used: %w", err)
		}
	}
	req := compaction.Request(plan, instructions)
	opts := provider.Options{MaxTokens: c.shaper.settings.ReserveTokens * 8 / 10, SessionID: c.sessionID}
	if model.MaxOutputTokens > 0 {
		opts.MaxTokens = min(opts.MaxTokens, model.MaxOutputTokens)
	}
	var final *agentdv1.AssistantMessage
	for ev := range stream(ctx, model, req, opts) {
		if ev.Type == provider.EventDone || ev.Type == provider.EventError {
			final = ev.Message
		}
	}
	if final == nil {
		return "", errors.New("the summary model's stream ended without an answer")
	}
	if provider.IsFailedAnswer(final) {
		return "", fmt.Errorf("the summary model failed: %s", final.GetErrorMessage())
	}
	var b strings.Builder
	for _, blk := range final.GetContent() {
		if t := blk.GetText(); t != nil {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(t.GetText())
		}
	}
	if strings.TrimSpace(b.String()) == "" {
		return "", errors.New("the summary model answered without text")
	}
	return b.String(), nil
}

// CompactOptions are the inputs of a manual compaction.
type CompactOptions struct {
	// Instructions focus the summary.
	Instructions string
	// Summary is a summary the client wrote; no model is called.
	Summary string
	// KeepRecentTokens overrides the session's setting when positive.
	KeepRecentTokens int64
	// DryRun only plans: compaction_end carries the cut point and token
	// counts, and nothing is stored.
	DryRun bool
}

// Compact compacts an idle session's conversation and sends
// compaction_start and compaction_end (only compaction_end for a dry run),
// numbered from 1. A summarizer failure is reported in compaction_end and
// is not an error. ErrBusy while a run is active; ErrPrecondition when
// there is nothing to compact, or when a PRE_COMPACT hook vetoed the
// compaction (the refusal names the hook).
func (a *Agent) Compact(ctx context.Context, sessionID string, opts CompactOptions, send func(*agentdv1.AgentEvent) error) error {
	release, err := a.hold(ctx, sessionID, "Compact")
	if err != nil {
		return err
	}
	defer release()
	sess, err := a.store.GetSession(ctx, sessionID)
	if err != nil {
		return err
	}
	path, err := a.store.ContextPath(ctx, sessionID)
	if err != nil {
		return err
	}
	model, stream, _, merr := a.modelFor(sess.Config)
	sh := newShaper(sess.Config, model)
	keep := opts.KeepRecentTokens
	if keep <= 0 {
		keep = sh.settings.KeepRecentTokens
	}
	if _, ok := compaction.Prepare(contextview.FromPath(path), keep); !ok {
		return refuse(agentdv1.ErrorReason_ERROR_REASON_NOTHING_TO_COMPACT, "session %q: %v", sessionID, errNothingToCompact)
	}
	if merr != nil && opts.Summary == "" && !opts.DryRun && sess.Config.GetCompaction().GetModel() == nil {
		return refuse(agentdv1.ErrorReason_ERROR_REASON_MODEL_UNAVAILABLE, "session %q: its model cannot write the summary now: %v; pass summary to bring your own", sessionID, merr)
	}
	var seq uint64
	var sendErr error
	c := compactor{a: a, sessionID: sessionID, shaper: sh, stream: stream, appendEntry: func(*agentdv1.Entry) {}, writer: a.store,
		publish: func(ev *agentdv1.AgentEvent) {
			seq++
			ev.SessionId, ev.Seq = sessionID, seq
			if ev.Time == nil {
				ev.Time = timestamppb.New(a.opts.Now())
			}
			if sendErr == nil {
				sendErr = send(ev)
			}
		}}
	if c.hooks = newHookSet(sess.Config.GetHooks(), "compact-"+persistence.NewID(), &pendingCalls{}, c.publish,
		func(stage string, err error) {
			c.publish(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_Error{Error: &agentdv1.AgentError{Message: err.Error(), Stage: stage}}})
		}, a.opts.Now, nil); c.hooks.has(agentdv1.HookEvent_HOOK_EVENT_PRE_COMPACT) && !opts.DryRun {
		// SubmitHookResult finds the hook here while the session is held.
		a.mu.Lock()
		a.compacting[sessionID] = c.hooks
		a.mu.Unlock()
		defer func() {
			a.mu.Lock()
			delete(a.compacting, sessionID)
			a.mu.Unlock()
		}()
	}
	_, err = c.run(ctx, path, agentdv1.CompactionReason_COMPACTION_REASON_MANUAL, opts.Instructions, opts.Summary, keep, opts.DryRun)
	if sendErr != nil {
		return sendErr
	}
	var veto vetoError
	if errors.As(err, &veto) {
		return veto.e
	}
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}
