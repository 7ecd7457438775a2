package service_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
	"github.com/agentd/agentd/persistence/postgres/pgtest"
	"github.com/agentd/agentd/service"
)

// hookFiles are what the hook tests' read_file tool reads.
var hookFiles = map[string]string{"a.txt": "alpha", "b.txt": "beta"}

// hookTools are the server tools of the hook tests: read_file over
// hookFiles, and "lookup", whose result carries details.
func hookTools() []agentloop.Tool {
	params, _ := structpb.NewStruct(map[string]any{"type": "object"})
	lookup := testkit.ReadOnlyTool{FuncTool: agentloop.FuncTool{
		Def: &agentdv1.Tool{Name: "lookup", Description: "Look something up.", Parameters: params},
		Fn: func(context.Context, agentloop.Call) (agentloop.Result, error) {
			return agentloop.Result{Content: texts("the secret"), Details: structpb.NewStringValue("secret details")}, nil
		},
	}}
	return []agentloop.Tool{testkit.ReadFileTool(hookFiles), lookup}
}

// answerFunc answers the n-th hook_requested of a run (from 0); nil lets
// the hook time out.
type answerFunc func(n int, req *agentdv1.HookRequested) *agentdv1.SubmitHookResultRequest

// hookReply is an answer to every request.
func hookReply(v agentdv1.HookVerdict, mod func(*agentdv1.SubmitHookResultRequest)) answerFunc {
	return func(int, *agentdv1.HookRequested) *agentdv1.SubmitHookResultRequest {
		a := &agentdv1.SubmitHookResultRequest{Verdict: v, DecidedBy: "policy-app"}
		if mod != nil {
			mod(a)
		}
		return a
	}
}

// follow reads a hook run's stream to its end, answering each
// hook_requested through via (any replica's client), and returns the
// events and the stream's final error.
func followHooks(t *testing.T, h *harness, via agentdv1.AgentServiceClient, sessionID string,
	stream interface {
		Recv() (*agentdv1.AgentEvent, error)
	}, answer answerFunc) ([]*agentdv1.AgentEvent, error) {
	t.Helper()
	var evs []*agentdv1.AgentEvent
	n := 0
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
		if req := ev.GetHookRequested(); req != nil {
			if a := answer(n, req); a != nil {
				a.SessionId, a.RequestId = sessionID, req.GetRequestId()
				if _, err := via.SubmitHookResult(h.ctx(), a); err != nil {
					t.Fatalf("SubmitHookResult of %s: %v", req.GetRequestId(), err)
				}
			}
			n++
		}
	}
}

// promptHooks runs a prompt with hooks answered by answer.
func promptHooks(t *testing.T, h *harness, sessionID, text string, answer answerFunc) ([]*agentdv1.AgentEvent, error) {
	t.Helper()
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: sessionID, Content: texts(text)})
	if err != nil {
		t.Fatal(err)
	}
	return followHooks(t, h, h.client, sessionID, stream, answer)
}

// hookNotices returns the HookNotice entries of a transcript.
func hookNotices(entries []*agentdv1.Entry) []*agentdv1.HookNotice {
	var out []*agentdv1.HookNotice
	for _, e := range entries {
		if n := e.GetMessage().GetHookNotice(); n != nil {
			out = append(out, n)
		}
	}
	return out
}

// toolResult returns the first tool result of a transcript.
func toolResult(t *testing.T, entries []*agentdv1.Entry) *agentdv1.ToolResultMessage {
	t.Helper()
	for _, e := range entries {
		if r := e.GetMessage().GetToolResult(); r != nil {
			return r
		}
	}
	t.Fatalf("no tool result in %s", testkit.MessageKinds(entries))
	return nil
}

func blocksText(blocks []*agentdv1.ContentBlock) string {
	var b strings.Builder
	for _, c := range blocks {
		b.WriteString(c.GetText().GetText())
	}
	return b.String()
}

// contextText is everything the next model call would see, as text.
func contextText(c *agentdv1.Context) string {
	var b strings.Builder
	for _, m := range c.GetMessages() {
		b.WriteString(blocksText(m.GetUser().GetContent()))
		b.WriteString(blocksText(m.GetAssistant().GetContent()))
		b.WriteString(blocksText(m.GetToolResult().GetContent()))
		b.WriteString("\n")
	}
	return b.String()
}

func countEvents(evs []*agentdv1.AgentEvent, kind string) int {
	n := 0
	for _, ev := range evs {
		if eventKind(ev) == kind {
			n++
		}
	}
	return n
}

func hook(ev agentdv1.HookEvent, name string) *agentdv1.Hook {
	return &agentdv1.Hook{Event: ev, Name: name, Timeout: durationpb.New(time.Minute)}
}

