package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// agentd killed (SIGKILL) while a subagent waits for an approval: after
// the restart on the same file both runs are INTERRUPTED, the parent's
// spawn_agent call is in doubt, and ResolveInDoubt RETRY finds the child
// it created (no second child), continues it to its answer and stores
// that answer as the call's result; the parent then goes on.
func TestKilledDuringSubagentRetriesIntoTheSameChild(t *testing.T) {
	db := filepath.Join(t.TempDir(), "agentd.db")
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "note.txt"), []byte("the note"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	call := func(id, name string, a map[string]any) *agentdv1.AssistantMessage {
		return &agentdv1.AssistantMessage{Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_ToolCall{
			ToolCall: &agentdv1.ToolCall{Id: id, Name: name, Arguments: args(a)}}}}}
	}
	text := func(s string) *agentdv1.AssistantMessage { return &agentdv1.AssistantMessage{Content: texts(s)} }
	child := &agentdv1.SessionConfig{
		WorkspaceRoot: ws,
		Tools:         []*agentdv1.Tool{{Name: "read_file", Approval: agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK}},
		Faux:          &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{call("r1", "read_file", map[string]any{"path": "note.txt"}), text("child answer")}},
	}
	p := startProc(t, db)
	c := p.client()
	parent := createSession(t, c, &agentdv1.SessionConfig{
		Faux:      &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{call("c1", agent.SpawnAgentTool, map[string]any{"profile": "reader", "task": "read the note"}), text("parent done")}},
		Subagents: []*agentdv1.SubagentProfile{{Name: "reader", Description: "Reads notes.", Config: child}},
	})
	stream, err := c.Prompt(testCtx(t), &agentdv1.PromptRequest{SessionId: parent, Content: texts("go"), Detach: true})
	if err != nil {
		t.Fatal(err)
	}
	var parentRun string
	var waiting *agentdv1.SubagentEvent
	for waiting == nil {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		parentRun = ev.GetRunId()
		if s := ev.GetSubagent(); s.GetEvent().GetApprovalRequested() != nil {
			waiting = s
		}
	}
	childID, childRun := waiting.GetSessionId(), waiting.GetRunId()
	if childID != agent.SubagentSessionID(parent, parentRun, "c1") {
		t.Fatalf("child session %q", childID)
	}
	p.kill()

	p = startProc(t, db)
	c = p.client()
	for _, r := range [][2]string{{parent, parentRun}, {childID, childRun}} {
		evs, err := drain(c.Attach(testCtx(t), &agentdv1.AttachRequest{SessionId: r[0], RunId: r[1]}))
		if err != nil || len(evs) == 0 || evs[len(evs)-1].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED {
			t.Fatalf("run %s of %s after the restart: %d events, %v", r[1], r[0], len(evs), err)
		}
	}
	if got, want := entryKinds(transcript(t, c, parent)), "user assistant tool_call_started tool_in_doubt"; got != want {
		t.Fatalf("the parent's transcript %q, want %q", got, want)
	}
	_, err = drain(c.Prompt(testCtx(t), &agentdv1.PromptRequest{SessionId: parent, Content: texts("again")}))
	wantInDoubt(t, err, "c1")

	resp, err := c.ResolveInDoubt(testCtx(t), &agentdv1.ResolveInDoubtRequest{SessionId: parent, ToolCallId: "c1", Action: agentdv1.InDoubtAction_IN_DOUBT_ACTION_RETRY})
	if err != nil {
		t.Fatal(err)
	}
	if tr := resp.GetEntry().GetMessage().GetToolResult(); tr.GetIsError() || tr.GetContent()[0].GetText().GetText() != "child answer" {
		t.Fatalf("the retried call's result: %v", tr)
	}
	list, err := c.ListSessions(testCtx(t), &agentdv1.ListSessionsRequest{OriginSessionId: parent})
	if err != nil || len(list.GetSessions()) != 1 || list.GetSessions()[0].GetId() != childID {
		t.Fatalf("the parent's children after the retry: %v, %v", list, err)
	}
	entries := transcript(t, c, childID)
	if got, want := entryKinds(entries), "user assistant tool_result assistant"; got != want {
		t.Fatalf("the child's transcript %q, want %q (continued, not prompted again)", got, want)
	}
	if tr := entries[2].GetMessage().GetToolResult(); !tr.GetIsError() || !strings.Contains(tr.GetContent()[0].GetText().GetText(), "No result provided") {
		t.Fatalf("the child's call cut by the crash: %v", tr)
	}
	// A second retry is refused (the call is answered), and the parent
	// goes on from the child's answer.
	if _, err := c.ResolveInDoubt(testCtx(t), &agentdv1.ResolveInDoubtRequest{SessionId: parent, ToolCallId: "c1", Action: agentdv1.InDoubtAction_IN_DOUBT_ACTION_RETRY}); status.Code(err) != codes.NotFound {
		t.Fatalf("a second retry: %v, want NOT_FOUND (not in doubt)", err)
	}
	evs, err := drain(c.Continue(testCtx(t), &agentdv1.ContinueRequest{SessionId: parent}))
	if err != nil || evs[len(evs)-1].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		t.Fatalf("Continue of the parent: %d events, %v", len(evs), err)
	}
	last := transcript(t, c, parent)
	if a := last[len(last)-1].GetMessage().GetAssistant(); a.GetContent()[0].GetText().GetText() != "parent done" {
		t.Fatalf("the parent's answer: %v", a)
	}
}
