package service_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence/postgres/pgtest"
	"github.com/agentd/agentd/service"
)

// spawnCall is an answer calling spawn_agent once per (id, profile, task).
func spawnCall(t testing.TB, calls ...[3]string) *agentdv1.AssistantMessage {
	m := &agentdv1.AssistantMessage{}
	for _, c := range calls {
		args, err := structpb.NewStruct(map[string]any{"profile": c[1], "task": c[2]})
		if err != nil {
			t.Fatal(err)
		}
		m.Content = append(m.Content, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_ToolCall{
			ToolCall: &agentdv1.ToolCall{Id: c[0], Name: agent.SpawnAgentTool, Arguments: args}}})
	}
	return m
}

// fauxOf is a configuration answering with the given answers.
func fauxOf(answers ...*agentdv1.AssistantMessage) *agentdv1.SessionConfig {
	return &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Responses: answers}}
}

// asking is a server tool that needs an approval and answers at once.
func asking() agentloop.Tool {
	params, _ := structpb.NewStruct(map[string]any{"type": "object"})
	return agentloop.FuncTool{
		Def: &agentdv1.Tool{Name: "publish", Description: "Publish the review.", Parameters: params},
		Fn: func(context.Context, agentloop.Call) (agentloop.Result, error) {
			return agentloop.Result{Content: texts("published")}, nil
		},
	}
}

// subagentOf returns the mirrored event of the kind, in stream order.
func subagentsOf(evs []*agentdv1.AgentEvent, kind string) []*agentdv1.SubagentEvent {
	var out []*agentdv1.SubagentEvent
	for _, ev := range evs {
		if s := ev.GetSubagent(); s != nil && eventKind(s.GetEvent()) == kind {
			out = append(out, s)
		}
	}
	return out
}

// drainCall reads the stream of a call to its end.
func drainCall(stream grpc.ServerStreamingClient[agentdv1.AgentEvent], err error) ([]*agentdv1.AgentEvent, error) {
	if err != nil {
		return nil, err
	}
	return drain(stream)
}

func toolResults(entries []*agentdv1.Entry) map[string]*agentdv1.ToolResultMessage {
	out := map[string]*agentdv1.ToolResultMessage{}
	for _, e := range entries {
		if tr := e.GetMessage().GetToolResult(); tr != nil {
			out[tr.GetToolCallId()] = tr
		}
	}
	return out
}

func callText(tr *agentdv1.ToolResultMessage) string {
	var b strings.Builder
	for _, c := range tr.GetContent() {
		b.WriteString(c.GetText().GetText())
	}
	return b.String()
}

func hasTool(c *agentdv1.Context, name string) bool {
	return slices.ContainsFunc(c.GetTools(), func(t *agentdv1.Tool) bool { return t.GetName() == name })
}

// A parent with two profiles spawns a child of each in one tool batch,
// over real gRPC: the children run at the same time (the researcher waits
// in a tool while the reviewer waits for an approval), their agent_start,
// approval_requested and agent_end are mirrored on the parent's stream
// with the parent's seq, the reviewer's approval is answered with the
// child's session id, each child's answer is its call's result, and the
// children are sessions of their own, found by ListSessions' origin
// filter, with the profile's configuration and no spawn_agent of their own.
// The same on PostgreSQL, where the runs are claimed with leases.
func TestSubagentsRunInParallelAndMirror(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testSubagentsInParallel(t, "") })
	t.Run("postgres", func(t *testing.T) { testSubagentsInParallel(t, pgtest.DSN(t)) })
}

