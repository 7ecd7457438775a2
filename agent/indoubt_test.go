package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/memory"
	"github.com/agentd/agentd/provider/faux"
	"github.com/agentd/agentd/tools/mcp"
	"github.com/agentd/agentd/tools/mcp/mcptest"
)

// chargeTool is a side-effecting tool whose first call never finishes
// (until its run is cancelled): the call a crash leaves in doubt. Later
// calls answer "charged".
type chargeTool struct {
	calls   atomic.Int32
	entered chan string
}

func (c *chargeTool) tool() agentloop.Tool {
	params, _ := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"usd": map[string]any{"type": "number"}}})
	return agentloop.FuncTool{
		Def: &agentdv1.Tool{Name: "charge", Description: "Charge the card.", Parameters: params},
		Fn: func(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
			n := c.calls.Add(1)
			c.entered <- call.ID
			if n == 1 {
				<-ctx.Done()
				return agentloop.Result{}, ctx.Err()
			}
			return agentloop.Result{Content: texts("charged")}, nil
		},
	}
}

// crashDuringCharge starts a run whose answer calls charge (c1, running
// when agentd dies) and write_note (c2, waiting for approval, so never
// started), and "kills" the agent: the store is reopened under a new agent
// while the old one still runs, whose writes fail from then on, as a
// dead process's would. It returns the session and the interrupted run.
func crashDuringCharge(t *testing.T, h *harness, charge *chargeTool) (sessionID, runID string) {
	t.Helper()
	cfg := script(
		&agentdv1.AssistantMessage{StopReason: agentdv1.StopReason_STOP_REASON_TOOL_USE, Content: append(
			toolCall(t, "c1", "charge", map[string]any{"usd": 5}).GetContent(),
			toolCall(t, "c2", "write_note", nil).GetContent()...)},
		text("after"))
	cfg.Tools = []*agentdv1.Tool{
		{Name: "charge", Approval: agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW},
		{Name: "write_note", Approval: agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK},
	}
	id := h.session(cfg)
	s := h.promptRun(id, "pay")
	evs := s.until(func(ev *agentdv1.AgentEvent) bool { return ev.GetApprovalRequested() != nil })
	if req := evs[len(evs)-1].GetApprovalRequested(); req.GetIdempotencyKey() != agent.IdempotencyKey(id, s.runID, "c2") {
		t.Fatalf("approval_requested %v: want the idempotency key of c2", req)
	}
	if got := <-charge.entered; got != "c1" {
		t.Fatalf("charge entered for %s", got)
	}
	old := h.a
	h.store = memory.Reopen(h.store)
	h.start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = old.Close(ctx) // its writes fail: its store is closed
	})
	return id, s.runID
}

