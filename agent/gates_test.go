package agent_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
)

func colorTool(t testing.TB) *agentdv1.Tool {
	return &agentdv1.Tool{
		Name: "pick_color", Description: "Ask the user to pick a color.", Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT,
		Parameters: mustStruct(t, map[string]any{
			"type": "object", "required": []any{"hint"},
			"properties": map[string]any{"hint": map[string]any{"type": "string"}},
		}),
	}
}

// noteTool is a mutating server tool: it needs approval by default.
func noteTool(ran *atomic.Int32) agentloop.Tool {
	params, _ := structpb.NewStruct(map[string]any{"type": "object"})
	return agentloop.FuncTool{
		Def: &agentdv1.Tool{Name: "write_note", Description: "Write a note.", Parameters: params},
		Fn: func(context.Context, agentloop.Call) (agentloop.Result, error) {
			ran.Add(1)
			return agentloop.Result{Content: texts("note written")}, nil
		},
	}
}

func TestClientToolRoundTrip(t *testing.T) {
	h := newHarness(t, agent.Options{})
	ctx := context.Background()
	id := h.session(&agentdv1.SessionConfig{
		Tools: []*agentdv1.Tool{colorTool(t)},
		// Paced, so the run is still answering when the second result
		// arrives (which must be too late, not "no active run").
		Faux: &agentdv1.FauxScript{TokensPerSecond: 10, Responses: []*agentdv1.AssistantMessage{
			toolCall(t, "call_c", "pick_color", map[string]any{"hint": "warm"}), text("you picked red"),
		}},
	})
	s := h.promptRun(id, "pick one")
	evs := s.until(func(ev *agentdv1.AgentEvent) bool { return ev.GetToolCallRequested() != nil })
	req := evs[len(evs)-1].GetToolCallRequested()
	if req.GetToolCallId() != "call_c" || req.GetArguments().GetFields()["hint"].GetStringValue() != "warm" || req.GetDeadline() == nil ||
		req.GetIdempotencyKey() != agent.IdempotencyKey(id, evs[0].GetRunId(), "call_c") {
		t.Fatalf("tool_call_requested: %v", req)
	}

	err := h.a.SubmitToolResult(ctx, id, "call_nope", agent.ToolResult{Content: texts("x")})
	wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_NOT_WAITING, "call_nope")
	details, _ := structpb.NewValue(map[string]any{"swatch": "#f00"})
	if err := h.a.SubmitToolResult(ctx, id, "call_c", agent.ToolResult{Content: texts("red"), Details: details}); err != nil {
		t.Fatal(err)
	}
	err = h.a.SubmitToolResult(ctx, id, "call_c", agent.ToolResult{Content: texts("blue")})
	wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_ANSWER_TOO_LATE, "call_c")
	rest := s.rest()
	if end := rest[len(rest)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("run: %s", allKinds(rest))
	}
	entries := testkit.MessageEntries(h.transcript(id))
	tr := entries[2].GetMessage().GetToolResult()
	if tr.GetToolCallId() != "call_c" || tr.GetIsError() || tr.GetContent()[0].GetText().GetText() != "red" ||
		tr.GetDetails().GetStructValue().GetFields()["swatch"].GetStringValue() != "#f00" {
		t.Fatalf("stored result: %v", tr)
	}
	// After the run nothing waits.
	err = h.a.SubmitToolResult(ctx, id, "call_c", agent.ToolResult{Content: texts("late")})
	wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_RUN_NOT_ACTIVE, "no active run")
}

func TestClientToolTimeoutAndInvalidArguments(t *testing.T) {
	h := newHarness(t, agent.Options{})
	id := h.session(&agentdv1.SessionConfig{
		Tools:             []*agentdv1.Tool{colorTool(t)},
		ClientToolTimeout: durationpb.New(150 * time.Millisecond),
		Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{
			toolCall(t, "call_bad", "pick_color", map[string]any{}), // missing "hint"
			toolCall(t, "call_slow", "pick_color", map[string]any{"hint": "any"}),
			text("ok"),
		}},
	})
	evs := h.run(id, "go")
	requested := 0
	for _, ev := range evs {
		if ev.GetToolCallRequested() != nil {
			requested++
		}
	}
	if requested != 1 {
		t.Fatalf("%d tool_call_requested events, want 1 (invalid arguments never reach the client)", requested)
	}
	entries := testkit.MessageEntries(h.transcript(id))
	bad := entries[2].GetMessage().GetToolResult()
	if !bad.GetIsError() || !strings.Contains(bad.GetContent()[0].GetText().GetText(), `Validation failed for tool "pick_color"`) {
		t.Fatalf("invalid arguments result: %v", bad)
	}
	slow := entries[4].GetMessage().GetToolResult()
	if !slow.GetIsError() || !strings.Contains(slow.GetContent()[0].GetText().GetText(), "did not return a result") {
		t.Fatalf("timed out result: %v", slow)
	}
}

