package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/provider"
)

// Subagents (SessionConfig.subagents, docs/ARCHITECTURE.md §3): a session
// with profiles offers its model the built-in tool spawn_agent; each call
// creates a child session, starts its run with the task as the prompt,
// mirrors the child's key events on the parent's stream and returns the
// child's final answer as the call's result.

// Bounds of SessionConfig.subagents, as the proto documents them.
const (
	// SpawnAgentTool is the name of the built-in tool that spawns a
	// subagent; no session may declare a tool of that name.
	SpawnAgentTool = "spawn_agent"
	// MaxSubagentProfiles bounds the profiles of one session.
	MaxSubagentProfiles = 16
	// MaxSubagentDescriptionBytes bounds a profile's description.
	MaxSubagentDescriptionBytes = 4096
	// MaxSubagentDepth bounds SubagentProfile.max_depth.
	MaxSubagentDepth = 4
	// MaxSubagentConcurrent bounds SubagentProfile.max_concurrent.
	MaxSubagentConcurrent = 16
	// DefaultSubagentConcurrent is max_concurrent when a profile leaves
	// it 0.
	DefaultSubagentConcurrent = 4
	// SubagentMethod is RunRequest.method of a child's run.
	SubagentMethod = "subagent"
	// subagentIDPrefix starts every child session's id.
	subagentIDPrefix = "sub-"
	// subagentRequestID is the request id of a child's first run, so a
	// retried spawn finds it rather than prompting the child twice.
	subagentRequestID = "spawn_agent"
	// childAbortGrace bounds how long an aborted parent's call waits for
	// its child's run to end.
	childAbortGrace = 30 * time.Second
)

// SubagentSessionID is the id of the child session that the spawn_agent
// call toolCallID of run runID of session parentID creates: derived from
// the three, so a retried call (ResolveInDoubt RETRY after a crash) finds
// the child the first attempt created.
func SubagentSessionID(parentID, runID, toolCallID string) string {
	sum := sha256.Sum256([]byte(parentID + "\x00" + runID + "\x00" + toolCallID))
	return subagentIDPrefix + hex.EncodeToString(sum[:16])
}

// depthOf is a profile's max_depth with its default.
func depthOf(p *agentdv1.SubagentProfile) uint32 { return max(p.GetMaxDepth(), 1) }

// concurrencyOf is a profile's max_concurrent with its default.
func concurrencyOf(p *agentdv1.SubagentProfile) int {
	if n := p.GetMaxConcurrent(); n > 0 {
		return int(n)
	}
	return DefaultSubagentConcurrent
}

// SubagentConfig is the configuration of a child spawned with profile p
// by a session configured with parent: the parent's, each field the
// profile's overlay sets replacing the parent's. The profiles are
// inherited (or the overlay's own) with their depth reduced by the level
// the child takes, so the configuration itself says how deep the child
// may spawn: a child that may not has no profiles, and no spawn_agent.
func SubagentConfig(parent *agentdv1.SessionConfig, p *agentdv1.SubagentProfile) *agentdv1.SessionConfig {
	child := &agentdv1.SessionConfig{}
	if parent != nil {
		child = proto.CloneOf(parent)
	}
	if p.GetConfig() != nil {
		overlay := proto.CloneOf(p.GetConfig())
		dst := child.ProtoReflect()
		overlay.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			dst.Set(fd, v)
			return true
		})
	}
	below := depthOf(p) - 1
	if below == 0 {
		child.Subagents = nil
		return child
	}
	for _, q := range child.GetSubagents() {
		q.MaxDepth = min(depthOf(q), below)
	}
	return child
}

// checkSpawnReserved keeps spawn_agent out of the declared tools.
func checkSpawnReserved(cfg *agentdv1.SessionConfig) error {
	for i, t := range cfg.GetTools() {
		if t.GetName() == SpawnAgentTool {
			return invalid(fmt.Sprintf("config.tools[%d].name", i), "%q is agentd's built-in tool for config.subagents; choose another name", SpawnAgentTool)
		}
	}
	return nil
}

