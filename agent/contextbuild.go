package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agent/compaction"
	"github.com/agentd/agentd/agent/contextpolicy"
	"github.com/agentd/agentd/agent/contextview"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/faux"
)

// ContextBlocksHeader opens the user message that carries a session's
// context blocks; each block follows as "<block name="...">text</block>".
const ContextBlocksHeader = "Standing context for this conversation, kept up to date by the application:"

// Context hook bounds.
const (
	// DefaultContextHookTimeout is how long a call waits for SubmitContext
	// when the hook sets no timeout.
	DefaultContextHookTimeout = 10 * time.Second
	// MaxContextHookTimeout bounds ContextHook.timeout.
	MaxContextHookTimeout = 10 * time.Minute
)

// shaper is the context pipeline of one session's configuration, after the
// transcript view: policies, then (in a run) the hook, then the blocks.
type shaper struct {
	cfg      *agentdv1.SessionConfig
	model    provider.Model
	settings compaction.Settings
}

func newShaper(cfg *agentdv1.SessionConfig, model provider.Model) shaper {
	return shaper{cfg: cfg, model: model, settings: compaction.SettingsOf(cfg.GetCompaction())}
}

// policies applies the context policy; on a failure it reports it and
// returns the view unchanged.
func (s shaper) policies(view []contextview.Item, memo *contextpolicy.Memo, report func(stage string, err error)) []contextview.Item {
	out, err := safePolicies(s.cfg.GetContextPolicy(), view, memo)
	if err != nil {
		report("transform_context", fmt.Errorf("context_policy was not applied: %w", err))
		return view
	}
	return out
}

func safePolicies(p *agentdv1.ContextPolicy, view []contextview.Item, memo *contextpolicy.Memo) (out []contextview.Item, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("a rule panicked: %v", r)
		}
	}()
	return contextpolicy.Apply(p, view, memo)
}

// blocks returns the message carrying the session's context blocks, or
// nil when there are none with text.
func (s shaper) blocks() *agentdv1.AgentMessage {
	var b strings.Builder
	for _, blk := range s.cfg.GetContextBlocks() {
		if blk.GetText() == "" {
			continue
		}
		if b.Len() == 0 {
			b.WriteString(ContextBlocksHeader)
		}
		fmt.Fprintf(&b, "\n\n<block name=%q>\n%s\n</block>", blk.GetName(), blk.GetText())
	}
	if b.Len() == 0 {
		return nil
	}
	return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{
		Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: b.String()}}}},
	}}}
}

// messages returns the messages of a call: the blocks message first, then
// the items'.
func (s shaper) messages(items []contextview.Item) []*agentdv1.AgentMessage {
	b := s.blocks()
	if b == nil {
		return contextview.Messages(items)
	}
	out := make([]*agentdv1.AgentMessage, 0, len(items)+1)
	out = append(out, b)
	for _, it := range items {
		out = append(out, it.Message)
	}
	return out
}

// estimate estimates a call over items with the blocks message first: the
// blocks count only when no answer's usage (which covers them) is used.
func (s shaper) estimate(items []contextview.Item) contextview.Estimate {
	est := contextview.EstimateItems(items)
	if b := s.blocks(); b != nil {
		if !est.FromUsage {
			est.Total += contextview.Tokens(b)
		}
	}
	return est
}

// threshold is the estimate above which a call compacts first.
func (s shaper) threshold() int64 { return s.settings.Threshold(s.model.ContextWindow) }

// wouldCompact reports whether a call over shaped compacts first.
func (s shaper) wouldCompact(est contextview.Estimate) bool {
	return s.settings.Auto && s.model.ContextWindow > 0 && est.Total > s.threshold()
}

// ContextReport is what GetContext returns: the context and its token
// accounting.
type ContextReport struct {
	Context             *agentdv1.Context
	MessageTokens       []int64
	TotalTokens         int64
	ContextWindow       int64
	CompactionThreshold int64
	WouldCompact        bool
}