func approvalConfig(policy agentdv1.ApprovalPolicy, calls ...*agentdv1.AssistantMessage) *agentdv1.SessionConfig {
	return &agentdv1.SessionConfig{
		Tools:           []*agentdv1.Tool{{Name: "write_note", Approval: policy}, {Name: "read_file"}},
		ApprovalTimeout: durationpb.New(time.Minute),
		Faux:            &agentdv1.FauxScript{Responses: append(calls, text("finished"))},
	}
}

func TestApprovalAllowDenyAndDurability(t *testing.T) {
	for _, tc := range []struct {
		decision agentdv1.ApprovalDecision
		reason   string
		wantRan  int32
	}{
		{agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED, "", 1},
		{agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED, "not now", 0},
	} {
		t.Run(tc.decision.String(), func(t *testing.T) {
			var ran atomic.Int32
			h := newHarness(t, agent.Options{Tools: []agentloop.Tool{noteTool(&ran), testkit.ReadFileTool(seedFiles)}})
			id := h.session(approvalConfig(agentdv1.ApprovalPolicy_APPROVAL_POLICY_UNSPECIFIED, toolCall(t, "call_w", "write_note", nil)))
			s := h.promptRun(id, "write it")
			evs := s.until(func(ev *agentdv1.AgentEvent) bool { return ev.GetApprovalRequested() != nil })
			if ar := evs[len(evs)-1].GetApprovalRequested(); ar.GetToolCallId() != "call_w" || ar.GetToolName() != "write_note" {
				t.Fatalf("approval_requested: %v", ar)
			}
			if ran.Load() != 0 {
				t.Fatal("the tool ran before approval")
			}
			allowed := tc.decision == agentdv1.ApprovalDecision_APPROVAL_DECISION_ALLOWED
			if _, err := h.a.ResolveApproval(context.Background(), id, "call_w", agent.Approval{Allowed: allowed, Reason: tc.reason, DecidedBy: "alice"}); err != nil {
				t.Fatal(err)
			}
			s.rest()
			if ran.Load() != tc.wantRan {
				t.Fatalf("tool ran %d times, want %d", ran.Load(), tc.wantRan)
			}
			check := func() {
				entries := h.transcript(id)
				if got, want := testkit.MessageKinds(entries), "user assistant approval_notice tool_result assistant"; got != want {
					t.Fatalf("transcript %q, want %q", got, want)
				}
				n := entries[2].GetMessage().GetApprovalNotice()
				if n.GetDecision() != tc.decision || n.GetDecidedBy() != "alice" || n.GetReason() != tc.reason || n.GetToolCallId() != "call_w" || !n.GetVisibleInUi() {
					t.Fatalf("notice: %v", n)
				}
				tr := entries[3].GetMessage().GetToolResult()
				if denied := !allowed; tr.GetIsError() != denied ||
					(denied && tr.GetContent()[0].GetText().GetText() != "The user denied this tool call: not now") {
					t.Fatalf("result: %v", tr)
				}
			}
			check()
			h.restart()
			check()
		})
	}
}

func TestApprovalTimeoutAbortAndPolicy(t *testing.T) {
	var ran atomic.Int32
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{noteTool(&ran), testkit.ReadFileTool(seedFiles)}})

	// Timeout.
	cfg := approvalConfig(agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK, toolCall(t, "call_t", "write_note", nil))
	cfg.ApprovalTimeout = durationpb.New(100 * time.Millisecond)
	id := h.session(cfg)
	h.run(id, "go")
	entries := h.transcript(id)
	if n := entries[2].GetMessage().GetApprovalNotice(); n.GetDecision() != agentdv1.ApprovalDecision_APPROVAL_DECISION_TIMED_OUT || n.GetDecidedBy() != "timeout" {
		t.Fatalf("timeout notice: %v", entries[2])
	}
	if tr := entries[3].GetMessage().GetToolResult(); !tr.GetIsError() || !strings.Contains(tr.GetContent()[0].GetText().GetText(), "approval_timeout") {
		t.Fatalf("timeout result: %v", tr)
	}

	// Deny by policy: no request, a notice by "policy".
	id = h.session(approvalConfig(agentdv1.ApprovalPolicy_APPROVAL_POLICY_DENY, toolCall(t, "call_d", "write_note", nil)))
	evs := h.run(id, "go")
	if strings.Contains(allKinds(evs), "approval_requested") {
		t.Fatal("a denied-by-policy call asked for approval")
	}
	entries = h.transcript(id)
	if n := entries[2].GetMessage().GetApprovalNotice(); n.GetDecision() != agentdv1.ApprovalDecision_APPROVAL_DECISION_DENIED || n.GetDecidedBy() != "policy" {
		t.Fatalf("policy notice: %v", entries[2])
	}

	// Abort while waiting.
	id = h.session(approvalConfig(agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK, toolCall(t, "call_a", "write_note", nil)))
	s := h.promptRun(id, "go")
	s.until(func(ev *agentdv1.AgentEvent) bool { return ev.GetApprovalRequested() != nil })
	if _, err := h.a.Abort(context.Background(), id, ""); err != nil {
		t.Fatal(err)
	}
	if rest := s.rest(); rest[len(rest)-1].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_ABORTED {
		t.Fatalf("abort while waiting: %s", allKinds(rest))
	}
	_, err := h.a.ResolveApproval(context.Background(), id, "call_a", agent.Approval{Allowed: true})
	wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_RUN_NOT_ACTIVE, "no active run")
	if ran.Load() != 0 {
		t.Fatalf("write_note ran %d times; every call was refused", ran.Load())
	}
}