// checkSubagents checks config.subagents (names, descriptions, limits)
// and each profile's overlay as CreateSession checks a configuration of
// tenant: the child's whole configuration, the parent's with the overlay
// applied.
func (a *Agent) checkSubagents(tenant string, cfg *agentdv1.SessionConfig) error {
	profiles := cfg.GetSubagents()
	if len(profiles) > MaxSubagentProfiles {
		return invalid("config.subagents", "%d profiles exceed the limit of %d", len(profiles), MaxSubagentProfiles)
	}
	seen := map[string]int{}
	for i, p := range profiles {
		field := fmt.Sprintf("config.subagents[%d]", i)
		if err := provider.CheckToolName(p.GetName()); err != nil {
			return invalid(field+".name", "%v", err)
		}
		if j, dup := seen[p.GetName()]; dup {
			return invalid(field+".name", "%q is already the name of config.subagents[%d]; profile names must be unique", p.GetName(), j)
		}
		seen[p.GetName()] = i
		if d := p.GetDescription(); d == "" || len(d) > MaxSubagentDescriptionBytes {
			return invalid(field+".description", "needs 1 to %d bytes: what the subagent is for, for the model choosing one", MaxSubagentDescriptionBytes)
		}
		if p.GetMaxDepth() > MaxSubagentDepth {
			return invalid(field+".max_depth", "%d exceeds the limit of %d levels", p.GetMaxDepth(), MaxSubagentDepth)
		}
		if p.GetMaxConcurrent() > MaxSubagentConcurrent {
			return invalid(field+".max_concurrent", "%d exceeds the limit of %d children at once", p.GetMaxConcurrent(), MaxSubagentConcurrent)
		}
		child := SubagentConfig(cfg, p)
		if len(p.GetConfig().GetSubagents()) == 0 {
			// Inherited profiles are the ones checked here.
			child.Subagents = nil
		}
		if err := a.CheckConfig(tenant, child); err != nil {
			var fe *FieldError
			if errors.As(err, &fe) {
				out := *fe
				out.Field = field + "." + fe.Field
				return &out
			}
			return err
		}
	}
	return nil
}

// spawnTool is spawn_agent for the runs of a session configured with cfg
// (nil run when only checking or previewing).
type spawnTool struct {
	a   *Agent
	run *Run
	cfg *agentdv1.SessionConfig
	def *agentdv1.Tool
}

// addSpawnTool adds spawn_agent to a kit's tools when the session has
// profiles.
//
// Spawning runs without approval, as the child's own tools ask for theirs,
// unless the operator's ceiling (requireApproval) names spawn_agent: then
// every spawn asks, recorded in policies.
func (a *Agent) addSpawnTool(cfg *agentdv1.SessionConfig, r *Run, ceiling Ceiling, policies map[string]agentdv1.ApprovalPolicy, list []agentloop.Tool) []agentloop.Tool {
	if len(cfg.GetSubagents()) == 0 {
		return list
	}
	if p := ceiling.approval(SpawnAgentTool, agentdv1.ApprovalPolicy_APPROVAL_POLICY_UNSPECIFIED); p == agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK {
		policies[SpawnAgentTool] = p
	}
	return append(list, spawnTool{a: a, run: r, cfg: cfg, def: spawnDefinition(cfg.GetSubagents())})
}

