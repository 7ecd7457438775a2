package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/service/servicetest"
)

// policyClient connects a gRPC client to addr for what the tests drive
// themselves (the run's stream); agentctl answers it.
func policyClient(t *testing.T, addr string) agentdv1.AgentServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return agentdv1.NewAgentServiceClient(conn)
}

// pickTool is a client tool: the test answers its calls with agentctl
// tool-result, so nothing here needs a workspace or the sandbox.
func pickTool(approval agentdv1.ApprovalPolicy) *agentdv1.Tool {
	params, _ := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"color": map[string]any{"type": "string"}}, "required": []any{"color"}})
	return &agentdv1.Tool{Name: "pick", Description: "Pick a color.", Executor: agentdv1.ToolExecutor_TOOL_EXECUTOR_CLIENT, Parameters: params, Approval: approval}
}

func pickCalls(ids ...string) *agentdv1.AssistantMessage {
	m := &agentdv1.AssistantMessage{}
	for i, id := range ids {
		args, _ := structpb.NewStruct(map[string]any{"color": []string{"red", "blue", "green"}[i%3]})
		m.Content = append(m.Content, &agentdv1.ContentBlock{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: id, Name: "pick", Arguments: args}}})
	}
	return m
}

// drive runs a prompt and calls on for each event until agent_end; on
// answers with agentctl. It fails the test after a minute.
func drive(t *testing.T, c agentdv1.AgentServiceClient, session, text string, on func(*agentdv1.AgentEvent)) []*agentdv1.AgentEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.Prompt(ctx, &agentdv1.PromptRequest{SessionId: session, Content: texts(text)})
	if err != nil {
		t.Fatal(err)
	}
	var events []*agentdv1.AgentEvent
	for {
		ev, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return events
		}
		if err != nil {
			t.Fatalf("the run's stream after %d events: %v", len(events), err)
		}
		events = append(events, ev)
		on(ev)
	}
}

// resultsOf maps each call id to the result its run ended with.
func resultsOf(events []*agentdv1.AgentEvent) map[string]*agentdv1.ToolResultMessage {
	out := map[string]*agentdv1.ToolResultMessage{}
	for _, ev := range events {
		if r := ev.GetToolExecutionEnd().GetResult(); r != nil {
			out[r.GetToolCallId()] = r
		}
	}
	return out
}