func testSubagentsInParallel(t *testing.T, dsn string) {
	g := newGate()
	h := newHarnessOn(t, dsn, agent.Options{ReplicaID: "a", Tools: []agentloop.Tool{g.tool(), asking()}}, service.ServerOptions{})
	researcher := fauxOf(toolCallAnswer(t, "w1", "wait", nil), textAnswer("found: 42"))
	researcher.SystemPrompt = "You research."
	researcher.Tools = []*agentdv1.Tool{{Name: "wait"}}
	reviewer := fauxOf(toolCallAnswer(t, "p1", "publish", nil), textAnswer("reviewed: fine"))
	reviewer.Tools = []*agentdv1.Tool{{Name: "publish", Approval: agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK}}
	cfg := fauxOf(spawnCall(t, [3]string{"c1", "researcher", "find the answer"}, [3]string{"c2", "reviewer", "review it"}), textAnswer("both done"))
	cfg.SystemPrompt = "You coordinate."
	cfg.Subagents = []*agentdv1.SubagentProfile{
		{Name: "researcher", Description: "Finds facts.", Config: researcher},
		{Name: "reviewer", Description: "Reviews work.", Config: reviewer},
	}
	parent := h.createSession(cfg)

	spawn := h.context(parent)
	var def *agentdv1.Tool
	for _, tl := range spawn.GetTools() {
		if tl.GetName() == agent.SpawnAgentTool {
			def = tl
		}
	}
	if def == nil || !strings.Contains(def.GetDescription(), "- researcher: Finds facts.") || !strings.Contains(def.GetDescription(), "- reviewer: Reviews work.") {
		t.Fatalf("spawn_agent as the model sees it: %v", def)
	}
	enum := def.GetParameters().GetFields()["properties"].GetStructValue().GetFields()["profile"].GetStructValue().GetFields()["enum"].GetListValue().AsSlice()
	if fmt.Sprint(enum) != "[researcher reviewer]" {
		t.Fatalf("profile enum %v", enum)
	}

	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: parent, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	evs := recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetSubagent().GetEvent().GetApprovalRequested() != nil })
	runID := evs[0].GetRunId()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the researcher did not reach its tool while the reviewer waits: the children do not run at the same time")
	}
	ask := evs[len(evs)-1].GetSubagent()
	reviewerID := agent.SubagentSessionID(parent, runID, "c2")
	if ask.GetSessionId() != reviewerID || ask.GetProfile() != "reviewer" || ask.GetToolCallId() != "c2" || ask.GetEvent().GetSessionId() != reviewerID {
		t.Fatalf("mirrored approval request: %v", ask)
	}
	// The approval is the child's: answered with its session id.
	if _, err := h.client.ResolveApproval(h.ctx(), &agentdv1.ResolveApprovalRequest{SessionId: parent, ToolCallId: "p1", Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED}); err == nil {
		t.Fatal("the parent's session resolved its child's approval")
	}
	if _, err := h.client.ResolveApproval(h.ctx(), &agentdv1.ResolveApprovalRequest{SessionId: reviewerID, ToolCallId: "p1", Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED}); err != nil {
		t.Fatalf("ResolveApproval with the child's session id: %v", err)
	}
	g.open()
	rest, err := drain(stream)
	if err != nil {
		t.Fatal(err)
	}
	evs = append(evs, rest...)
	if end := evs[len(evs)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("parent's agent_end %v (%s)", end, kinds(evs))
	}
	for i, ev := range evs {
		if ev.GetSeq() != uint64(i+1) || ev.GetSessionId() != parent || ev.GetRunId() != runID {
			t.Fatalf("event %d (%s) has seq %d of %s/%s: mirrored events take the parent's seq", i, eventKind(ev), ev.GetSeq(), ev.GetSessionId(), ev.GetRunId())
		}
	}
	starts, ends := subagentsOf(evs, "agent_start"), subagentsOf(evs, "agent_end")
	if len(starts) != 2 || len(ends) != 2 || len(subagentsOf(evs, "approval_requested")) != 1 || len(subagentsOf(evs, "message_end")) != 0 {
		t.Fatalf("mirrored: %d agent_start, %d agent_end (%s)", len(starts), len(ends), kinds(evs))
	}
	for _, s := range starts {
		o := s.GetEvent().GetAgentStart().GetOrigin()
		if o.GetSessionId() != parent || o.GetRunId() != runID || o.GetToolCallId() != s.GetToolCallId() || o.GetSubagentProfile() != s.GetProfile() ||
			s.GetSessionId() != agent.SubagentSessionID(parent, runID, s.GetToolCallId()) || s.GetEvent().GetSeq() != 1 {
			t.Fatalf("mirrored agent_start %v", s)
		}
	}
	for _, e := range ends {
		if e.GetEvent().GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
			t.Fatalf("mirrored agent_end %v", e)
		}
	}

	results := toolResults(h.transcript(parent))
	if r := results["c1"]; callText(r) != "found: 42" || r.GetIsError() {
		t.Fatalf("the researcher's call: %v", r)
	}
	if r := results["c2"]; callText(r) != "reviewed: fine" || r.GetIsError() {
		t.Fatalf("the reviewer's call: %v", r)
	}

	list, err := h.client.ListSessions(h.ctx(), &agentdv1.ListSessionsRequest{OriginSessionId: parent})
	if err != nil || len(list.GetSessions()) != 2 {
		t.Fatalf("ListSessions by origin: %v, %v", list, err)
	}
	for _, s := range list.GetSessions() {
		o := s.GetOrigin()
		if o.GetSessionId() != parent || o.GetRunId() != runID || s.GetId() != agent.SubagentSessionID(parent, runID, o.GetToolCallId()) || o.GetEntryId() != "" {
			t.Fatalf("child %s has origin %v", s.GetId(), o)
		}
		want := map[string]string{"researcher": "You research.", "reviewer": "You coordinate."}[o.GetSubagentProfile()]
		if s.GetConfig().GetSystemPrompt() != want || len(s.GetConfig().GetSubagents()) != 0 {
			t.Fatalf("child %s (%s) has system prompt %q and %d profiles; want the overlay on the parent's, without profiles (max_depth 1)",
				s.GetId(), o.GetSubagentProfile(), s.GetConfig().GetSystemPrompt(), len(s.GetConfig().GetSubagents()))
		}
		if hasTool(h.context(s.GetId()), agent.SpawnAgentTool) {
			t.Fatalf("child %s may spawn beyond max_depth", s.GetId())
		}
		// The child's own stream is complete on Attach.
		own, err := drainCall(h.client.Attach(h.ctx(), &agentdv1.AttachRequest{SessionId: s.GetId(), RunId: ends[0].GetRunId()}))
		if s.GetId() == ends[0].GetSessionId() && (err != nil || own[len(own)-1].GetAgentEnd() == nil || !proto.Equal(own[0], starts[slices.IndexFunc(starts, func(x *agentdv1.SubagentEvent) bool { return x.GetSessionId() == s.GetId() })].GetEvent())) {
			t.Fatalf("the child's own stream: %s, %v", kinds(own), err)
		}
	}
	// The reviewer's approval is in its transcript, not the parent's.
	if r := toolResults(h.transcript(reviewerID))["p1"]; callText(r) != "published" {
		t.Fatalf("the reviewer's publish: %v", r)
	}
}