// TestHookEvents: each event's hook allows, denies (where it may) and
// modifies over real gRPC, and each decision other than ALLOW is a
// HookNotice in the transcript.
func TestHookEvents(t *testing.T) {
	const (
		pre    = agentdv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE
		post   = agentdv1.HookEvent_HOOK_EVENT_POST_TOOL_USE
		prompt = agentdv1.HookEvent_HOOK_EVENT_USER_PROMPT
		stop   = agentdv1.HookEvent_HOOK_EVENT_STOP
		allow  = agentdv1.HookVerdict_HOOK_VERDICT_ALLOW
		deny   = agentdv1.HookVerdict_HOOK_VERDICT_DENY
		modify = agentdv1.HookVerdict_HOOK_VERDICT_MODIFY
		redact = agentdv1.HookVerdict_HOOK_VERDICT_REDACT
	)
	h := newHarness(t, agent.Options{Tools: hookTools()}, service.ServerOptions{})
	readA := func(t *testing.T) *agentdv1.AssistantMessage {
		return toolCallAnswer(t, "c1", "read_file", map[string]any{"path": "a.txt"})
	}
	lookup := func(t *testing.T) *agentdv1.AssistantMessage { return toolCallAnswer(t, "c1", "lookup", nil) }
	current := "" // the session of the running case
	tests := []struct {
		name    string
		event   agentdv1.HookEvent
		first   func(t *testing.T) *agentdv1.AssistantMessage // the model's first answer; nil: a text answer
		echo    bool
		answer  answerFunc
		asked   int
		notices string // the actions of the notices stored
		check   func(t *testing.T, entries []*agentdv1.Entry, evs []*agentdv1.AgentEvent)
	}{
		{name: "pre_tool_use allow", event: pre, first: readA, answer: hookReply(allow, nil), asked: 1,
			check: func(t *testing.T, entries []*agentdv1.Entry, evs []*agentdv1.AgentEvent) {
				if r := toolResult(t, entries); blocksText(r.GetContent()) != "alpha" || r.GetIsError() {
					t.Fatalf("result %v", r)
				}
				req := firstHookRequest(evs)
				if req.GetToolCall().GetArguments().GetFields()["path"].GetStringValue() != "a.txt" || req.GetDeadline() == nil || req.GetHook() != "h" {
					t.Fatalf("hook_requested %v", req)
				}
			}},
		{name: "pre_tool_use deny", event: pre, first: readA, asked: 1, notices: "DENIED",
			answer: hookReply(deny, func(a *agentdv1.SubmitHookResultRequest) { a.Reason = "not that file" }),
			check: func(t *testing.T, entries []*agentdv1.Entry, _ []*agentdv1.AgentEvent) {
				if r := toolResult(t, entries); !r.GetIsError() || !strings.Contains(blocksText(r.GetContent()), "not that file") {
					t.Fatalf("result %v", r)
				}
			}},
		{name: "pre_tool_use modify", event: pre, first: readA, asked: 1, notices: "ARGUMENTS_REPLACED",
			answer: hookReply(modify, func(a *agentdv1.SubmitHookResultRequest) {
				a.Arguments = mustStruct(t, map[string]any{"path": "b.txt"})
			}),
			check: func(t *testing.T, entries []*agentdv1.Entry, _ []*agentdv1.AgentEvent) {
				if r := toolResult(t, entries); blocksText(r.GetContent()) != "beta" || r.GetIsError() {
					t.Fatalf("result %v", r)
				}
			}},
		{name: "post_tool_use allow", event: post, first: lookup, answer: hookReply(allow, nil), asked: 1,
			check: func(t *testing.T, entries []*agentdv1.Entry, evs []*agentdv1.AgentEvent) {
				if r := toolResult(t, entries); blocksText(r.GetContent()) != "the secret" || r.GetDetails().GetStringValue() != "secret details" {
					t.Fatalf("result %v", r)
				}
				if req := firstHookRequest(evs); blocksText(req.GetToolResult().GetContent()) != "the secret" {
					t.Fatalf("hook_requested %v", req)
				}
			}},
		{name: "post_tool_use modify", event: post, first: lookup, asked: 1, notices: "RESULT_REPLACED",
			answer: hookReply(modify, func(a *agentdv1.SubmitHookResultRequest) {
				a.Content, a.ReplaceDetails, a.Details = texts("a public fact"), true, structpb.NewStringValue("public details")
			}),
			check: func(t *testing.T, entries []*agentdv1.Entry, _ []*agentdv1.AgentEvent) {
				if r := toolResult(t, entries); blocksText(r.GetContent()) != "a public fact" || r.GetDetails().GetStringValue() != "public details" {
					t.Fatalf("result %v", r)
				}
			}},
		{name: "post_tool_use redact", event: post, first: lookup, answer: hookReply(redact, nil), asked: 1, notices: "RESULT_REDACTED",
			check: func(t *testing.T, entries []*agentdv1.Entry, _ []*agentdv1.AgentEvent) {
				if r := toolResult(t, entries); blocksText(r.GetContent()) != agent.RedactedByHookText || r.GetDetails() != nil {
					t.Fatalf("result %v", r)
				}
			}},
		{name: "user_prompt allow", event: prompt, answer: hookReply(allow, nil), asked: 1,
			check: func(t *testing.T, entries []*agentdv1.Entry, evs []*agentdv1.AgentEvent) {
				if req := firstHookRequest(evs); req.GetSource() != "prompt" || blocksText(req.GetMessage().GetUser().GetContent()) != "hello" {
					t.Fatalf("hook_requested %v", req)
				}
			}},
		{name: "user_prompt modify", event: prompt, echo: true, asked: 1, notices: "CONTEXT_ADDED",
			answer: hookReply(modify, func(a *agentdv1.SubmitHookResultRequest) { a.Content = texts("house rule: be brief") }),
			check: func(t *testing.T, entries []*agentdv1.Entry, _ []*agentdv1.AgentEvent) {
				// The model saw the added content on this run's call (the
				// faux model echoes the last user message it was sent).
				if got := testkit.MessageKinds(entries); got != "user hook_notice assistant" {
					t.Fatalf("transcript %s", got)
				}
				if a := entries[2].GetMessage().GetAssistant(); blocksText(a.GetContent()) != "house rule: be brief" {
					t.Fatalf("the model answered %q", blocksText(a.GetContent()))
				}
				if n := hookNotices(entries)[0]; blocksText(n.GetContent()) != "house rule: be brief" {
					t.Fatalf("notice %v", n)
				}
				// This run's calls only: the next run's context has no trace
				// of it (the notice is hidden from the model).
				if msgs := h.context(current).GetMessages(); len(msgs) != 2 || blocksText(msgs[0].GetUser().GetContent()) != "hello" || msgs[1].GetAssistant() == nil {
					t.Fatalf("the added content outlived its run: %v", msgs)
				}
			}},
		{name: "stop allow", event: stop, answer: hookReply(allow, nil), asked: 1,
			check: func(t *testing.T, entries []*agentdv1.Entry, evs []*agentdv1.AgentEvent) {
				if got := testkit.MessageKinds(entries); got != "user assistant" {
					t.Fatalf("transcript %s", got)
				}
				if req := firstHookRequest(evs); blocksText(req.GetMessage().GetAssistant().GetContent()) != "done" {
					t.Fatalf("hook_requested %v", req)
				}
			}},
		{name: "stop modify continues once", event: stop, asked: 1, notices: "CONTINUED",
			answer: hookReply(modify, func(a *agentdv1.SubmitHookResultRequest) { a.Content = texts("check your work") }),
			check: func(t *testing.T, entries []*agentdv1.Entry, _ []*agentdv1.AgentEvent) {
				// max_continuations 0 means 1: the second stop is not asked.
				if got := testkit.MessageKinds(entries); got != "user assistant hook_notice user assistant" {
					t.Fatalf("transcript %s", got)
				}
				if got := blocksText(entries[3].GetMessage().GetUser().GetContent()); got != "check your work" {
					t.Fatalf("continued with %q", got)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var answers []*agentdv1.AssistantMessage
			if tt.first != nil {
				answers = append(answers, tt.first(t))
			}
			answers = append(answers, textAnswer("done"), textAnswer("done again"))
			if tt.echo {
				answers = nil
			}
			id := h.createSession(&agentdv1.SessionConfig{
				Tools: []*agentdv1.Tool{{Name: "read_file"}, {Name: "lookup"}},
				Hooks: []*agentdv1.Hook{hook(tt.event, "h")},
				Faux:  &agentdv1.FauxScript{Responses: answers, Echo: tt.echo},
			})
			current = id
			evs, err := promptHooks(t, h, id, "hello", tt.answer)
			if err != nil {
				t.Fatalf("Prompt: %v after %s", err, kinds(evs))
			}
			if n := countEvents(evs, "hook_requested"); n != tt.asked {
				t.Fatalf("%d hook_requested events, want %d: %s", n, tt.asked, kinds(evs))
			}
			entries := h.transcript(id)
			var actions []string
			for _, n := range hookNotices(entries) {
				actions = append(actions, strings.TrimPrefix(n.GetAction().String(), "HOOK_ACTION_"))
				if n.GetDecidedBy() != "policy-app" || !n.GetVisibleInUi() || n.GetHook() != "h" || n.GetEvent() != tt.event {
					t.Fatalf("notice %v", n)
				}
			}
			if got := strings.Join(actions, " "); got != tt.notices {
				t.Fatalf("notices %q, want %q", got, tt.notices)
			}
			tt.check(t, entries, evs)
		})
	}
}

func firstHookRequest(evs []*agentdv1.AgentEvent) *agentdv1.HookRequested {
	for _, ev := range evs {
		if r := ev.GetHookRequested(); r != nil {
			return r
		}
	}
	return nil
}

// TestPromptRefusedByHook: a USER_PROMPT hook's DENY (or its timeout with
// on_timeout DENY) ends the Prompt call with FAILED_PRECONDITION and
// PROMPT_REFUSED naming the hook and request, after the stream showed
// hook_requested; nothing is stored, not even a notice.
func TestPromptRefusedByHook(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	tests := []struct {
		name    string
		hook    *agentdv1.Hook
		answer  answerFunc
		mention string
	}{
		{"deny", hook(agentdv1.HookEvent_HOOK_EVENT_USER_PROMPT, "gate"),
			hookReply(agentdv1.HookVerdict_HOOK_VERDICT_DENY, func(a *agentdv1.SubmitHookResultRequest) { a.Reason = "no secrets please" }), "no secrets please"},
		{"timeout with on_timeout DENY", &agentdv1.Hook{Event: agentdv1.HookEvent_HOOK_EVENT_USER_PROMPT, Name: "gate",
			Timeout: durationpb.New(200 * time.Millisecond), OnTimeout: agentdv1.HookTimeoutAction_HOOK_TIMEOUT_ACTION_DENY},
			func(int, *agentdv1.HookRequested) *agentdv1.SubmitHookResultRequest { return nil }, "did not answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
			h.prompt(id, "first")
			before := testkit.MessageKinds(h.transcript(id))
			if _, err := h.client.UpdateSession(h.ctx(), &agentdv1.UpdateSessionRequest{SessionId: id,
				Config: &agentdv1.SessionConfig{Hooks: []*agentdv1.Hook{tt.hook}}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"config.hooks"}}}); err != nil {
				t.Fatal(err)
			}
			evs, err := promptHooks(t, h, id, "my secret", tt.answer)
			wantCode(t, err, codes.FailedPrecondition, tt.mention)
			info := errorInfo(err)
			req := firstHookRequest(evs)
			if info.GetReason() != "PROMPT_REFUSED" || info.GetMetadata()["hook"] != "gate" || req == nil || info.GetMetadata()["request_id"] != req.GetRequestId() {
				t.Fatalf("ErrorInfo %v after %s", info, kinds(evs))
			}
			if got := testkit.MessageKinds(h.transcript(id)); got != before {
				t.Fatalf("transcript %s after the refusal, was %s", got, before)
			}
			if end := evs[len(evs)-1].GetAgentEnd(); end.GetOutcome() != agentdv1.RunOutcome_RUN_OUTCOME_ERROR {
				t.Fatalf("last event %v", evs[len(evs)-1])
			}
		})
	}
}