func TestParallelCallsOneWaitsForApproval(t *testing.T) {
	var ran atomic.Int32
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{noteTool(&ran), testkit.ReadFileTool(seedFiles)}})
	both := toolCall(t, "call_w", "write_note", nil)
	both.Content = append(both.Content, toolCall(t, "call_r", "read_file", map[string]any{"path": "src/config.ts"}).Content...)
	cfg := approvalConfig(agentdv1.ApprovalPolicy_APPROVAL_POLICY_UNSPECIFIED, both)
	cfg.IncludeApprovalsInModelContext = true
	id := h.session(cfg)
	s := h.promptRun(id, "go")
	// The read finishes while the write still waits for its approval.
	sawApproval, readDone := false, false
	for !sawApproval || !readDone {
		ev, err := s.recv()
		if err != nil {
			t.Fatal(err)
		}
		sawApproval = sawApproval || ev.GetApprovalRequested() != nil
		if end := ev.GetToolExecutionEnd(); end != nil {
			if end.GetResult().GetToolCallId() != "call_r" {
				t.Fatalf("%s ended before the approval", end.GetResult().GetToolCallId())
			}
			readDone = true
		}
	}
	if _, err := h.a.ResolveApproval(context.Background(), id, "call_w", agent.Approval{Allowed: true}); err != nil {
		t.Fatal(err)
	}
	s.rest()
	// Results in call order, after the notice.
	if got, want := testkit.MessageKinds(h.transcript(id)), "user assistant approval_notice tool_result tool_result assistant"; got != want {
		t.Fatalf("transcript %q, want %q", got, want)
	}
	// The notice reaches the model as a short user message when asked to.
	c := h.context(id)
	found := false
	for _, m := range c.GetMessages() {
		for _, b := range m.GetUser().GetContent() {
			if strings.Contains(b.GetText().GetText(), "write_note") {
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("approval notice not in the model context: %v", c.GetMessages())
	}
}

// A detached run keeps waiting for its client tool after the follower that
// started it is gone; another follower attaches and the answer arrives.
func TestDetachedRunWaitsForAClientToAttachAndAnswer(t *testing.T) {
	h := newHarness(t, agent.Options{})
	id := h.session(&agentdv1.SessionConfig{
		Tools: []*agentdv1.Tool{colorTool(t)},
		Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{
			toolCall(t, "call_c", "pick_color", map[string]any{"hint": "cool"}), text("blue it is"),
		}},
	})
	s := h.startRun(agent.StartRequest{SessionID: id, Prompt: user("pick one")}, true)
	first := s.until(func(ev *agentdv1.AgentEvent) bool { return ev.GetToolCallRequested() != nil })
	s.cancel()
	if _, err := s.drain(); err == nil {
		t.Fatal("the dropped follower ended without an error")
	}

	att := h.attach(id, first[0].GetRunId(), first[len(first)-1].GetSeq(), agent.FollowOptions{})
	if err := h.a.SubmitToolResult(context.Background(), id, "call_c", agent.ToolResult{Content: texts("blue")}); err != nil {
		t.Fatal(err)
	}
	rest := att.rest()
	checkSeqsFrom(t, append(first, rest...), id, 1)
	if end := rest[len(rest)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("detached run: %s", allKinds(rest))
	}
	if got := testkit.MessageKinds(h.transcript(id)); got != "user assistant tool_result assistant" {
		t.Fatalf("transcript %q", got)
	}
}