// Profiles and their overlays are checked as CreateSession checks a
// configuration, each refusal naming the field.
func TestSubagentConfigIsValidated(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	ok := func() *agentdv1.SubagentProfile {
		return &agentdv1.SubagentProfile{Name: "helper", Description: "Helps."}
	}
	many := make([]*agentdv1.SubagentProfile, agent.MaxSubagentProfiles+1)
	for i := range many {
		many[i] = &agentdv1.SubagentProfile{Name: fmt.Sprintf("p%d", i), Description: "d"}
	}
	tests := []struct {
		name   string
		cfg    *agentdv1.SessionConfig
		field  string
		saying string
	}{
		{"no name", &agentdv1.SessionConfig{Subagents: []*agentdv1.SubagentProfile{{Description: "d"}}}, "config.subagents[0].name", ""},
		{"bad name", &agentdv1.SessionConfig{Subagents: []*agentdv1.SubagentProfile{{Name: "a b", Description: "d"}}}, "config.subagents[0].name", ""},
		{"duplicate", &agentdv1.SessionConfig{Subagents: []*agentdv1.SubagentProfile{ok(), ok()}}, "config.subagents[1].name", "unique"},
		{"no description", &agentdv1.SessionConfig{Subagents: []*agentdv1.SubagentProfile{{Name: "x"}}}, "config.subagents[0].description", ""},
		{"long description", &agentdv1.SessionConfig{Subagents: []*agentdv1.SubagentProfile{{Name: "x", Description: strings.Repeat("d", 4097)}}}, "config.subagents[0].description", "4096"},
		{"too deep", &agentdv1.SessionConfig{Subagents: []*agentdv1.SubagentProfile{{Name: "x", Description: "d", MaxDepth: 5}}}, "config.subagents[0].max_depth", "limit of 4"},
		{"too many at once", &agentdv1.SessionConfig{Subagents: []*agentdv1.SubagentProfile{{Name: "x", Description: "d", MaxConcurrent: 17}}}, "config.subagents[0].max_concurrent", "limit of 16"},
		{"too many profiles", &agentdv1.SessionConfig{Subagents: many}, "config.subagents", "limit of 16"},
		{"spawn_agent declared", &agentdv1.SessionConfig{Tools: []*agentdv1.Tool{{Name: "spawn_agent", Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT,
			Description: "d", Parameters: &structpb.Struct{}}}}, "config.tools[0].name", "built-in tool for config.subagents"},
		{"overlay declares spawn_agent", &agentdv1.SessionConfig{Subagents: []*agentdv1.SubagentProfile{{Name: "x", Description: "d",
			Config: &agentdv1.SessionConfig{Tools: []*agentdv1.Tool{{Name: "spawn_agent"}}}}}}, "config.subagents[0].config.tools[0].name", "built-in tool"},
		{"overlay tool unknown", &agentdv1.SessionConfig{Subagents: []*agentdv1.SubagentProfile{{Name: "x", Description: "d",
			Config: &agentdv1.SessionConfig{Tools: []*agentdv1.Tool{{Name: "no_such_tool"}}}}}}, "config.subagents[0].config.tools[0].name", "no server tool"},
		{"overlay workspace tool without workspace", &agentdv1.SessionConfig{Subagents: []*agentdv1.SubagentProfile{{Name: "x", Description: "d",
			Config: &agentdv1.SessionConfig{Tools: []*agentdv1.Tool{{Name: "read_file"}}}}}}, "config.subagents[0].config.workspace_root", "required"},
		{"overlay workspace forbidden", &agentdv1.SessionConfig{Subagents: []*agentdv1.SubagentProfile{{Name: "x", Description: "d",
			Config: &agentdv1.SessionConfig{WorkspaceRoot: "/"}}}}, "config.subagents[0].config.workspace_root", "root directory"},
		{"overlay system prompt too large", &agentdv1.SessionConfig{Subagents: []*agentdv1.SubagentProfile{{Name: "x", Description: "d",
			Config: &agentdv1.SessionConfig{SystemPrompt: strings.Repeat("s", service.DefaultLimits.MaxSystemPromptBytes+1)}}}}, "config.subagents[0].config.system_prompt", "limit"},
		{"nested overlay", &agentdv1.SessionConfig{Subagents: []*agentdv1.SubagentProfile{{Name: "x", Description: "d", MaxDepth: 2,
			Config: &agentdv1.SessionConfig{Subagents: []*agentdv1.SubagentProfile{{Name: "y", Description: "d", MaxConcurrent: 99}}}}}},
			"config.subagents[0].config.subagents[0].max_concurrent", "limit of 16"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.client.CreateSession(h.ctx(), &agentdv1.CreateSessionRequest{Config: tc.cfg})
			wantCode(t, err, codes.InvalidArgument, tc.field)
			wantCode(t, err, codes.InvalidArgument, tc.saying)
		})
	}
	if _, err := h.client.CreateSession(h.ctx(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{Subagents: []*agentdv1.SubagentProfile{ok()}}}); err != nil {
		t.Fatalf("a valid profile: %v", err)
	}
}

