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
)

// ContextBlocksHeader opens the user message that carries a session's
// context blocks; each block follows as "<block name="...">text</block>".
const ContextBlocksHeader = "Standing context for this conversation, kept up to date by the application:"

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

// assemble is the end of every context pipeline, the one place that turns
// shaped items into what the model receives: the blocks message first,
// convertToLlm, the replay rules for the session's model, tool results
// without their details (they are for UIs and logs), the system prompt
// and the tools. Runs, Continue's check and GetContext all end here, so
// GetContext shows exactly what a model call would be sent.
func (s shaper) assemble(items []contextview.Item, tools *agentloop.ToolSet) *agentdv1.Context {
	llm := provider.Replay(agentloop.DefaultConvertToLLM(s.messages(items)), s.model)
	for i, m := range llm {
		if tr := m.GetToolResult(); tr != nil && tr.GetDetails() != nil {
			llm[i] = &agentdv1.Message{Role: &agentdv1.Message_ToolResult{ToolResult: withoutDetails(tr)}}
		}
	}
	return &agentdv1.Context{SystemPrompt: s.cfg.GetSystemPrompt(), Messages: llm, Tools: tools.Definitions()}
}

// withoutDetails is tr without its details, sharing the rest.
func withoutDetails(tr *agentdv1.ToolResultMessage) *agentdv1.ToolResultMessage {
	return &agentdv1.ToolResultMessage{ToolCallId: tr.GetToolCallId(), ToolName: tr.GetToolName(), Content: tr.GetContent(),
		IsError: tr.GetIsError(), Timestamp: tr.GetTimestamp()}
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

// build is the run's context pipeline (docs/ARCHITECTURE.md §4): the
// compacted view of the path, the policies, automatic compaction when the
// result passes the threshold, the hook, then [shaper.assemble]. It reads
// the run's path, which every message of the run joins as it is stored
// (appendEntry), never the loop's list: the path is the one copy of the
// conversation the model sees. Before the run starts (Continue's check)
// it neither compacts nor asks the hook: nothing is written and no event
// is sent.
func (rc *runContext) build(ctx context.Context, _ []*agentdv1.AgentMessage, tools *agentloop.ToolSet) (*agentdv1.Context, error) {
	r := rc.run
	shaped := rc.shaper.policies(rc.currentView(), rc.memo, r.report)
	if !r.log.started() {
		return rc.shaper.assemble(shaped, tools), nil
	}
	if est := rc.shaper.estimate(shaped); rc.shaper.wouldCompact(est) {
		if _, err := rc.compact(ctx, agentdv1.CompactionReason_COMPACTION_REASON_THRESHOLD, "", "", 0); err == nil {
			shaped = rc.shaper.policies(rc.currentView(), rc.memo, r.report)
		}
	}
	if hook := rc.shaper.cfg.GetContextHook(); hook != nil {
		shaped = rc.askHook(ctx, hook, shaped)
	}
	shaped = r.hooks.withAdded(shaped)
	return rc.shaper.assemble(shaped, tools), nil
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
	c := compactor{a: r.a, sessionID: r.sessionID, shaper: rc.shaper, stream: rc.stream, writer: r.writer, hooks: r.hooks,
		publish: r.publish, appendEntry: func(e *agentdv1.Entry) {
			rc.mu.Lock()
			rc.view.Append(e)
			rc.mu.Unlock()
		}}
	rc.mu.Lock()
	path := rc.view.Path()
	rc.mu.Unlock()
	return c.run(ctx, path, reason, instructions, summary, keepRecent, false)
}