// A call that started and never finished is in doubt after a restart: a
// ToolInDoubt entry and event (not "No result provided", which the call
// that never started gets), and the session refuses runs, appends and
// compactions until ResolveInDoubt decides it; each decision stores the
// result that pairs with the call, and the conversation goes on.
func TestInDoubtCallAfterCrash(t *testing.T) {
	cases := []struct {
		name     string
		decision agent.InDoubtDecision
		want     string
		isError  bool
		runs     int32 // calls of charge, the interrupted one included
	}{
		{"retry", agent.InDoubtDecision{Action: agentdv1.InDoubtAction_IN_DOUBT_ACTION_RETRY}, "charged", false, 2},
		{"skip", agent.InDoubtDecision{Action: agentdv1.InDoubtAction_IN_DOUBT_ACTION_SKIP}, agent.SkippedInDoubtText, true, 1},
		{"skip with a message", agent.InDoubtDecision{Action: agentdv1.InDoubtAction_IN_DOUBT_ACTION_SKIP, Message: "ask the user first"}, "ask the user first", true, 1},
		{"supply", agent.InDoubtDecision{Action: agentdv1.InDoubtAction_IN_DOUBT_ACTION_SUPPLY, Result: agent.ToolResult{Content: texts("the bank says: charged once")}},
			"the bank says: charged once", false, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ran atomic.Int32
			charge := &chargeTool{entered: make(chan string, 4)}
			h := newHarness(t, agent.Options{Tools: []agentloop.Tool{charge.tool(), noteTool(&ran)}})
			id, runID := crashDuringCharge(t, h, charge)
			ctx := context.Background()
			key := agent.IdempotencyKey(id, runID, "c1")

			path := h.transcript(id)
			if got, want := entryKinds(path), "user assistant tool_call_started tool_in_doubt tool_result"; got != want {
				t.Fatalf("transcript after the restart %q, want %q", got, want)
			}
			started, doubt := path[2], path[3].GetToolInDoubt()
			if st := started.GetToolCallStarted(); st.GetToolCallId() != "c1" || st.GetIdempotencyKey() != key || st.GetArguments().GetFields()["usd"].GetNumberValue() != 5 {
				t.Fatalf("start %v", started)
			}
			if doubt.GetToolCallId() != "c1" || doubt.GetToolName() != "charge" || doubt.GetRunId() != runID || doubt.GetIdempotencyKey() != key ||
				doubt.GetStartEntryId() != started.GetId() || doubt.GetArguments().GetFields()["usd"].GetNumberValue() != 5 {
				t.Fatalf("in doubt %v", doubt)
			}
			if tr := path[4].GetMessage().GetToolResult(); tr.GetToolCallId() != "c2" || tr.GetContent()[0].GetText().GetText() != "No result provided" {
				t.Fatalf("the call that never started: %v", tr)
			}
			evs, err := h.follow(id, runID, 0)
			if err != nil {
				t.Fatal(err)
			}
			got := decode(t, evs)
			if k := kinds(got); !strings.HasSuffix(k, "tool_in_doubt message_start message_end agent_end") {
				t.Fatalf("events of the interrupted run: %s", k)
			}

			// Nothing that would run or hide the call goes through.
			_, err = h.a.Start(ctx, agent.StartRequest{SessionID: id, Prompt: user("again")})
			wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_TOOL_CALLS_IN_DOUBT, "ResolveInDoubt")
			var refusal *agent.Error
			if !errors.As(err, &refusal) || refusal.Metadata["tool_call_ids"] != "c1" {
				t.Fatalf("refusal metadata %v", refusal)
			}
			_, err = h.a.Start(ctx, agent.StartRequest{SessionID: id})
			wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_TOOL_CALLS_IN_DOUBT, "c1")
			_, err = h.a.Start(ctx, agent.StartRequest{SessionID: id, Prompt: user("edit"), ParentEntryID: path[0].GetId()})
			wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_TOOL_CALLS_IN_DOUBT, "c1")
			_, err = h.a.AppendMessages(ctx, id, []*agentdv1.AgentMessage{user("note")})
			wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_TOOL_CALLS_IN_DOUBT, "c1")
			err = h.a.Compact(ctx, id, agent.CompactOptions{Summary: "s", KeepRecentTokens: 1}, func(*agentdv1.AgentEvent) error { return nil })
			wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_TOOL_CALLS_IN_DOUBT, "c1")
			if calls, err := h.a.InDoubt(ctx, id); err != nil || len(calls) != 1 || calls[0].GetToolCallId() != "c1" {
				t.Fatalf("InDoubt: %v, %v", calls, err)
			}
			_, _, err = h.a.ResolveInDoubt(ctx, id, "c2", agent.InDoubtDecision{Action: agentdv1.InDoubtAction_IN_DOUBT_ACTION_SKIP})
			wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_NOT_IN_DOUBT, "c2")
			if n := len(h.transcript(id)); n != len(path) {
				t.Fatalf("refused requests changed the transcript: %d entries, want %d", n, len(path))
			}
			// A fork carries the doubt, and is decided on its own.
			fork, err := h.a.ForkSession(ctx, id, "", persistence.CreateSessionParams{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = h.a.Start(ctx, agent.StartRequest{SessionID: fork.ID, Prompt: user("again")})
			wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_TOOL_CALLS_IN_DOUBT, "c1")
			if _, _, err := h.a.ResolveInDoubt(ctx, fork.ID, "c1", agent.InDoubtDecision{Action: agentdv1.InDoubtAction_IN_DOUBT_ACTION_SKIP}); err != nil {
				t.Fatalf("ResolveInDoubt in the fork: %v", err)
			}
			if calls, _ := h.a.InDoubt(ctx, id); len(calls) != 1 {
				t.Fatalf("deciding the fork's call decided the original's: %v", calls)
			}

			entry, remaining, err := h.a.ResolveInDoubt(ctx, id, "c1", tc.decision)
			if err != nil {
				t.Fatal(err)
			}
			if len(remaining) != 0 {
				t.Fatalf("still in doubt: %v", remaining)
			}
			tr := entry.GetMessage().GetToolResult()
			if tr.GetToolCallId() != "c1" || tr.GetToolName() != "charge" || tr.GetIsError() != tc.isError || resultText(tr) != tc.want {
				t.Fatalf("stored result %v, want %q (error %v)", tr, tc.want, tc.isError)
			}
			if n := charge.calls.Load(); n != tc.runs {
				t.Fatalf("charge ran %d times, want %d", n, tc.runs)
			}
			after := h.transcript(id)
			want := "user assistant tool_call_started tool_in_doubt tool_result tool_result"
			if tc.runs == 2 {
				// The retry's start is recorded first, with the same key.
				want = "user assistant tool_call_started tool_in_doubt tool_result tool_call_started tool_result"
				if st := after[5].GetToolCallStarted(); st.GetToolCallId() != "c1" || st.GetIdempotencyKey() != key {
					t.Fatalf("the retry's start %v, want key %s", after[5], key)
				}
			}
			if got := entryKinds(after); got != want {
				t.Fatalf("transcript after ResolveInDoubt %q, want %q", got, want)
			}
			_, _, err = h.a.ResolveInDoubt(ctx, id, "c1", tc.decision)
			wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_NOT_IN_DOUBT, "c1")

			// The model sees the decided result paired with its call, and
			// the conversation goes on.
			msgs := h.context(id).GetMessages()
			if r := msgs[2].GetToolResult(); r.GetToolCallId() != "c2" || msgs[3].GetToolResult().GetToolCallId() != "c1" || resultText(msgs[3].GetToolResult()) != tc.want {
				t.Fatalf("context after ResolveInDoubt: %v", msgs)
			}
			rest := h.startRun(agent.StartRequest{SessionID: id}, false).rest()
			if end := rest[len(rest)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
				t.Fatalf("Continue after ResolveInDoubt: %s %v", allKinds(rest), end)
			}
			if ran.Load() != 0 {
				t.Fatalf("write_note ran %d times; it never got its approval", ran.Load())
			}
		})
	}
}