// spawnDefinition declares spawn_agent with the session's profiles.
func spawnDefinition(profiles []*agentdv1.SubagentProfile) *agentdv1.Tool {
	names := make([]any, len(profiles))
	var desc strings.Builder
	desc.WriteString("Delegate a task to a subagent: a separate agent that works on it on its own, with its own tools, and returns its final answer as this call's result. " +
		"It does not see this conversation, so give it everything it needs in task. Calls in one answer may run at the same time. Profiles:")
	for i, p := range profiles {
		names[i] = p.GetName()
		fmt.Fprintf(&desc, "\n- %s: %s", p.GetName(), p.GetDescription())
	}
	params, err := structpb.NewStruct(map[string]any{
		"type": "object",
		"properties": map[string]any{
			"profile": map[string]any{"type": "string", "enum": names, "description": "The kind of subagent, one of the profiles."},
			"task":    map[string]any{"type": "string", "description": "What the subagent should do and what it should answer with."},
		},
		"required":             []any{"profile", "task"},
		"additionalProperties": false,
	})
	if err != nil {
		panic(err) // the values above are all JSON
	}
	return &agentdv1.Tool{Name: SpawnAgentTool, Description: desc.String(), Parameters: params, Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_SERVER}
}

// Definition implements [agentloop.Tool].
func (t spawnTool) Definition() *agentdv1.Tool { return t.def }

// Execute implements [agentloop.Tool]: it runs the child to its end.
func (t spawnTool) Execute(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
	if t.run == nil {
		return agentloop.Result{}, fmt.Errorf("tool %s is only declared here", SpawnAgentTool)
	}
	name := call.Args.GetFields()["profile"].GetStringValue()
	task := call.Args.GetFields()["task"].GetStringValue()
	var profile *agentdv1.SubagentProfile
	for _, p := range t.cfg.GetSubagents() {
		if p.GetName() == name {
			profile = p
		}
	}
	if profile == nil {
		return agentloop.Result{}, fmt.Errorf("no subagent profile is named %q", name)
	}
	if strings.TrimSpace(task) == "" {
		return agentloop.Result{}, errors.New("task is empty: say what the subagent should do")
	}
	return t.a.spawn(ctx, t.run, t.cfg, profile, call, task)
}

// subagentSlots bound the children of one parent run by profile
// (max_concurrent), and carry the tenant limits its children start with.
type subagentSlots struct {
	mu     sync.Mutex
	slots  map[string]chan struct{}
	limits TenantLimits
}