func TestHookCommand(t *testing.T) {
	addr := servicetest.Start(t, agent.Options{})
	c := policyClient(t, addr)
	resp, err := c.CreateSession(context.Background(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{
		Tools: []*agentdv1.Tool{pickTool(agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW)},
		Hooks: []*agentdv1.Hook{{Event: agentdv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE, Name: "colors", Timeout: durationpb.New(30 * time.Second)}},
		Faux:  &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{pickCalls("call_1"), pickCalls("call_2", "call_3"), {Content: texts("done")}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetSession().GetId()
	var requested []*agentdv1.ToolCallRequested
	events := drive(t, c, id, "pick colors", func(ev *agentdv1.AgentEvent) {
		if h := ev.GetHookRequested(); h != nil {
			var args []string
			switch h.GetToolCall().GetId() {
			case "call_1": // modify: the call runs with the hook's arguments
				args = []string{"hook", id, h.GetRequestId(), "modify", "--arguments", `{"color": "teal"}`, "--reason", "house color"}
			case "call_2": // deny: the model sees the reason
				args = []string{"hook", id, h.GetRequestId(), "deny", "--reason", "no blue here", "--tell-model"}
			default:
				args = []string{"hook", id, h.GetRequestId(), "allow"}
			}
			if code, out, stderr := ctl(t, addr, args...); code != 0 || strings.TrimSpace(out) != "ok" {
				t.Errorf("%v: %d %q %q", args, code, out, stderr)
			}
		}
		if r := ev.GetToolCallRequested(); r != nil {
			requested = append(requested, r)
			if code, _, stderr := ctl(t, addr, "tool-result", id, r.GetToolCallId(), "picked "+r.GetArguments().GetFields()["color"].GetStringValue()); code != 0 {
				t.Errorf("tool-result: %s", stderr)
			}
		}
	})
	if len(requested) != 2 || requested[0].GetToolCallId() != "call_1" || requested[0].GetArguments().GetFields()["color"].GetStringValue() != "teal" ||
		requested[1].GetToolCallId() != "call_3" {
		t.Fatalf("the client was asked to run %v; want call_1 with teal, then call_3 (call_2 denied)", requested)
	}
	results := resultsOf(events)
	if r := results["call_2"]; !r.GetIsError() || !strings.Contains(blocksText(r.GetContent()), "no blue here") {
		t.Fatalf("the denied call's result: %v", r)
	}
	if r := results["call_1"]; r.GetIsError() || blocksText(r.GetContent()) != "picked teal" {
		t.Fatalf("the modified call's result: %v", r)
	}

	// The transcript's HookNotices say what each hook did.
	_, out, _ := ctl(t, addr, "--json", "transcript", id)
	var actions []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		e := &agentdv1.Entry{}
		if err := protojson.Unmarshal([]byte(line), e); err != nil {
			t.Fatal(err)
		}
		if n := e.GetMessage().GetHookNotice(); n != nil {
			actions = append(actions, n.GetToolCallId()+" "+n.GetAction().String()+" "+n.GetDecidedBy())
		}
	}
	want := []string{"call_1 HOOK_ACTION_ARGUMENTS_REPLACED agentctl", "call_2 HOOK_ACTION_DENIED agentctl"}
	if strings.Join(actions, "\n") != strings.Join(want, "\n") {
		t.Fatalf("hook notices %q, want %q", actions, want)
	}

	// Bad answers are refused before they reach agentd, or by agentd with
	// the field named.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"hook", id, "r", "maybe"}, `verdict "maybe": use allow, deny, modify or redact`},
		{[]string{"hook", id, "r", "modify", "--arguments", "[1]"}, "--arguments"},
		{[]string{"hook", id, "r", "modify", "--details", "{}", "--no-details"}, "pass one"},
		{[]string{"hook", id, "no-such-request", "allow"}, "agentctl: "},
	} {
		if code, _, stderr := ctl(t, addr, tc.args...); code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: %d %q, want %q", tc.args, code, stderr, tc.want)
		}
	}
}

func TestApprovalScopesAndRulesCommands(t *testing.T) {
	addr := servicetest.Start(t, agent.Options{})
	c := policyClient(t, addr)
	resp, err := c.CreateSession(context.Background(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{
		Tools: []*agentdv1.Tool{pickTool(agentdv1.ApprovalPolicy_APPROVAL_POLICY_ASK)},
		Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{
			pickCalls("call_1", "call_2"), {Content: texts("first")},
			pickCalls("call_3"), {Content: texts("second")},
			pickCalls("call_4"), {Content: texts("third")},
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetSession().GetId()
	answerTools := func(ev *agentdv1.AgentEvent) {
		if r := ev.GetToolCallRequested(); r != nil {
			if code, _, stderr := ctl(t, addr, "tool-result", id, r.GetToolCallId(), "ok"); code != 0 {
				t.Errorf("tool-result: %s", stderr)
			}
		}
	}

	// Two parallel calls ask; one agentctl approve decides both for the session.
	var waiting []string
	var approveOut string
	drive(t, c, id, "first", func(ev *agentdv1.AgentEvent) {
		answerTools(ev)
		if r := ev.GetApprovalRequested(); r != nil {
			if line := waitLine(ev); !strings.Contains(line, "agentctl approve|deny "+id+" "+r.GetToolCallId()) {
				t.Errorf("the line naming the command: %q", line)
			}
			if waiting = append(waiting, r.GetToolCallId()); len(waiting) == 2 {
				code, out, stderr := ctl(t, addr, append([]string{"approve", id}, append(waiting, "--scope", "session", "--reason", "colors are fine")...)...)
				if code != 0 {
					t.Errorf("approve: %d %q", code, stderr)
				}
				approveOut = out
			}
		}
	})
	if len(waiting) != 2 || !strings.HasPrefix(approveOut, "ok; rule stored: ") || !strings.Contains(approveOut, "allowed  pick  any call  by agentctl  (colors are fine)") {
		t.Fatalf("approve of %v printed %q", waiting, approveOut)
	}
	code, out, _ := ctl(t, addr, "--json", "rules", id)
	rule := &agentdv1.ApprovalRule{}
	if code != 0 || protojson.Unmarshal([]byte(strings.TrimSpace(out)), rule) != nil || rule.GetToolName() != "pick" || rule.GetId() == "" {
		t.Fatalf("rules --json: %d %q", code, out)
	}
	if _, out, _ := ctl(t, addr, "rules", id); !strings.HasPrefix(out, rule.GetId()+"  allowed  pick") {
		t.Fatalf("rules: %q", out)
	}

	// The rule decides the next run's call: no approval_requested.
	events := drive(t, c, id, "second", answerTools)
	for _, ev := range events {
		if ev.GetApprovalRequested() != nil {
			t.Fatalf("the rule should have decided call_3: %v", ev)
		}
	}
	if r := resultsOf(events)["call_3"]; r.GetIsError() {
		t.Fatalf("call_3: %v", r)
	}

	// Removed, it decides nothing: call_4 asks and is denied.
	if code, out, stderr := ctl(t, addr, "rules", "delete", id, rule.GetId()); code != 0 || strings.TrimSpace(out) != "removed "+rule.GetId() {
		t.Fatalf("rules delete: %d %q %q", code, out, stderr)
	}
	if _, out, _ := ctl(t, addr, "rules", id); strings.TrimSpace(out) != "no approval rules" {
		t.Fatalf("rules after delete: %q", out)
	}
	if code, _, stderr := ctl(t, addr, "rules", "delete", id, rule.GetId()); code != 1 || !strings.Contains(stderr, "[RULE_NOT_FOUND]") {
		t.Fatalf("deleting it again: %d %q", code, stderr)
	}
	events = drive(t, c, id, "third", func(ev *agentdv1.AgentEvent) {
		if r := ev.GetApprovalRequested(); r != nil {
			if code, _, stderr := ctl(t, addr, "deny", id, r.GetToolCallId(), "--reason", "not again"); code != 0 {
				t.Errorf("deny: %s", stderr)
			}
		}
	})
	if r := resultsOf(events)["call_4"]; !r.GetIsError() || !strings.Contains(blocksText(r.GetContent()), "not again") {
		t.Fatalf("call_4 after the rule was removed: %v", r)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"approve", id, "call_9", "--scope", "forever"}, `--scope "forever": use call, run or session`},
		{[]string{"approve", id, "call_9", "--arguments", "nope"}, "--arguments"},
		{[]string{"approve", id, "call_9", "--command-prefix", "git"}, "no call call_9 in the transcript"},
		{[]string{"approve", id, "call_9"}, "agentctl: "}, // not waiting
	} {
		if code, _, stderr := ctl(t, addr, tc.args...); code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: %d %q, want %q", tc.args, code, stderr, tc.want)
		}
	}
}

func TestInDoubtCommand(t *testing.T) {
	addr := servicetest.Start(t, agent.Options{})
	_, out, _ := ctl(t, addr, "sessions", "create", "--faux-echo")
	id := strings.TrimSpace(out)
	// A call that is not in doubt is refused with its reason; a bad action
	// never reaches agentd.
	if code, _, stderr := ctl(t, addr, "in-doubt", id, "call_1", "skip", "--message", "not retried"); code != 1 || !strings.Contains(stderr, "[NOT_IN_DOUBT]") {
		t.Fatalf("in-doubt of a call not in doubt: %d %q", code, stderr)
	}
	if code, _, stderr := ctl(t, addr, "in-doubt", id, "call_1", "forget"); code != 1 || !strings.Contains(stderr, `action "forget": use retry, skip or supply`) {
		t.Fatalf("a bad action: %d %q", code, stderr)
	}
	if code, _, stderr := ctl(t, addr, "in-doubt", id, "call_1", "supply", "--details", "{nope"); code != 1 || !strings.Contains(stderr, "--details") {
		t.Fatalf("bad details: %d %q", code, stderr)
	}
}

func TestWaitLines(t *testing.T) {
	args, _ := structpb.NewStruct(map[string]any{"command": "ls"})
	for _, tc := range []struct {
		ev   *agentdv1.AgentEvent
		want string
	}{
		{&agentdv1.AgentEvent{SessionId: "s1", Event: &agentdv1.AgentEvent_HookRequested{HookRequested: &agentdv1.HookRequested{
			RequestId: "h1", Event: agentdv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE, Hook: "shell", ToolCall: &agentdv1.ToolCall{Id: "c1", Name: "bash", Arguments: args}}}},
			`? hook shell (pre_tool_use) bash {"command":"ls"} → agentctl hook s1 h1 allow|deny|modify`},
		{&agentdv1.AgentEvent{SessionId: "s1", Event: &agentdv1.AgentEvent_HookRequested{HookRequested: &agentdv1.HookRequested{
			RequestId: "h2", Event: agentdv1.HookEvent_HOOK_EVENT_STOP, Hook: "hooks[1]",
			Message: &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_Assistant{Assistant: &agentdv1.AssistantMessage{Content: texts("done")}}}}}},
			`? hook hooks[1] (stop) assistant: done → agentctl hook s1 h2 allow|modify`},
		{&agentdv1.AgentEvent{SessionId: "s1", Event: &agentdv1.AgentEvent_HookRequested{HookRequested: &agentdv1.HookRequested{
			RequestId: "h3", Event: agentdv1.HookEvent_HOOK_EVENT_POST_TOOL_USE, Hook: "r", ToolCall: &agentdv1.ToolCall{Id: "c1", Name: "bash", Arguments: args}}}},
			`? hook r (post_tool_use) bash {"command":"ls"} → agentctl hook s1 h3 allow|modify|redact`},
		{&agentdv1.AgentEvent{SessionId: "s1", Event: &agentdv1.AgentEvent_ApprovalRequested{ApprovalRequested: &agentdv1.ApprovalRequested{
			ToolCallId: "c1", ToolName: "bash", Arguments: args}}},
			`? approval: bash {"command":"ls"} → agentctl approve|deny s1 c1 [--scope run|session]`},
		{&agentdv1.AgentEvent{SessionId: "s1", Event: &agentdv1.AgentEvent_ToolInDoubt{ToolInDoubt: &agentdv1.ToolInDoubt{
			ToolCallId: "c1", ToolName: "bash", Arguments: args}}},
			`! in doubt: bash {"command":"ls"} → agentctl in-doubt s1 c1 retry|skip|supply`},
		{&agentdv1.AgentEvent{SessionId: "s1", Event: &agentdv1.AgentEvent_TurnStart{}}, ""},
	} {
		if got := waitLine(tc.ev); got != tc.want {
			t.Errorf("waitLine:\n got %q\nwant %q", got, tc.want)
		}
	}
}