// TestHookTimeouts: a hook nobody answers follows its on_timeout rule, an
// error event with stage "hook" says so, and a TIMED_OUT notice records it.
func TestHookTimeouts(t *testing.T) {
	h := newHarness(t, agent.Options{Tools: hookTools()}, service.ServerOptions{})
	silent := func(int, *agentdv1.HookRequested) *agentdv1.SubmitHookResultRequest { return nil }
	tests := []struct {
		name   string
		event  agentdv1.HookEvent
		rule   agentdv1.HookTimeoutAction
		call   string
		result string
		isErr  bool
	}{
		{"pre_tool_use proceeds", agentdv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE, agentdv1.HookTimeoutAction_HOOK_TIMEOUT_ACTION_PROCEED, "read_file", "alpha", false},
		{"pre_tool_use denies", agentdv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE, agentdv1.HookTimeoutAction_HOOK_TIMEOUT_ACTION_DENY, "read_file", "did not answer", true},
		{"unset proceeds", agentdv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE, agentdv1.HookTimeoutAction_HOOK_TIMEOUT_ACTION_UNSPECIFIED, "read_file", "alpha", false},
		{"post_tool_use proceeds", agentdv1.HookEvent_HOOK_EVENT_POST_TOOL_USE, agentdv1.HookTimeoutAction_HOOK_TIMEOUT_ACTION_PROCEED, "lookup", "the secret", false},
		{"post_tool_use denies: redacted", agentdv1.HookEvent_HOOK_EVENT_POST_TOOL_USE, agentdv1.HookTimeoutAction_HOOK_TIMEOUT_ACTION_DENY, "lookup", agent.RedactedByHookText, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := map[string]any{}
			if tt.call == "read_file" {
				args["path"] = "a.txt"
			}
			id := h.createSession(&agentdv1.SessionConfig{
				Tools: []*agentdv1.Tool{{Name: "read_file"}, {Name: "lookup"}},
				Hooks: []*agentdv1.Hook{{Event: tt.event, Timeout: durationpb.New(200 * time.Millisecond), OnTimeout: tt.rule}},
				Faux:  &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{toolCallAnswer(t, "c1", tt.call, args), textAnswer("done")}},
			})
			evs, err := promptHooks(t, h, id, "go", silent)
			if err != nil {
				t.Fatal(err)
			}
			if !hasError(evs, "hook", "did not answer") {
				t.Fatalf("no error event of stage hook: %s", kinds(evs))
			}
			entries := h.transcript(id)
			if r := toolResult(t, entries); !strings.Contains(blocksText(r.GetContent()), tt.result) || r.GetIsError() != tt.isErr {
				t.Fatalf("result %v, want %q (error %v)", r, tt.result, tt.isErr)
			}
			notices := hookNotices(entries)
			if len(notices) != 1 || notices[0].GetAction() != agentdv1.HookAction_HOOK_ACTION_TIMED_OUT || notices[0].GetDecidedBy() != "timeout" ||
				notices[0].GetHook() != "hooks[0]" || notices[0].GetToolCallId() != "c1" {
				t.Fatalf("notices %v", notices)
			}
		})
	}
}