// max_depth bounds how deep children spawn: with 2, the child has
// spawn_agent and its own child does not (its call of it fails as an
// unknown tool's would), and each level answers the one above.
func TestSubagentDepthLimit(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	// Every level has the same script: spawn, then answer.
	child := fauxOf(spawnCall(t, [3]string{"d1", "deep", "go deeper"}), textAnswer("level done"))
	cfg := fauxOf(spawnCall(t, [3]string{"d1", "deep", "go deep"}), textAnswer("top done"))
	cfg.Subagents = []*agentdv1.SubagentProfile{{Name: "deep", Description: "Goes deeper.", MaxDepth: 2, Config: child}}
	parent := h.createSession(cfg)
	evs := h.prompt(parent, "go")
	if end := evs[len(evs)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("agent_end %v", end)
	}
	childID := agent.SubagentSessionID(parent, evs[0].GetRunId(), "d1")
	if !hasTool(h.context(childID), agent.SpawnAgentTool) {
		t.Fatal("the child at depth 1 of 2 has no spawn_agent")
	}
	grand, err := h.client.ListSessions(h.ctx(), &agentdv1.ListSessionsRequest{OriginSessionId: childID})
	if err != nil || len(grand.GetSessions()) != 1 {
		t.Fatalf("the grandchild: %v, %v", grand, err)
	}
	grandID := grand.GetSessions()[0].GetId()
	if hasTool(h.context(grandID), agent.SpawnAgentTool) {
		t.Fatal("the grandchild at depth 2 of 2 may spawn")
	}
	if r := toolResults(h.transcript(grandID))["d1"]; !r.GetIsError() || !strings.Contains(callText(r), agent.SpawnAgentTool) {
		t.Fatalf("the grandchild's spawn_agent call: %v, want an unknown tool's error", r)
	}
	if r := toolResults(h.transcript(childID))["d1"]; callText(r) != "level done" {
		t.Fatalf("the child's call: %v", r)
	}
	if r := toolResults(h.transcript(parent))["d1"]; callText(r) != "level done" {
		t.Fatalf("the parent's call: %v", r)
	}
}