// runContext is the context state of one run: the path it extends, the
// session's pipeline, and the overflow-recovery flag.
type runContext struct {
	run    *Run
	shaper shaper
	stream provider.StreamFunc

	mu sync.Mutex
	// view is the run's transcript path and its view, extended as the run
	// appends; memo keeps the policies' placeholders between calls.
	view *contextview.Builder
	memo *contextpolicy.Memo
	// overflowRecovered is set when a context overflow was compacted away
	// and cleared by the next successful answer: a second overflow in a
	// row is reported, not compacted again.
	overflowRecovered bool
	hookRequests      int
	// summaries counts the compaction summaries this run appended to path:
	// they are in the transcript but not in the loop's messages.
	summaries int
}

func (rc *runContext) appendEntry(e *agentdv1.Entry) {
	rc.mu.Lock()
	rc.view.Append(e)
	if a := e.GetMessage().GetAssistant(); a != nil && !provider.IsFailedAnswer(a) {
		rc.overflowRecovered = false
	}
	rc.mu.Unlock()
}

func (rc *runContext) currentView() []contextview.Item {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.view.View()
}

// report publishes a non-fatal error event of the run.
func (r *Run) report(stage string, err error) {
	r.publish(&agentdv1.AgentEvent{Time: timestamppb.New(r.a.opts.Now()), Event: &agentdv1.AgentEvent_Error{Error: &agentdv1.AgentError{
		Message: err.Error(), Stage: stage,
	}}})
}

// transform is the run's transformContext: the compacted view of the path,
// the policies, automatic compaction when the result passes the
// threshold, the hook, the blocks. msgs is the loop's own list; it only
// checks that the run's path holds the same messages.
func (rc *runContext) transform(ctx context.Context, msgs []*agentdv1.AgentMessage) ([]*agentdv1.AgentMessage, error) {
	r := rc.run
	rc.mu.Lock()
	n := 0
	for _, e := range rc.view.Path() {
		if e.GetMessage() != nil {
			n++
		}
	}
	n -= rc.summaries
	rc.mu.Unlock()
	if n != len(msgs) {
		return nil, fmt.Errorf("the run's transcript has %d messages but the loop holds %d", n, len(msgs))
	}
	shaped := rc.shaper.policies(rc.currentView(), rc.memo, r.report)
	if !r.log.started() {
		// Continue's check before the run starts: no events, no writes.
		return rc.shaper.messages(shaped), nil
	}
	if est := rc.shaper.estimate(shaped); rc.shaper.wouldCompact(est) {
		if _, err := rc.compact(ctx, agentdv1.CompactionReason_COMPACTION_REASON_THRESHOLD, "", "", 0); err == nil {
			shaped = rc.shaper.policies(rc.currentView(), rc.memo, r.report)
		}
	}
	if hook := rc.shaper.cfg.GetContextHook(); hook != nil {
		shaped = rc.askHook(ctx, hook, shaped)
	}
	return rc.shaper.messages(shaped), nil
}

// retry wraps the session's retry decision with overflow recovery: the
// first context-overflow answer compacts and retries at once; a second in
// a row is the run's answer.
func (rc *runContext) retry(base agentloop.RetryFunc) agentloop.RetryFunc {
	return func(failed *agentdv1.AssistantMessage, attempt int, retryAfter time.Duration) (time.Duration, bool) {
		if strings.HasPrefix(failed.GetErrorMessage(), provider.ContextOverflowPrefix) {
			if !rc.shaper.settings.OverflowRecovery {
				return 0, false
			}
			rc.mu.Lock()
			again := rc.overflowRecovered
			rc.overflowRecovered = true
			rc.mu.Unlock()
			if again {
				rc.run.report("compaction", errors.New("the context overflowed again after a compaction; giving up (switch to a model with a larger context window, or tighten context_policy)"))
				return 0, false
			}
			_, err := rc.compact(rc.run.ctx, agentdv1.CompactionReason_COMPACTION_REASON_OVERFLOW, "", "", 0)
			return 0, err == nil
		}
		if base == nil {
			return 0, false
		}
		return base(failed, attempt, retryAfter)
	}
}