// TestHookAnswerRefusals: an answer the waiting hook cannot take is
// refused with the field named and the hook keeps waiting, so a valid
// answer afterwards decides it.
func TestHookAnswerRefusals(t *testing.T) {
	h := newHarness(t, agent.Options{Tools: hookTools()}, service.ServerOptions{})
	id := h.createSession(&agentdv1.SessionConfig{
		Tools: []*agentdv1.Tool{{Name: "read_file"}},
		Hooks: []*agentdv1.Hook{hook(agentdv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE, "")},
		Faux:  &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{toolCallAnswer(t, "c1", "read_file", map[string]any{"path": "a.txt"}), textAnswer("done")}},
	})
	modify := agentdv1.HookVerdict_HOOK_VERDICT_MODIFY
	refused := []struct {
		name  string
		ans   *agentdv1.SubmitHookResultRequest
		code  codes.Code
		field string
	}{
		{"no verdict", &agentdv1.SubmitHookResultRequest{}, codes.InvalidArgument, "verdict"},
		{"a verdict the event does not take", &agentdv1.SubmitHookResultRequest{Verdict: agentdv1.HookVerdict_HOOK_VERDICT_REDACT}, codes.InvalidArgument, "verdict"},
		{"modify without arguments", &agentdv1.SubmitHookResultRequest{Verdict: modify}, codes.InvalidArgument, "arguments"},
		{"arguments that fail the schema", &agentdv1.SubmitHookResultRequest{Verdict: modify, Arguments: mustStruct(t, map[string]any{"file": "b.txt"})}, codes.InvalidArgument, "arguments.path"},
		{"a reason too long", &agentdv1.SubmitHookResultRequest{Verdict: modify, Reason: strings.Repeat("x", 4097)}, codes.InvalidArgument, "reason"},
		{"decided_by too long", &agentdv1.SubmitHookResultRequest{Verdict: modify, DecidedBy: strings.Repeat("x", 129)}, codes.InvalidArgument, "decided_by"},
		{"instructions too long", &agentdv1.SubmitHookResultRequest{Verdict: modify, Instructions: strings.Repeat("x", 64<<10+1)}, codes.InvalidArgument, "instructions"},
		{"a tool call in content", &agentdv1.SubmitHookResultRequest{Verdict: modify, Content: []*agentdv1.ContentBlock{{Block: &agentdv1.ContentBlock_ToolCall{ToolCall: &agentdv1.ToolCall{Id: "x", Name: "y"}}}}}, codes.InvalidArgument, "content[0].tool_call"},
		{"an unknown request", &agentdv1.SubmitHookResultRequest{Verdict: modify, RequestId: "nope"}, codes.NotFound, "nope"},
	}
	evs, err := promptHooks(t, h, id, "go", func(_ int, req *agentdv1.HookRequested) *agentdv1.SubmitHookResultRequest {
		for _, r := range refused {
			a := r.ans
			a.SessionId = id
			if a.RequestId == "" {
				a.RequestId = req.GetRequestId()
			}
			_, err := h.client.SubmitHookResult(h.ctx(), a)
			if r.code == codes.InvalidArgument {
				wantField(t, err, r.field)
			} else {
				wantCode(t, err, r.code, r.field)
			}
		}
		return &agentdv1.SubmitHookResultRequest{Verdict: modify, Arguments: mustStruct(t, map[string]any{"path": "b.txt"})}
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := toolResult(t, h.transcript(id)); blocksText(r.GetContent()) != "beta" {
		t.Fatalf("result %v after %s", r, kinds(evs))
	}
	// Once decided, the request takes no more answers.
	_, err = h.client.SubmitHookResult(h.ctx(), &agentdv1.SubmitHookResultRequest{SessionId: id, RequestId: firstHookRequest(evs).GetRequestId(),
		Verdict: agentdv1.HookVerdict_HOOK_VERDICT_ALLOW})
	wantCode(t, err, codes.FailedPrecondition, "")
}

// TestHookOrderAndModelContext: hooks of one event are asked in declared
// order and the first non-ALLOW decision ends the chain; a notice reaches
// the model (GetContext) only when the answer asked for it.
func TestHookOrderAndModelContext(t *testing.T) {
	h := newHarness(t, agent.Options{Tools: hookTools()}, service.ServerOptions{})
	pre := agentdv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE
	for _, include := range []bool{false, true} {
		t.Run(map[bool]string{false: "notice hidden from the model", true: "notice shown to the model"}[include], func(t *testing.T) {
			id := h.createSession(&agentdv1.SessionConfig{
				Tools: []*agentdv1.Tool{{Name: "read_file"}, {Name: "lookup"}},
				Hooks: []*agentdv1.Hook{
					// Not asked: its pattern names read_file, the call is lookup.
					{Event: pre, Name: "files only", ToolPattern: "read_*", Timeout: durationpb.New(time.Minute)},
					hook(pre, "first"), hook(pre, "second"), hook(pre, "third"),
				},
				Faux: &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{toolCallAnswer(t, "c1", "lookup", nil), textAnswer("done")}},
			})
			var asked []string
			evs, err := promptHooks(t, h, id, "go", func(_ int, req *agentdv1.HookRequested) *agentdv1.SubmitHookResultRequest {
				asked = append(asked, req.GetHook())
				if req.GetHook() == "second" {
					return &agentdv1.SubmitHookResultRequest{Verdict: agentdv1.HookVerdict_HOOK_VERDICT_DENY, Reason: "lookups are off", IncludeInModelContext: include}
				}
				return &agentdv1.SubmitHookResultRequest{Verdict: agentdv1.HookVerdict_HOOK_VERDICT_ALLOW}
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(asked, ","); got != "first,second" {
				t.Fatalf("asked %s (%s), want first,second", got, kinds(evs))
			}
			entries := h.transcript(id)
			notices := hookNotices(entries)
			if len(notices) != 1 || notices[0].GetHook() != "second" || notices[0].GetIncludeInModelContext() != include || notices[0].GetDecidedBy() != "client" {
				t.Fatalf("notices %v", notices)
			}
			text := contextText(h.context(id))
			const said = `The pre_tool_use hook "second" refused the tool call lookup (c1). Reason: lookups are off`
			if strings.Contains(text, said) != include {
				t.Fatalf("GetContext (include %v):\n%s", include, text)
			}
		})
	}
}

// TestSteeringRefusedByHook: a steering message a USER_PROMPT hook
// refuses never enters the transcript; a DENIED notice without its text
// and an error event of stage "hook" stand in its place.
func TestSteeringRefusedByHook(t *testing.T) {
	g := newGate()
	h := newHarness(t, agent.Options{Tools: []agentloop.Tool{g.tool()}}, service.ServerOptions{})
	cfg := waitConfig(t, textAnswer("done"))
	cfg.Hooks = []*agentdv1.Hook{hook(agentdv1.HookEvent_HOOK_EVENT_USER_PROMPT, "gate")}
	id := h.createSession(cfg)
	stream, err := h.client.Prompt(h.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	done := make(chan struct{})
	var evs []*agentdv1.AgentEvent
	var ferr error
	go func() {
		defer close(done)
		evs, ferr = followHooks(t, h, h.client, id, stream, func(_ int, req *agentdv1.HookRequested) *agentdv1.SubmitHookResultRequest {
			sources = append(sources, req.GetSource())
			if req.GetSource() == "steer" {
				return &agentdv1.SubmitHookResultRequest{Verdict: agentdv1.HookVerdict_HOOK_VERDICT_DENY, Reason: "off topic"}
			}
			return &agentdv1.SubmitHookResultRequest{Verdict: agentdv1.HookVerdict_HOOK_VERDICT_ALLOW}
		})
	}()
	<-g.entered
	if _, err := h.client.Steer(h.ctx(), &agentdv1.SteerRequest{SessionId: id, Content: texts("forbidden words")}); err != nil {
		t.Fatal(err)
	}
	g.open()
	<-done
	if ferr != nil {
		t.Fatal(ferr)
	}
	if got := strings.Join(sources, ","); got != "prompt,steer" {
		t.Fatalf("hook asked for %s", got)
	}
	if !hasError(evs, "hook", "off topic") {
		t.Fatalf("no hook error event: %s", kinds(evs))
	}
	entries := h.transcript(id)
	if got := testkit.MessageKinds(entries); got != "user assistant tool_result hook_notice assistant" {
		t.Fatalf("transcript %s", got)
	}
	for _, e := range entries {
		if strings.Contains(e.String(), "forbidden words") {
			t.Fatalf("the refused text was stored: %v", e)
		}
	}
	if n := hookNotices(entries)[0]; n.GetAction() != agentdv1.HookAction_HOOK_ACTION_DENIED || n.GetReason() != "off topic" {
		t.Fatalf("notice %v", n)
	}
}

// TestPreCompactHook: Compact asks PRE_COMPACT hooks on its own stream;
// ALLOW compacts, DENY fails the call naming the hook (nothing but the
// notice stored), MODIFY supplies the instructions.
func TestPreCompactHook(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	tests := []struct {
		name    string
		answer  *agentdv1.SubmitHookResultRequest
		code    codes.Code
		notices string
	}{
		{"allow", &agentdv1.SubmitHookResultRequest{Verdict: agentdv1.HookVerdict_HOOK_VERDICT_ALLOW}, codes.OK, ""},
		{"deny", &agentdv1.SubmitHookResultRequest{Verdict: agentdv1.HookVerdict_HOOK_VERDICT_DENY, Reason: "keep it all"}, codes.FailedPrecondition, "DENIED"},
		{"modify", &agentdv1.SubmitHookResultRequest{Verdict: agentdv1.HookVerdict_HOOK_VERDICT_MODIFY, Instructions: "keep the numbers"}, codes.OK, "INSTRUCTIONS_SUPPLIED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := h.createSession(&agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}})
			for _, s := range []string{"one", "two", "three"} {
				h.prompt(id, strings.Repeat(s+" ", 200))
			}
			if _, err := h.client.UpdateSession(h.ctx(), &agentdv1.UpdateSessionRequest{SessionId: id,
				Config:     &agentdv1.SessionConfig{Faux: &agentdv1.FauxScript{Echo: true}, Hooks: []*agentdv1.Hook{hook(agentdv1.HookEvent_HOOK_EVENT_PRE_COMPACT, "archive")}},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"config"}}}); err != nil {
				t.Fatal(err)
			}
			stream, err := h.client.Compact(h.ctx(), &agentdv1.CompactRequest{SessionId: id, KeepRecentTokens: 100, Instructions: "be short"})
			if err != nil {
				t.Fatal(err)
			}
			evs, err := followHooks(t, h, h.client, id, stream, func(_ int, req *agentdv1.HookRequested) *agentdv1.SubmitHookResultRequest {
				if req.GetCompactionReason() != agentdv1.CompactionReason_COMPACTION_REASON_MANUAL || req.GetInstructions() != "be short" || req.GetTokensBefore() == 0 {
					t.Errorf("hook_requested %v", req)
				}
				return tt.answer
			})
			if status.Code(err) != tt.code {
				t.Fatalf("Compact: %v after %s", err, kinds(evs))
			}
			if tt.code != codes.OK && !strings.Contains(status.Convert(err).Message(), `"archive"`) {
				t.Fatalf("refusal %v does not name the hook", err)
			}
			entries := h.transcript(id)
			var actions []string
			for _, n := range hookNotices(entries) {
				actions = append(actions, strings.TrimPrefix(n.GetAction().String(), "HOOK_ACTION_"))
			}
			summaries := 0
			for _, e := range entries {
				if e.GetMessage().GetCompactionSummary() != nil {
					summaries++
				}
			}
			if got := strings.Join(actions, " "); got != tt.notices || (summaries == 1) != (tt.code == codes.OK) {
				t.Fatalf("notices %q, %d summaries (%s)", got, summaries, kinds(evs))
			}
		})
	}
}