// acquire waits for a free slot of profile p; release gives it back.
func (s *subagentSlots) acquire(ctx context.Context, p *agentdv1.SubagentProfile) (release func(), err error) {
	s.mu.Lock()
	if s.slots == nil {
		s.slots = map[string]chan struct{}{}
	}
	ch := s.slots[p.GetName()]
	if ch == nil {
		ch = make(chan struct{}, concurrencyOf(p))
		s.slots[p.GetName()] = ch
	}
	s.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// spawn runs the child of a spawn_agent call of parent: it finds or
// creates the child session, starts (or, after a crash, continues) its
// run, mirrors its key events on the parent's stream and returns its
// answer. parent is a run of this process, or the stand-in of a
// ResolveInDoubt retry, which has no stream to mirror on (call.Run
// drops the events) and no live budget.
func (a *Agent) spawn(ctx context.Context, parent *Run, cfg *agentdv1.SessionConfig, p *agentdv1.SubagentProfile, call agentloop.Call, task string) (agentloop.Result, error) {
	child, err := a.subagentSession(ctx, parent, cfg, p, call.ID, task)
	if err != nil {
		return agentloop.Result{}, err
	}
	release, err := parent.subagents.acquire(ctx, p)
	if err != nil {
		return agentloop.Result{}, fmt.Errorf("the subagent did not start: %w", err)
	}
	defer release()
	path, err := a.store.ContextPath(ctx, child.ID)
	if err != nil {
		return agentloop.Result{}, err
	}
	if answer, ok := finalAnswer(path); ok {
		// A retry of a call whose child had finished.
		return subagentResult(child.ID, "", p.GetName(), agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED, answer, ""), nil
	}
	req := StartRequest{SessionID: child.ID, TenantLimits: parent.subagents.limits, Run: &agentdv1.RunRequest{Method: SubagentMethod}}
	if parent.log != nil {
		req.parent = parent
	}
	if !hasUserMessage(path) {
		req.RequestID = subagentRequestID
		if prev, err := a.store.GetRun(ctx, runID(child.ID, subagentRequestID)); err == nil && prev.Ended() {
			// The first run ended before its prompt was stored (a crash
			// between the two): the request id would only find that run
			// again, so this run takes a fresh id.
			req.RequestID = ""
		}
		req.Prompt = &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{
			Content:   []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: task}}}},
			Timestamp: timestamppb.New(a.opts.Now()),
		}}}
	}
	runID, err := a.Start(ctx, req)
	if err != nil {
		return agentloop.Result{}, fmt.Errorf("subagent session %q could not start its run: %w", child.ID, err)
	}
	// The child is followed to its end even when the parent is aborted
	// meanwhile: the abort reaches the child, whose agent_end is still
	// mirrored (within childAbortGrace).
	follow, stopFollow := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFollow()
	returned := make(chan struct{})
	defer close(returned)
	go func() {
		select {
		case <-returned:
			return
		case <-ctx.Done():
		}
		if r := a.lookup(runID); r != nil {
			r.abort("the run that spawned it was aborted")
		}
		select {
		case <-returned:
		case <-time.After(childAbortGrace):
			stopFollow()
		}
	}()
	var end *agentdv1.AgentEnd
	var answer string
	ferr := a.Follow(follow, child.ID, runID, 0, FollowOptions{}, func(e Event) error {
		ev := &agentdv1.AgentEvent{}
		if err := proto.Unmarshal(e.Data, ev); err != nil {
			return err
		}
		switch ev.GetEvent().(type) {
		case *agentdv1.AgentEvent_AgentStart, *agentdv1.AgentEvent_AgentEnd, *agentdv1.AgentEvent_ApprovalRequested,
			*agentdv1.AgentEvent_ToolCallRequested, *agentdv1.AgentEvent_HookRequested, *agentdv1.AgentEvent_ContextRequested:
			if err := call.Run.Emit(&agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_Subagent{Subagent: &agentdv1.SubagentEvent{
				SessionId: child.ID, RunId: runID, Profile: p.GetName(), ToolCallId: call.ID, Event: ev,
			}}}); err != nil {
				// The parent's stream has ended; the child's own goes on.
				a.opts.Logger.Debug("a subagent's event was not mirrored", "session", child.ID, "run", runID, "err", err)
			}
		}
		if m := ev.GetMessageEnd().GetMessage().GetAssistant(); m != nil {
			answer = answerText(m)
		}
		if ae := ev.GetAgentEnd(); ae != nil {
			end = ae
		}
		return nil
	})
	if ctx.Err() != nil {
		return agentloop.Result{}, fmt.Errorf("subagent session %q was aborted with the run that spawned it", child.ID)
	}
	if ferr != nil {
		return agentloop.Result{}, fmt.Errorf("subagent session %q: its run %q could not be followed: %w", child.ID, runID, ferr)
	}
	if end == nil {
		return agentloop.Result{}, fmt.Errorf("subagent session %q: its run %q ended without agent_end in its stored events", child.ID, runID)
	}
	if s := end.GetStructuredOutput(); s != nil && end.GetOutcome() == agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		answer = structText(s)
	}
	return subagentResult(child.ID, runID, p.GetName(), end.GetOutcome(), answer, end.GetErrorMessage()), nil
}