// max_concurrent bounds the children of a profile one parent run has
// active: with 1, the second child of a batch starts only when the first
// ended.
func TestSubagentConcurrencyLimit(t *testing.T) {
	g := newGate()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}}, service.ServerOptions{})
	worker := fauxOf(toolCallAnswer(t, "w1", "wait", nil), textAnswer("worked"))
	worker.Tools = []*agentdv1.Tool{{Name: "wait"}}
	cfg := fauxOf(spawnCall(t, [3]string{"a", "worker", "one"}, [3]string{"b", "worker", "two"}), textAnswer("done"))
	cfg.Subagents = []*agentdv1.SubagentProfile{{Name: "worker", Description: "Works.", MaxConcurrent: 1, Config: worker}}
	parent := h.createSession(cfg)
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: parent, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no child reached its tool")
	}
	select {
	case <-g.entered:
		t.Fatal("two children of a profile with max_concurrent 1 run at once")
	case <-time.After(300 * time.Millisecond):
	}
	g.open()
	evs, err := drain(stream)
	if err != nil {
		t.Fatal(err)
	}
	starts, ends := subagentsOf(evs, "agent_start"), subagentsOf(evs, "agent_end")
	if len(starts) != 2 || len(ends) != 2 {
		t.Fatalf("%s", kinds(evs))
	}
	// The second child started after the first one ended.
	pos := func(s *agentdv1.SubagentEvent) int {
		return slices.IndexFunc(evs, func(ev *agentdv1.AgentEvent) bool { return ev.GetSubagent() == s })
	}
	if pos(starts[1]) < pos(ends[0]) {
		t.Fatalf("the second child started before the first ended: %s", kinds(evs))
	}
	results := toolResults(h.transcript(parent))
	if callText(results["a"]) != "worked" || callText(results["b"]) != "worked" {
		t.Fatalf("results %v", results)
	}
}

// The children's spending counts against the parent's budget: a child
// whose answers take the parent's tree over max_cost_usd ends
// BUDGET_EXCEEDED (its own budget is far from spent), so does the parent,
// and the parent's next Prompt is refused, its own spending alone being
// within the limit.
func TestSubagentSpendingRollsUp(t *testing.T) {
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{asking()}}, service.ServerOptions{})
	costing := func(m *agentdv1.AssistantMessage, cost float64) *agentdv1.AssistantMessage {
		m.Usage = &agentdv1.Usage{TotalTokens: 10, Cost: &agentdv1.Cost{Total: cost}}
		return m
	}
	child := fauxOf(costing(toolCallAnswer(t, "p1", "publish", nil), 0.6), costing(toolCallAnswer(t, "p2", "publish", nil), 0.6), textAnswer("spent"))
	child.Tools = []*agentdv1.Tool{{Name: "publish", Approval: agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW}}
	child.Budget = &agentdv1.Budget{MaxCostUsd: 100}
	cfg := fauxOf(costing(spawnCall(t, [3]string{"c1", "spender", "spend"}), 0.1), textAnswer("never"))
	cfg.Budget = &agentdv1.Budget{MaxCostUsd: 1}
	cfg.Subagents = []*agentdv1.SubagentProfile{{Name: "spender", Description: "Spends.", Config: child}}
	parent := h.createSession(cfg)
	evs := h.prompt(parent, "go")
	end := evs[len(evs)-1].GetAgentEnd()
	if end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_BUDGET_EXCEEDED || !strings.Contains(end.GetErrorMessage(), "$1.3000") {
		t.Fatalf("parent's agent_end %v (%s)", end, kinds(evs))
	}
	ends := subagentsOf(evs, "agent_end")
	if len(ends) != 1 {
		t.Fatalf("mirrored agent_end: %s", kinds(evs))
	}
	ce := ends[0].GetEvent().GetAgentEnd()
	if ce.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_BUDGET_EXCEEDED || !strings.Contains(ce.GetErrorMessage(), "counting its subagents") || !strings.Contains(ce.GetErrorMessage(), parent) {
		t.Fatalf("child's agent_end %v", ce)
	}
	own, err := h.client.GetSession(h.ctx(), &agentdv1.GetSessionRequest{SessionId: parent})
	if err != nil || own.GetSession().GetSpent().GetCostUsd() > 0.5 {
		t.Fatalf("the parent's own spending: %v, %v", own.GetSession().GetSpent(), err)
	}
	_, err = drainCall(h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: parent, Content: texts("more")}))
	wantCode(t, err, codes.ResourceExhausted, "max_cost_usd")
	// The child, too, refuses to run on while its parent is over budget.
	_, err = drainCall(h.client.Continue(h.ctx(), &agentdv1.ContinueRequest{SessionId: ends[0].GetSessionId()}))
	wantCode(t, err, codes.ResourceExhausted, "subagent of session")
}