// compact compacts the run's view, appends the summary entry to the path
// and publishes compaction_start and compaction_end.
func (rc *runContext) compact(ctx context.Context, reason agentdv1.CompactionReason, instructions, summary string, keepRecent int64) (*agentdv1.Entry, error) {
	r := rc.run
	c := compactor{a: r.a, sessionID: r.sessionID, shaper: rc.shaper, stream: rc.stream,
		publish: r.publish, appendEntry: func(e *agentdv1.Entry) {
			rc.mu.Lock()
			rc.view.Append(e)
			rc.summaries++
			rc.mu.Unlock()
		}}
	rc.mu.Lock()
	path := rc.view.Path()
	rc.mu.Unlock()
	return c.run(ctx, path, reason, instructions, summary, keepRecent, false)
}

// compactor runs one compaction for a run or for Compact.
type compactor struct {
	a           *Agent
	sessionID   string
	shaper      shaper
	stream      provider.StreamFunc
	publish     func(*agentdv1.AgentEvent)
	appendEntry func(*agentdv1.Entry)
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
	if err := c.a.appendEntries(context.WithoutCancel(ctx), c.sessionID, entry); err != nil {
		end.ErrorMessage = "compaction failed: store the summary: " + err.Error()
		ev(end)
		return nil, err
	}
	c.appendEntry(entry)
	end.EntryId, end.TokensAfter, end.Summary = entry.GetId(), msg.GetCompactionSummary().GetTokensAfter(), msg.GetCompactionSummary()
	ev(end)
	return entry, nil
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

// ContextSelection is one item of a SubmitContext answer: an offered entry
// to keep, or a message to inject.
type ContextSelection struct {
	EntryID string
	Message *agentdv1.AgentMessage
}

// RefuseContext tells a waiting context request that its answer was
// refused before it reached SubmitContext (a message that failed
// validation), so the call goes ahead with the policies' context at once
// instead of waiting for the timeout. It does nothing when no such request
// waits.
func (a *Agent) RefuseContext(sessionID, requestID string, why error) {
	if r := a.active(sessionID); r != nil {
		_ = r.pending.deliver(sessionID, requestID, waitContext, contextAnswer{err: why})
	}
}

// SubmitContext answers a context_requested event of the session's active
// run. An answer naming an entry the request did not offer, or one twice,
// is refused with a *FieldError; the waiting call then goes ahead with the
// policies' context.
func (a *Agent) SubmitContext(sessionID, requestID string, sel []ContextSelection) error {
	r := a.active(sessionID)
	if r == nil {
		return refuse(ErrIdle, "session %q has no active run, so no context request waits for an answer", sessionID)
	}
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
		if s.Message != nil {
			items = append(items, contextview.NewItem("", s.Message))
			continue
		}
		it, ok := byID[s.EntryID]
		switch {
		case !ok:
			bad = invalid(fmt.Sprintf("items[%d].entry_id", i), "%q is not an entry of context request %q; keep only entry ids its context_requested event listed", truncate(s.EntryID, 70), requestID)
		case used[s.EntryID]:
			bad = invalid(fmt.Sprintf("items[%d].entry_id", i), "%q is named twice; keep each entry at most once", truncate(s.EntryID, 70))
		}
		if bad != nil {
			break
		}
		used[s.EntryID] = true
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

// fauxWindowStream makes the faux model refuse a context larger than the
// session's faux context window, as a real provider does.
func fauxWindowStream(window int64, next provider.StreamFunc) provider.StreamFunc {
	if window <= 0 {
		return next
	}
	return func(ctx context.Context, model provider.Model, c *agentdv1.Context, o provider.Options) provider.Stream {
		var n int64 = provider.EstimateTokens(c.GetSystemPrompt())
		for _, m := range c.GetMessages() {
			n += contextview.MessageTokens(m)
		}
		if n > window {
			msg := fmt.Sprintf("%sprompt is too long: %d tokens > %d maximum", provider.ContextOverflowPrefix, n, window)
			return faux.New(faux.Options{}, faux.Fail(msg)).Stream(ctx, model, c, o)
		}
		return next(ctx, model, c, o)
	}
}