// RETRY runs only what agentd can run: a client tool's call is for the
// client to run again and SUPPLY; a call whose arguments were redacted
// has nothing to run.
func TestRetryInDoubtRefusals(t *testing.T) {
	h := newHarness(t, agent.Options{})
	ctx := context.Background()
	id := h.session(&agentdv1.SessionConfig{Tools: []*agentdv1.Tool{colorTool(t)}, Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{
		toolCall(t, "call_c", "pick_color", map[string]any{"hint": "warm"}), text("ok"),
	}}})
	s := h.promptRun(id, "pick")
	evs := s.until(func(ev *agentdv1.AgentEvent) bool { return ev.GetToolCallRequested() != nil })
	req := evs[len(evs)-1].GetToolCallRequested()
	key := agent.IdempotencyKey(id, s.runID, "call_c")
	if req.GetIdempotencyKey() != key {
		t.Fatalf("tool_call_requested %v, want key %s", req, key)
	}
	old := h.a
	h.store = memory.Reopen(h.store)
	h.start()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = old.Close(ctx)
	}()

	_, _, err := h.a.ResolveInDoubt(ctx, id, "call_c", agent.InDoubtDecision{Action: agentdv1.InDoubtAction_IN_DOUBT_ACTION_RETRY})
	wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_FAILED_PRECONDITION, "IN_DOUBT_ACTION_SUPPLY")
	if !strings.Contains(err.Error(), key) {
		t.Fatalf("the refusal does not give the key: %v", err)
	}
	var doubt *agentdv1.Entry
	for _, e := range h.transcript(id) {
		if e.GetToolInDoubt() != nil {
			doubt = e
		}
	}
	if doubt == nil {
		t.Fatalf("no call in doubt: %s", entryKinds(h.transcript(id)))
	}
	if _, err := h.a.RedactEntries(ctx, id, agent.Redaction{EntryIDs: []string{doubt.GetId()}, Reason: "pii"}); err != nil {
		t.Fatal(err)
	}
	_, _, err = h.a.ResolveInDoubt(ctx, id, "call_c", agent.InDoubtDecision{Action: agentdv1.InDoubtAction_IN_DOUBT_ACTION_RETRY})
	wantReason(t, err, agentdv1.ErrorReason_ERROR_REASON_FAILED_PRECONDITION, "redacted")
	entry, _, err := h.a.ResolveInDoubt(ctx, id, "call_c", agent.InDoubtDecision{Action: agentdv1.InDoubtAction_IN_DOUBT_ACTION_SUPPLY,
		Result: agent.ToolResult{Content: texts("red")}})
	if err != nil || resultText(entry.GetMessage().GetToolResult()) != "red" {
		t.Fatalf("SUPPLY: %v, %v", entry, err)
	}
}