// TestHookConfigRefusals: SessionConfig.hooks is checked when a session is
// created or updated, each refusal naming the field.
func TestHookConfigRefusals(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	pre := agentdv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE
	many := make([]*agentdv1.Hook, agent.MaxHooks+1)
	for i := range many {
		many[i] = &agentdv1.Hook{Event: pre}
	}
	tests := []struct {
		name  string
		hooks []*agentdv1.Hook
		field string
	}{
		{"no event", []*agentdv1.Hook{{Event: pre}, {}}, "config.hooks[1].event"},
		{"pattern for a prompt hook", []*agentdv1.Hook{{Event: agentdv1.HookEvent_HOOK_EVENT_USER_PROMPT, ToolPattern: "*"}}, "config.hooks[0].tool_pattern"},
		{"bad pattern", []*agentdv1.Hook{{Event: pre}, {Event: pre}, {Event: pre, ToolPattern: "mcp__["}}, "config.hooks[2].tool_pattern"},
		{"zero timeout", []*agentdv1.Hook{{Event: pre, Timeout: durationpb.New(0)}}, "config.hooks[0].timeout"},
		{"timeout too long", []*agentdv1.Hook{{Event: pre, Timeout: durationpb.New(11 * time.Minute)}}, "config.hooks[0].timeout"},
		{"unknown on_timeout", []*agentdv1.Hook{{Event: pre, OnTimeout: 7}}, "config.hooks[0].on_timeout"},
		{"long name", []*agentdv1.Hook{{Event: pre, Name: strings.Repeat("n", 129)}}, "config.hooks[0].name"},
		{"continuations for a tool hook", []*agentdv1.Hook{{Event: pre, MaxContinuations: 1}}, "config.hooks[0].max_continuations"},
		{"too many continuations", []*agentdv1.Hook{{Event: agentdv1.HookEvent_HOOK_EVENT_STOP, MaxContinuations: 17}}, "config.hooks[0].max_continuations"},
		{"too many hooks", many, "config.hooks"},
	}
	id := h.createSession(&agentdv1.SessionConfig{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.client.CreateSession(h.ctx(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{Hooks: tt.hooks}})
			wantField(t, err, tt.field)
			_, err = h.client.UpdateSession(h.ctx(), &agentdv1.UpdateSessionRequest{SessionId: id, Config: &agentdv1.SessionConfig{Hooks: tt.hooks},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"config.hooks"}}})
			wantField(t, err, tt.field)
		})
	}
	// The bounds themselves are accepted.
	if _, err := h.client.CreateSession(h.ctx(), &agentdv1.CreateSessionRequest{Config: &agentdv1.SessionConfig{Hooks: []*agentdv1.Hook{
		{Event: agentdv1.HookEvent_HOOK_EVENT_STOP, MaxContinuations: agent.MaxHookContinuations, Timeout: durationpb.New(agent.MaxContextHookTimeout), Name: strings.Repeat("n", 128)},
		{Event: agentdv1.HookEvent_HOOK_EVENT_POST_TOOL_USE, ToolPattern: "mcp__*", OnTimeout: agentdv1.HookTimeoutAction_HOOK_TIMEOUT_ACTION_DENY},
	}}}); err != nil {
		t.Fatal(err)
	}
}