// Aborting the parent aborts its active children, whichever way: Abort,
// a dropped stream, DeleteSession with force.
func TestSubagentAbortCascades(t *testing.T) {
	for _, how := range []string{"Abort", "dropped stream", "DeleteSession"} {
		t.Run(how, func(t *testing.T) {
			g := newGate()
			h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}}, service.ServerOptions{})
			worker := fauxOf(toolCallAnswer(t, "w1", "wait", nil), textAnswer("worked"))
			worker.Tools = []*agentdv1.Tool{{Name: "wait"}}
			cfg := fauxOf(spawnCall(t, [3]string{"c1", "worker", "work"}), textAnswer("done"))
			cfg.Subagents = []*agentdv1.SubagentProfile{{Name: "worker", Description: "Works.", Config: worker}}
			parent := h.createSession(cfg)
			ctx, cancel := context.WithCancel(h.ctx())
			defer cancel()
			stream, err := h.client.Prompt(ctx, &agentdv1.PromptRequest{SessionId: parent, Content: texts("go")})
			if err != nil {
				t.Fatal(err)
			}
			evs := recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetSubagent().GetEvent().GetAgentStart() != nil })
			start := evs[len(evs)-1].GetSubagent()
			<-g.entered
			switch how {
			case "Abort":
				if _, err := h.client.Abort(h.ctx(), &agentdv1.AbortRequest{SessionId: parent}); err != nil {
					t.Fatal(err)
				}
			case "dropped stream":
				cancel()
			case "DeleteSession":
				if _, err := h.client.DeleteSession(h.ctx(), &agentdv1.DeleteSessionRequest{SessionId: parent, Force: true}); err != nil {
					t.Fatal(err)
				}
			}
			child, err := drainCall(h.client.Attach(h.ctx(), &agentdv1.AttachRequest{SessionId: start.GetSessionId(), RunId: start.GetRunId()}))
			if err != nil {
				t.Fatal(err)
			}
			if end := child[len(child)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_ABORTED {
				t.Fatalf("the child's agent_end %v, want ABORTED", end)
			}
			s, err := h.client.GetSession(h.ctx(), &agentdv1.GetSessionRequest{SessionId: start.GetSessionId()})
			if err != nil || s.GetSession().GetState() != agentdv1.SessionState_SESSION_STATE_IDLE {
				t.Fatalf("the child after the abort: %v, %v", s, err)
			}
		})
	}
}

