package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// inDoubtCommand appends a line to marker; the first time it then sleeps
// (the call agentd is killed in), a retry finishes at once.
const inDoubtCommand = `echo run >> marker; if [ "$(wc -l < marker)" -lt 2 ]; then echo $$ > pid; sleep 30; fi; echo finished`

// inDoubtSession is a session whose answer calls bash (inDoubtCommand,
// allowed) and write_file (which waits for an approval nobody gives), in
// a workspace of its own.
func inDoubtSession(t *testing.T, c agentdv1.AgentServiceClient) (id, ws string) {
	t.Helper()
	ws = t.TempDir()
	args := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	call := &agentdv1.AssistantMessage{StopReason: agentdv1.StopReason_STOP_REASON_TOOL_USE, Content: []*agentdv1.ContentBlock{
		{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: "c1", Name: "bash", Arguments: args(map[string]any{"command": inDoubtCommand})}}},
		{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: "c2", Name: "write_file", Arguments: args(map[string]any{"path": "note.txt", "content": "x"})}}},
	}}
	id = createSession(t, c, &agentdv1.SessionConfig{
		WorkspaceRoot: ws,
		Tools: []*agentdv1.Tool{
			{Name: "bash", Approval: agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW},
			{Name: "write_file", Approval: agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK},
		},
		Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{call, {Content: texts("after")}}},
	})
	return id, ws
}

// entryKind names what an entry holds.
func entryKind(e *agentdv1.Entry) string {
	if m := e.GetMessage(); m != nil {
		return string(m.ProtoReflect().WhichOneof(m.ProtoReflect().Descriptor().Oneofs().ByName("kind")).Name())
	}
	return string(e.ProtoReflect().WhichOneof(e.ProtoReflect().Descriptor().Oneofs().ByName("payload")).Name())
}

func entryKinds(entries []*agentdv1.Entry) string {
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = entryKind(e)
	}
	return strings.Join(names, " ")
}