// entryKinds names the kind of each entry, as the store records it.
func entryKinds(entries []*agentdv1.Entry) string {
	names := make([]string, len(entries))
	for i, e := range entries {
		if m := e.GetMessage(); m != nil {
			names[i] = string(m.ProtoReflect().WhichOneof(m.ProtoReflect().Descriptor().Oneofs().ByName("kind")).Name())
			continue
		}
		names[i] = string(e.ProtoReflect().WhichOneof(e.ProtoReflect().Descriptor().Oneofs().ByName("payload")).Name())
	}
	return strings.Join(names, " ")
}

// Every MCP tools/call of a run carries the call's idempotency key in its
// _meta; the calls of a server not marked read-only have their start
// recorded first, those of a read-only one do not.
func TestMCPCallsCarryTheIdempotencyKey(t *testing.T) {
	hs := mcptest.NewHTTPServer(t)
	keys := make(chan any, 4)
	mcpsdk.AddTool(hs.Server, &mcpsdk.Tool{Name: "pay", Description: "Pays."}, func(_ context.Context, req *mcpsdk.CallToolRequest, _ struct{}) (*mcpsdk.CallToolResult, any, error) {
		keys <- req.Params.GetMeta()[mcp.IdempotencyKeyMeta]
		return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "paid"}}}, nil, nil
	})
	h, _ := mcpHarness(t, map[string]*mcp.ServerConfig{"bank": {URL: hs.URL}, "mirror": {URL: hs.URL, ReadOnly: true}})
	cfg := script(faux.Message(faux.ToolCall("p1", "mcp__bank__pay", nil)), faux.Message(faux.ToolCall("p2", "mcp__mirror__pay", nil)), text("done"))
	cfg.McpServers = []*agentdv1.McpServer{
		{Name: "bank", Tools: []string{"pay"}, Approval: agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW},
		{Name: "mirror", Tools: []string{"pay"}},
	}
	id := h.session(cfg)
	evs := runAnswering(t, h, id, "pay", nil, nil)
	runID := evs[0].GetRunId()
	for _, call := range []string{"p1", "p2"} {
		if r := toolResults(evs)[call]; r.GetIsError() || resultText(r) != "paid" {
			t.Fatalf("%s: %v", call, r)
		}
		if got, want := <-keys, agent.IdempotencyKey(id, runID, call); got != want {
			t.Errorf("%s: the server got _meta[%q] = %v, want %q", call, mcp.IdempotencyKeyMeta, got, want)
		}
	}
	var starts []string
	for _, e := range h.transcript(id) {
		if st := e.GetToolCallStarted(); st != nil {
			starts = append(starts, st.GetToolCallId()+" "+st.GetIdempotencyKey())
		}
	}
	if want := "p1 " + agent.IdempotencyKey(id, runID, "p1"); strings.Join(starts, ",") != want {
		t.Errorf("starts %v, want only %q", starts, want)
	}
}