// A child is its parent's tenant's: another tenant finds neither it nor
// it among the parent's children, and cannot answer its requests.
func TestSubagentsStayInTheirTenant(t *testing.T) {
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{asking()}}, service.ServerOptions{Auth: &service.AuthConfig{Tokens: []service.TokenGrant{
		{SHA256: tokenHash("acme-token"), Tenant: "acme", Role: service.RoleUser},
		{SHA256: tokenHash("globex-token"), Tenant: "globex", Role: service.RoleUser},
	}}})
	acme, globex := as(h.ctx(), "acme-token"), as(h.ctx(), "globex-token")
	child := fauxOf(toolCallAnswer(t, "p1", "publish", nil), textAnswer("ok"))
	child.Tools = []*agentdv1.Tool{{Name: "publish", Approval: agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK}}
	cfg := fauxOf(spawnCall(t, [3]string{"c1", "helper", "help"}), textAnswer("done"))
	cfg.Subagents = []*agentdv1.SubagentProfile{{Name: "helper", Description: "Helps.", Config: child}}
	created, err := h.client.CreateSession(acme, &agentdv1.CreateSessionRequest{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	parent := created.GetSession().GetId()
	stream, err := h.client.Prompt(acme, &agentdv1.PromptRequest{SessionId: parent, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	evs := recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetSubagent().GetEvent().GetApprovalRequested() != nil })
	childID := evs[len(evs)-1].GetSubagent().GetSessionId()
	_, err = h.client.GetSession(globex, &agentdv1.GetSessionRequest{SessionId: childID})
	wantCode(t, err, codes.NotFound, childID)
	_, err = h.client.ResolveApproval(globex, &agentdv1.ResolveApprovalRequest{SessionId: childID, ToolCallId: "p1", Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED})
	wantCode(t, err, codes.NotFound, childID)
	if list, err := h.client.ListSessions(globex, &agentdv1.ListSessionsRequest{OriginSessionId: parent}); err != nil || len(list.GetSessions()) != 0 {
		t.Fatalf("another tenant lists the children: %v, %v", list, err)
	}
	if list, err := h.client.ListSessions(acme, &agentdv1.ListSessionsRequest{OriginSessionId: parent}); err != nil || len(list.GetSessions()) != 1 || list.GetSessions()[0].GetId() != childID {
		t.Fatalf("the tenant's children: %v, %v", list, err)
	}
	if _, err := h.client.ResolveApproval(acme, &agentdv1.ResolveApprovalRequest{SessionId: childID, ToolCallId: "p1", Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED}); err != nil {
		t.Fatal(err)
	}
	rest, err := drain(stream)
	if err != nil || rest[len(rest)-1].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("%s, %v", kinds(rest), err)
	}
}

// An operator's ceiling that names spawn_agent (requireApproval) makes
// every spawn ask: the parent's stream carries approval_requested for the
// call, and a denied spawn creates no child session.
func TestSubagentSpawnAsksUnderTheCeiling(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	h.opts.Ceilings = agent.Ceilings{Default: agent.Ceiling{RequireApproval: agent.Limit{Values: []string{"spawn_*"}, Setting: "--require-approval"}}}
	h.restart()
	cfg := fauxOf(spawnCall(t, [3]string{"c1", "helper", "help"}), textAnswer("done"))
	cfg.Subagents = []*agentdv1.SubagentProfile{{Name: "helper", Description: "Helps.", Config: fauxOf(textAnswer("helped"))}}
	created, err := h.client.CreateSession(h.ctx(), &agentdv1.CreateSessionRequest{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	parent := created.GetSession().GetId()
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: parent, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	evs := recvUntil(t, stream, func(ev *agentdv1.AgentEvent) bool { return ev.GetApprovalRequested() != nil })
	if got := evs[len(evs)-1].GetApprovalRequested(); got.GetToolName() != agent.SpawnAgentTool || got.GetToolCallId() != "c1" {
		t.Fatalf("approval requested for %v", got)
	}
	if _, err := h.client.ResolveApproval(h.ctx(), &agentdv1.ResolveApprovalRequest{SessionId: parent, ToolCallId: "c1",
		Decision: agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED}); err != nil {
		t.Fatal(err)
	}
	rest, err := drain(stream)
	if err != nil || rest[len(rest)-1].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("%s, %v", kinds(rest), err)
	}
	if tr := toolResults(h.transcript(parent))["c1"]; !tr.GetIsError() {
		t.Fatalf("the denied spawn's result: %v", tr)
	}
	if list, err := h.client.ListSessions(h.ctx(), &agentdv1.ListSessionsRequest{OriginSessionId: parent}); err != nil || len(list.GetSessions()) != 0 {
		t.Fatalf("a denied spawn created children: %v, %v", list, err)
	}
}