// agentd killed (SIGKILL) while bash sleeps after writing a file: after the
// restart the call is in doubt (transcript and event log), the call that
// waited for approval got "No result provided", Prompt is refused with
// TOOL_CALLS_IN_DOUBT until ResolveInDoubt decides the call, and each of
// retry, skip and supply gives the call its result and the session back.
func TestKilledDuringBashLeavesTheCallInDoubt(t *testing.T) {
	db := filepath.Join(t.TempDir(), "agentd.db")
	p := startProc(t, db, "--sandbox=off")
	c := p.client()
	actions := []agentdv1.InDoubtAction{agentdv1.InDoubtAction_IN_DOUBT_ACTION_RETRY, agentdv1.InDoubtAction_IN_DOUBT_ACTION_SKIP, agentdv1.InDoubtAction_IN_DOUBT_ACTION_SUPPLY}
	ids, wss, runs := make([]string, len(actions)), make([]string, len(actions)), make([]string, len(actions))
	for i := range actions {
		ids[i], wss[i] = inDoubtSession(t, c)
		stream, err := c.Prompt(testCtx(t), &agentdv1.PromptRequest{SessionId: ids[i], Content: texts("go"), Detach: true})
		if err != nil {
			t.Fatal(err)
		}
		// write_file waits for its approval, bash runs beside it.
		for {
			ev, err := stream.Recv()
			if err != nil {
				t.Fatalf("session %d: %v", i, err)
			}
			runs[i] = ev.GetRunId()
			if ev.GetApprovalRequested() != nil {
				break
			}
		}
		// bash wrote its file and sleeps.
		pid := waitForFile(t, filepath.Join(wss[i], "pid"))
		n, err := strconv.Atoi(strings.TrimSpace(pid))
		if err != nil {
			t.Fatalf("pid file: %q", pid)
		}
		t.Cleanup(func() { _ = syscall.Kill(-n, syscall.SIGKILL) }) // the orphaned shell
	}
	p.kill()

	p = startProc(t, db, "--sandbox=off")
	c = p.client()
	for i, action := range actions {
		t.Run(strings.TrimPrefix(action.String(), "IN_DOUBT_ACTION_"), func(t *testing.T) {
			id := ids[i]
			entries := transcript(t, c, id)
			if got, want := entryKinds(entries), "user assistant tool_call_started tool_in_doubt tool_result"; got != want {
				t.Fatalf("transcript after the restart %q, want %q", got, want)
			}
			doubt := entries[3].GetToolInDoubt()
			if doubt.GetToolCallId() != "c1" || doubt.GetToolName() != "bash" || doubt.GetRunId() != runs[i] ||
				doubt.GetIdempotencyKey() != id+"/"+runs[i]+"/c1" || doubt.GetStartEntryId() != entries[2].GetId() {
				t.Fatalf("in doubt: %v", doubt)
			}
			if tr := entries[4].GetMessage().GetToolResult(); tr.GetToolCallId() != "c2" || !tr.GetIsError() || tr.GetContent()[0].GetText().GetText() != "No result provided" {
				t.Fatalf("the call that never started: %v", tr)
			}
			evs, err := drain(c.Attach(testCtx(t), &agentdv1.AttachRequest{SessionId: id, RunId: runs[i]}))
			if err != nil || len(evs) < 4 {
				t.Fatalf("Attach: %d events, %v", len(evs), err)
			}
			if d := evs[len(evs)-4].GetToolInDoubt(); d.GetToolCallId() != "c1" || evs[len(evs)-1].GetAgentEnd().GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_INTERRUPTED {
				t.Fatalf("the run's last events: %v ... %v", evs[len(evs)-4], evs[len(evs)-1])
			}

			_, err = drain(c.Prompt(testCtx(t), &agentdv1.PromptRequest{SessionId: id, Content: texts("again")}))
			wantInDoubt(t, err, "c1")
			_, err = c.ResolveInDoubt(testCtx(t), &agentdv1.ResolveInDoubtRequest{SessionId: id, ToolCallId: "c2", Action: agentdv1.InDoubtAction_IN_DOUBT_ACTION_SKIP})
			if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "not in doubt") {
				t.Fatalf("ResolveInDoubt of a call not in doubt: %v", err)
			}

			req := &agentdv1.ResolveInDoubtRequest{SessionId: id, ToolCallId: "c1", Action: action}
			want, isError := "finished", false
			switch action {
			case agentdv1.InDoubtAction_IN_DOUBT_ACTION_SKIP:
				want, isError = "The call was not retried: agentd stopped while it ran, so whether it took effect is unknown.", true
			case agentdv1.InDoubtAction_IN_DOUBT_ACTION_SUPPLY:
				req.Content, want = texts("the file was written once"), "the file was written once"
			}
			resp, err := c.ResolveInDoubt(testCtx(t), req)
			if err != nil {
				t.Fatal(err)
			}
			tr := resp.GetEntry().GetMessage().GetToolResult()
			if tr.GetToolCallId() != "c1" || tr.GetIsError() != isError || !strings.Contains(tr.GetContent()[0].GetText().GetText(), want) || len(resp.GetRemaining()) != 0 {
				t.Fatalf("ResolveInDoubt: %v, want %q (error %v)", resp, want, isError)
			}
			runsOfCommand := 1
			if action == agentdv1.InDoubtAction_IN_DOUBT_ACTION_RETRY {
				runsOfCommand = 2
			}
			if data, _ := os.ReadFile(filepath.Join(wss[i], "marker")); strings.Count(string(data), "run") != runsOfCommand {
				t.Fatalf("marker %q: the command ran %d times, want %d", data, strings.Count(string(data), "run"), runsOfCommand)
			}
			// The call and its result pair in the transcript, after the
			// retry's own start when it ran again.
			after := transcript(t, c, id)
			wantKinds := "user assistant tool_call_started tool_in_doubt tool_result tool_result"
			if action == agentdv1.InDoubtAction_IN_DOUBT_ACTION_RETRY {
				wantKinds = "user assistant tool_call_started tool_in_doubt tool_result tool_call_started tool_result"
			}
			if got := entryKinds(after); got != wantKinds {
				t.Fatalf("transcript after ResolveInDoubt %q, want %q", got, wantKinds)
			}
			if last := after[len(after)-1]; last.GetId() != resp.GetEntry().GetId() {
				t.Fatalf("last entry %v, want the stored result", last)
			}

			evs, err = drain(c.Prompt(testCtx(t), &agentdv1.PromptRequest{SessionId: id, Content: texts("again")}))
			if err != nil {
				t.Fatalf("Prompt after ResolveInDoubt: %v", err)
			}
			if end := evs[len(evs)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
				t.Fatalf("the run after ResolveInDoubt: %v", end)
			}
		})
	}
}

// wantInDoubt checks a refusal for calls in doubt naming ids.
func wantInDoubt(t *testing.T, err error, ids string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "ResolveInDoubt") {
		t.Fatalf("Prompt with a call in doubt: %v, want FAILED_PRECONDITION naming ResolveInDoubt", err)
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			if info.GetReason() != "TOOL_CALLS_IN_DOUBT" || info.GetMetadata()["tool_call_ids"] != ids {
				t.Fatalf("ErrorInfo %v, want TOOL_CALLS_IN_DOUBT for %s", info, ids)
			}
			return
		}
	}
	t.Fatalf("no ErrorInfo in %v", err)
}

// waitForFile returns the content of path once it exists and is not empty.
func waitForFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if data, err := os.ReadFile(path); err == nil && len(data) > 0 && strings.HasSuffix(string(data), "\n") {
			return string(data)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