// TestHookAnswerThroughReplica (PostgreSQL; skipped without a server, see
// pgtest): a hook of a run replica a owns is answered through replica b;
// b relays the answer, a refusal at the owner comes back with the field
// named, and the valid answer decides the call.
func TestHookAnswerThroughReplica(t *testing.T) {
	dsn := pgtest.DSN(t)
	a := newHarnessOn(t, dsn, agent.Options{ReplicaID: "a", Tools: hookTools()}, service.ServerOptions{})
	b := newHarnessOn(t, dsn, agent.Options{ReplicaID: "b", Tools: hookTools()}, service.ServerOptions{})
	id := a.createSession(&agentdv1.SessionConfig{
		Tools: []*agentdv1.Tool{{Name: "read_file"}},
		Hooks: []*agentdv1.Hook{hook(agentdv1.HookEvent_HOOK_EVENT_PRE_TOOL_USE, "remote")},
		Faux:  &agentdv1.FauxScript{Responses: []*agentdv1.AssistantMessage{toolCallAnswer(t, "c1", "read_file", map[string]any{"path": "a.txt"}), textAnswer("done")}},
	})
	stream, err := a.client.Prompt(a.ctx(), &agentdv1.PromptRequest{SessionId: id, Content: texts("go")})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := followHooks(t, a, b.client, id, stream, func(_ int, req *agentdv1.HookRequested) *agentdv1.SubmitHookResultRequest {
		_, err := b.client.SubmitHookResult(b.ctx(), &agentdv1.SubmitHookResultRequest{SessionId: id, RequestId: req.GetRequestId(),
			Verdict: agentdv1.HookVerdict_HOOK_VERDICT_MODIFY, Arguments: mustStruct(t, map[string]any{"file": "b.txt"})})
		wantField(t, err, "arguments.path")
		return &agentdv1.SubmitHookResultRequest{Verdict: agentdv1.HookVerdict_HOOK_VERDICT_MODIFY, Arguments: mustStruct(t, map[string]any{"path": "b.txt"}),
			DecidedBy: "replica b"}
	})
	if err != nil {
		t.Fatal(err)
	}
	entries := a.transcript(id)
	if r := toolResult(t, entries); blocksText(r.GetContent()) != "beta" {
		t.Fatalf("result %v after %s", r, kinds(evs))
	}
	if n := hookNotices(entries); len(n) != 1 || n[0].GetDecidedBy() != "replica b" {
		t.Fatalf("notices %v", n)
	}
}