// subagentSession returns the child session of a call, creating it with
// the profile's configuration, in the parent's tenant, the first time. A
// session of that id that is not this call's child is refused.
func (a *Agent) subagentSession(ctx context.Context, parent *Run, cfg *agentdv1.SessionConfig, p *agentdv1.SubagentProfile, callID, task string) (*persistence.Session, error) {
	id := SubagentSessionID(parent.sessionID, parent.id, callID)
	origin := persistence.Origin{SessionID: parent.sessionID, RunID: parent.id, ToolCallID: callID, Profile: p.GetName()}
	sess, err := a.store.GetSession(ctx, id)
	if errors.Is(err, persistence.ErrNotFound) {
		childCfg := SubagentConfig(cfg, p)
		if err := a.CheckConfig(parent.tenant, childCfg); err != nil {
			return nil, fmt.Errorf("profile %q cannot be used now: %w", p.GetName(), err)
		}
		sess, err = a.store.CreateSession(ctx, persistence.CreateSessionParams{
			ID: id, Title: "subagent " + p.GetName() + ": " + truncate(task, 80), Config: childCfg, Origin: origin, Tenant: parent.tenant,
		})
		if err == nil {
			a.publishSession(sess, ChangeCreated, nil)
		}
		if errors.Is(err, persistence.ErrConflict) {
			sess, err = a.store.GetSession(ctx, id)
		}
	}
	if err != nil {
		return nil, err
	}
	if sess.Origin != origin || sess.Tenant != parent.tenant {
		return nil, fmt.Errorf("session %q exists and is not this call's subagent; the call cannot run", id)
	}
	return sess, nil
}

// subagentResult is the call's result: the answer of a child that
// completed, an error naming the outcome otherwise.
func subagentResult(sessionID, runID, profile string, outcome agentdv1.RunOutcome, answer, errText string) agentloop.Result {
	details, _ := structpb.NewValue(map[string]any{
		"session_id": sessionID, "run_id": runID, "profile": profile, "outcome": outcome.String(),
	})
	if outcome == agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		return agentloop.Result{Content: textBlocks(answer), Details: details}
	}
	text := fmt.Sprintf("subagent %s (session %s) ended %s", profile, sessionID, strings.TrimPrefix(outcome.String(), "RUN_OUTCOME_"))
	if errText != "" {
		text += ": " + errText
	}
	return agentloop.Result{Content: textBlocks(text), Details: details, IsError: true}
}

// structText is a structured answer as compact JSON with sorted keys,
// the same bytes every time (protojson's output is deliberately not).
func structText(s *structpb.Struct) string {
	data, err := json.Marshal(s.AsMap())
	if err != nil {
		return s.String()
	}
	return string(data)
}

func textBlocks(s string) []*agentdv1.ContentBlock {
	return []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_Text{Text: &agentdv1.TextContent{Text: s}}}}
}

// answerText is what an assistant message answers: its structured output
// as JSON when it has one, its text otherwise.
func answerText(m *agentdv1.AssistantMessage) string {
	if s := m.GetStructuredOutput(); s != nil {
		return structText(s)
	}
	var b strings.Builder
	for _, c := range m.GetContent() {
		if t := c.GetText(); t != nil {
			b.WriteString(t.GetText())
		}
	}
	return b.String()
}

// finalAnswer returns the child's answer when its transcript ends with
// one: an assistant message that stopped without calling tools.
func finalAnswer(path []*agentdv1.Entry) (string, bool) {
	for i := len(path) - 1; i >= 0; i-- {
		m := path[i].GetMessage()
		if m == nil {
			continue
		}
		as := m.GetAssistant()
		if as == nil || as.GetStopReason() != agentdv1.StopReason_STOP_REASON_STOP {
			return "", false
		}
		for _, c := range as.GetContent() {
			if c.GetToolCall() != nil {
				return "", false
			}
		}
		return answerText(as), true
	}
	return "", false
}

func hasUserMessage(path []*agentdv1.Entry) bool {
	for _, e := range path {
		if e.GetMessage().GetUser() != nil {
			return true
		}
	}
	return false
}

// linkSubagent prepares a run of a subagent's session: its agent_start
// names the origin, and its budget counts against the budgets of the
// sessions above it (the parent's live run when it spawned this one,
// otherwise what the store says they spent); a run that starts with one
// of them spent is refused.
func (a *Agent) linkSubagent(ctx context.Context, r *Run, sess *persistence.Session, req StartRequest) error {
	r.subagents.limits = req.TenantLimits
	r.budget.run, r.budget.sessionID = r, r.sessionID
	o := sess.Origin
	if o.RunID == "" {
		return nil
	}
	r.origin = &agentdv1.SessionOrigin{SessionId: o.SessionID, RunId: o.RunID, ToolCallId: o.ToolCallID, SubagentProfile: o.Profile}
	if p := req.parent; p != nil && p.budget != nil && p.sessionID == o.SessionID {
		r.budget.parent = p.budget
	} else {
		chain, err := a.storedBudgets(ctx, o.SessionID)
		if err != nil {
			return err
		}
		r.budget.parent = chain
	}
	for b := r.budget.parent; b != nil; b = b.parent {
		b.mu.Lock()
		reason := b.overSpent()
		b.mu.Unlock()
		if reason != "" {
			e := refuse(agentdv1.ErrorReason_ERROR_REASON_BUDGET_EXCEEDED, "session %q is a subagent of session %q, whose budget is spent (%s); raise its config.budget with UpdateSession to go on",
				r.sessionID, b.sessionID, reason).with("session_id", b.sessionID)
			e.QuotaSubject = "session:" + b.sessionID
			return e
		}
	}
	return nil
}

// storedBudgets is the chain of budgets of session id and the sessions
// above it, with what the store says each one's tree spent.
func (a *Agent) storedBudgets(ctx context.Context, id string) (*budget, error) {
	var head, tail *budget
	for range MaxSubagentDepth + 1 {
		sess, err := a.store.GetSession(ctx, id)
		if errors.Is(err, persistence.ErrNotFound) {
			break // the parent was deleted: its budget went with it
		}
		if err != nil {
			return nil, err
		}
		b := &budget{limits: sess.Config.GetBudget(), sessionID: id}
		if b.limits.GetMaxCostUsd() > 0 || b.limits.GetMaxTokens() > 0 {
			if b.spent, err = a.treeSpend(ctx, id); err != nil {
				return nil, err
			}
		}
		if head == nil {
			head = b
		} else {
			tail.parent = b
		}
		tail = b
		if sess.Origin.RunID == "" {
			break
		}
		id = sess.Origin.SessionID
	}
	return head, nil
}

// treeSpend is what session id and its subagents, at every depth, spent.
func (a *Agent) treeSpend(ctx context.Context, id string) (persistence.Spend, error) {
	return a.treeSpendAt(ctx, id, 0)
}

func (a *Agent) treeSpendAt(ctx context.Context, id string, depth int) (persistence.Spend, error) {
	total, err := a.store.SessionSpend(ctx, id)
	if err != nil || depth >= MaxSubagentDepth {
		return total, err
	}
	// Every tenant's listing: agentd alone creates subagent sessions,
	// always in the parent's tenant (and forks have no origin run).
	req := persistence.ListSessionsRequest{OriginSessionID: id, AllTenants: true, PageSize: persistence.MaxPageSize}
	for {
		page, err := a.store.ListSessions(ctx, req)
		if err != nil {
			return total, err
		}
		for _, s := range page.Sessions {
			if s.Origin.RunID == "" {
				continue
			}
			spent, err := a.treeSpendAt(ctx, s.ID, depth+1)
			if err != nil {
				return total, err
			}
			total = total.Add(spent)
		}
		if page.NextPageToken == "" {
			return total, nil
		}
		req.PageToken = page.NextPageToken
	}
}

// markSubagent puts the origin of a subagent's run on its agent_start.
func (r *Run) markSubagent(ev *agentdv1.AgentEvent) {
	if s := ev.GetAgentStart(); s != nil && r.origin != nil {
		s.Origin = r.origin
	}
}