// TestAutomaticCompactionVetoedByHook: a PRE_COMPACT hook's DENY of an
// automatic compaction lets the model call go ahead uncompacted, and
// compaction_end says the hook vetoed it.
func TestAutomaticCompactionVetoedByHook(t *testing.T) {
	h := newHarness(t, agent.Options{}, service.ServerOptions{})
	cfg := &agentdv1.SessionConfig{
		Compaction: &agentdv1.CompactionSettings{ReserveTokens: 1000, KeepRecentTokens: 100},
		Faux:       &agentdv1.FauxScript{Echo: true, ContextWindow: 4000},
	}
	id := h.createSession(cfg)
	long := strings.Repeat("abcd ", 400) // about 500 tokens
	for range 3 {
		h.prompt(id, long)
	}
	cfg.Hooks = []*agentdv1.Hook{hook(agentdv1.HookEvent_HOOK_EVENT_PRE_COMPACT, "keeper")}
	if _, err := h.client.UpdateSession(h.ctx(), &agentdv1.UpdateSessionRequest{SessionId: id, Config: cfg,
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"config"}}}); err != nil {
		t.Fatal(err)
	}
	evs, err := promptHooks(t, h, id, long, func(_ int, req *agentdv1.HookRequested) *agentdv1.SubmitHookResultRequest {
		if req.GetCompactionReason() != agentdv1.CompactionReason_COMPACTION_REASON_THRESHOLD {
			t.Errorf("hook_requested %v", req)
		}
		return &agentdv1.SubmitHookResultRequest{Verdict: agentdv1.HookVerdict_HOOK_VERDICT_DENY, Reason: "not now"}
	})
	if err != nil {
		t.Fatal(err)
	}
	var end *agentdv1.CompactionEnd
	for _, ev := range evs {
		if e := ev.GetCompactionEnd(); e != nil {
			end = e
		}
	}
	if countEvents(evs, "hook_requested") != 1 || end == nil || !strings.Contains(end.GetErrorMessage(), `"keeper" vetoed`) || end.GetEntryId() != "" {
		t.Fatalf("compaction_end %v after %s", end, kinds(evs))
	}
	entries := h.transcript(id)
	last := entries[len(entries)-1].GetMessage().GetAssistant()
	if last.GetStopReason() != agentdv1.StopReason_STOP_REASON_STOP || countEvents(evs, "compaction_start") != 0 {
		t.Fatalf("the model call after the veto: %v (%s)", last, kinds(evs))
	}
	if n := hookNotices(entries); len(n) != 1 || n[0].GetAction() != agentdv1.HookAction_HOOK_ACTION_DENIED {
		t.Fatalf("notices %v", n)
	}
}
