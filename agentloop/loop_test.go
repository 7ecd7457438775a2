package agentloop_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
	"github.com/agentd/agentd/provider/faux"
)

// Rules 1-3 and 5: a prompt, a tool call turn and an answer turn.
func TestEventOrderPromptToolAnswer(t *testing.T) {
	p := faux.New(faux.Options{},
		faux.Reply(faux.Message(faux.Thinking("need the file", "sig-1"), faux.ToolCall("c1", "read_file", map[string]any{"path": "a.txt"}))),
		faux.Reply(faux.Message(faux.Text("The file says hello."))),
	)
	rec := &recorder{}
	state := agentloop.State{SystemPrompt: "sys", Tools: toolSet(t, echoTool(t))}
	msgs, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("read a.txt")}, state, cfgFor(p), rec.sink)
	if err != nil {
		t.Fatal(err)
	}
	equalTrace(t, rec.trace(), []string{
		"agent_start", "turn_start", "message_start:user", "message_end:user",
		"message_start:assistant", "thinking_start", "thinking_delta*", "thinking_end",
		"toolcall_start", "toolcall_delta*", "toolcall_end", "message_end:assistant",
		"tool_start:c1", "tool_end:c1", "message_start:toolResult", "message_end:toolResult", "turn_end:1",
		"turn_start", "message_start:assistant", "text_start", "text_delta*", "text_end", "message_end:assistant", "turn_end:0",
		"agent_end:COMPLETED",
	})
	if len(msgs) != 4 {
		t.Fatalf("got %d new messages, want 4", len(msgs))
	}
	first := msgs[1].GetAssistant()
	if th := first.Content[0].GetThinking(); th.GetThinking() != "need the file" || th.GetThinkingSignature() != "sig-1" {
		t.Errorf("thinking block = %v", th)
	}
	if got := blockText(msgs[2].GetToolResult().Content); got != "content of a.txt" {
		t.Errorf("tool result = %q", got)
	}
	// The assistant message_start carries the empty message with its model.
	for _, ev := range rec.all() {
		if a := ev.GetMessageStart().GetMessage().GetAssistant(); a != nil {
			if len(a.Content) != 0 || a.Provider != "faux" || a.Model != "faux-1" || a.Api != "faux" {
				t.Errorf("assistant message_start = %v", a)
			}
		}
		if ev.Time == nil || ev.SessionId != "" || ev.Seq != 0 {
			t.Errorf("event envelope: time=%v session=%q seq=%d", ev.Time, ev.SessionId, ev.Seq)
		}
	}
	// The deltas rebuild the text: the stream is linear.
	var rebuilt strings.Builder
	for _, ev := range rec.all() {
		rebuilt.WriteString(ev.GetMessageUpdate().GetTextDelta().GetDelta())
	}
	if rebuilt.String() != "The file says hello." {
		t.Errorf("rebuilt text = %q", rebuilt.String())
	}
	end := rec.agentEnds()[0]
	if end.Usage.GetOutput() == 0 || end.Usage.GetInput() == 0 {
		t.Errorf("agent_end usage not summed: %v", end.Usage)
	}
	if want := first.Usage.Output + msgs[3].GetAssistant().Usage.Output; end.Usage.Output != want {
		t.Errorf("summed output = %d, want %d", end.Usage.Output, want)
	}
}

// Rule 4: ERROR and ABORTED assistant messages end the run.
func TestProviderErrorEndsRun(t *testing.T) {
	tests := []struct {
		name     string
		resp     []faux.Response
		wantText string
		outcome  string
	}{
		{"failure before output", []faux.Response{faux.Fail("overloaded_error: 529")}, "overloaded_error: 529", "ERROR"},
		{"failure mid-answer", []faux.Response{faux.Reply(faux.Errored("connection reset", faux.Text("partial")))}, "connection reset", "ERROR"},
		{"empty queue", nil, faux.EmptyQueueText, "ERROR"},
		{"scripted abort", []faux.Response{faux.Reply(faux.Stopped(agentdv1.StopReason_STOP_REASON_ABORTED, faux.Text("x")))}, "", "ABORTED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := faux.New(faux.Options{}, tt.resp...)
			rec := &recorder{}
			msgs, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("hi")}, agentloop.State{}, cfgFor(p), rec.sink)
			if err != nil {
				t.Fatal(err)
			}
			tr := rec.trace()
			if got := strings.Join(tr[len(tr)-3:], " "); got != "message_end:assistant turn_end:0 agent_end:"+tt.outcome {
				t.Fatalf("tail = %s", got)
			}
			a := msgs[len(msgs)-1].GetAssistant()
			if a.ErrorMessage != tt.wantText {
				t.Errorf("error_message = %q, want %q", a.ErrorMessage, tt.wantText)
			}
			if end := rec.agentEnds()[0]; end.ErrorMessage != tt.wantText {
				t.Errorf("agent_end error = %q", end.ErrorMessage)
			}
		})
	}
}

// Rule 3: a stream that never sent start still yields message_start first.
func TestStreamWithoutStartSynthesizesMessageStart(t *testing.T) {
	stream := func(ctx context.Context, m provider.Model, c *agentdv1.Context, o provider.Options) provider.Stream {
		return func(yield func(provider.Event) bool) {
			// A delta before start is ignored, as in pi.
			if !yield(provider.Event{Type: provider.EventTextDelta, Delta: "ignored"}) {
				return
			}
			yield(provider.Event{Type: provider.EventDone, Message: faux.Message(faux.Text("done"))})
		}
	}
	rec := &recorder{}
	_, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("hi")}, agentloop.State{}, agentloop.Config{Stream: stream}, rec.sink)
	if err != nil {
		t.Fatal(err)
	}
	equalTrace(t, rec.trace(), []string{"agent_start", "turn_start", "message_start:user", "message_end:user",
		"message_start:assistant", "message_end:assistant", "turn_end:0", "agent_end:COMPLETED"})
}

// A provider that breaks its contract (no terminal event, or a panic) still
// yields a stored ERROR message with what was streamed.
func TestBrokenProviderYieldsErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		tail func(yield func(provider.Event) bool)
		want string
	}{
		{"no terminal event", func(func(provider.Event) bool) {}, "Provider stream ended without a final message"},
		{"panic", func(func(provider.Event) bool) { panic("boom") }, "provider panicked: boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream := func(ctx context.Context, m provider.Model, c *agentdv1.Context, o provider.Options) provider.Stream {
				return func(yield func(provider.Event) bool) {
					_ = yield(provider.Event{Type: provider.EventStart, Message: &agentdv1.AssistantMessage{Provider: "x"}}) &&
						yield(provider.Event{Type: provider.EventTextStart}) &&
						yield(provider.Event{Type: provider.EventTextDelta, Delta: "par"}) &&
						yield(provider.Event{Type: provider.EventTextDelta, Delta: "tial"}) &&
						yield(provider.Event{Type: provider.EventToolCallStart, ContentIndex: 1, ToolCallID: "c", ToolName: "t"}) &&
						yield(provider.Event{Type: provider.EventToolCallDelta, ContentIndex: 1, Delta: `{"a":`})
					tt.tail(yield)
				}
			}
			rec := &recorder{}
			msgs, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("hi")}, agentloop.State{}, agentloop.Config{Stream: stream}, rec.sink)
			if err != nil {
				t.Fatal(err)
			}
			a := msgs[1].GetAssistant()
			if a.StopReason != agentdv1.StopReason_STOP_REASON_ERROR || a.ErrorMessage != tt.want {
				t.Fatalf("got %v %q", a.StopReason, a.ErrorMessage)
			}
			if blockText(a.Content) != "partial" {
				t.Errorf("partial content = %q", blockText(a.Content))
			}
			if tc := a.Content[1].GetToolCall(); tc == nil || len(tc.Arguments.GetFields()) != 0 {
				t.Errorf("partial tool call must have {} arguments, got %v", tc)
			}
			if ends := rec.agentEnds(); len(ends) != 1 || ends[0].Outcome != agentdv1.RunOutcome_RUN_OUTCOME_ERROR {
				t.Errorf("agent_end = %v", ends)
			}
		})
	}
}

// Rule 5: every immediate error text, and a tool's own failure.
func TestToolErrorTexts(t *testing.T) {
	schema := `{"type":"object","properties":{"path":{"type":"string"},"count":{"type":"integer","minimum":1}},"required":["path","count"],"additionalProperties":false}`
	ok := func(context.Context, agentloop.Call) (agentloop.Result, error) {
		return textResult("ran"), nil
	}
	tests := []struct {
		name   string
		call   string
		args   map[string]any
		fn     execFn
		before agentloop.BeforeToolCallFunc
		want   string
		ran    bool
	}{
		{name: "unknown tool", call: "nope", args: map[string]any{}, want: "Tool nope not found"},
		{name: "invalid arguments", call: "t", args: map[string]any{"count": "zero", "extra": true},
			want: "Validation failed for tool \"t\":\n" +
				"  - count: must be integer\n" +
				"  - path: must have required properties path\n" +
				"  - root: must not have additional properties\n\n" +
				"Received arguments:\n{\n  \"count\": \"zero\",\n  \"extra\": true\n}"},
		{name: "below minimum", call: "t", args: map[string]any{"path": "p", "count": 0},
			want: "Validation failed for tool \"t\":\n  - count: must be >= 1\n\nReceived arguments:\n{\n  \"count\": 0,\n  \"path\": \"p\"\n}"},
		{name: "blocked with reason", call: "t", args: map[string]any{"path": "p", "count": 1},
			before: func(context.Context, agentloop.ToolCallInfo) (agentloop.BeforeDecision, error) {
				return agentloop.BeforeDecision{Block: true, Reason: "denied by policy"}, nil
			}, want: "denied by policy"},
		{name: "blocked without reason", call: "t", args: map[string]any{"path": "p", "count": 1},
			before: func(context.Context, agentloop.ToolCallInfo) (agentloop.BeforeDecision, error) {
				return agentloop.BeforeDecision{Block: true}, nil
			}, want: "Tool execution was blocked"},
		{name: "before hook fails", call: "t", args: map[string]any{"path": "p", "count": 1},
			before: func(context.Context, agentloop.ToolCallInfo) (agentloop.BeforeDecision, error) {
				return agentloop.BeforeDecision{}, errors.New("approval store down")
			}, want: "approval store down"},
		{name: "tool fails", call: "t", args: map[string]any{"path": "p", "count": 1},
			fn: func(context.Context, agentloop.Call) (agentloop.Result, error) {
				return agentloop.Result{}, errors.New("ENOENT: no such file")
			}, want: "ENOENT: no such file"},
		{name: "tool panics", call: "t", args: map[string]any{"path": "p", "count": 1},
			fn: func(context.Context, agentloop.Call) (agentloop.Result, error) {
				panic("nil map")
			}, want: "Tool t panicked: nil map"},
		{name: "coerced and run", call: "t", args: map[string]any{"path": "p", "count": "3"}, want: "ran", ran: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn := tt.fn
			if fn == nil {
				fn = ok
			}
			p := faux.New(faux.Options{},
				faux.Reply(faux.Message(faux.ToolCall("c1", tt.call, tt.args))),
				faux.Reply(faux.Message(faux.Text("ok"))))
			rec := &recorder{}
			cfg := cfgFor(p)
			cfg.BeforeToolCall = tt.before
			_, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")},
				agentloop.State{Tools: toolSet(t, newTool(t, "t", schema, fn))}, cfg, rec.sink)
			if err != nil {
				t.Fatal(err)
			}
			res := rec.toolResults()
			if len(res) != 1 {
				t.Fatalf("got %d results", len(res))
			}
			if got := blockText(res[0].Content); got != tt.want {
				t.Errorf("text =\n%s\nwant\n%s", got, tt.want)
			}
			if res[0].IsError == tt.ran {
				t.Errorf("is_error = %v", res[0].IsError)
			}
			if ends := rec.agentEnds(); len(ends) != 1 || ends[0].Outcome != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
				t.Errorf("tool failures must not fail the run: %v", ends)
			}
		})
	}
}

// Coercion happens on a copy: the tool sees numbers and booleans, the stored
// tool call keeps what the model sent.
func TestArgumentCoercionOnCopy(t *testing.T) {
	schema := `{"type":"object","properties":{
		"n":{"type":"integer"},"f":{"type":"number"},"b":{"type":"boolean"},"s":{"type":"string"},
		"list":{"type":"array","items":{"type":"integer"}},
		"u":{"anyOf":[{"type":"boolean"},{"type":"integer"}]},
		"nested":{"type":"object","properties":{"deep":{"type":"boolean"}}}}}`
	var got map[string]any
	tool := newTool(t, "t", schema, func(_ context.Context, call agentloop.Call) (agentloop.Result, error) {
		got = call.Args.AsMap()
		return textResult("ok"), nil
	})
	args := map[string]any{"n": "42", "f": "2.5", "b": "true", "s": 7, "list": []any{"1", 2}, "u": "7", "nested": map[string]any{"deep": "false"}}
	p := faux.New(faux.Options{}, faux.Reply(faux.Message(faux.ToolCall("c1", "t", args))), faux.Reply(faux.Message(faux.Text("ok"))))
	msgs, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{Tools: toolSet(t, tool)}, cfgFor(p), (&recorder{}).sink)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"n": 42.0, "f": 2.5, "b": true, "s": "7", "list": []any{1.0, 2.0}, "u": 7.0, "nested": map[string]any{"deep": false}}
	if !proto.Equal(mustNewStruct(t, got), mustNewStruct(t, want)) {
		t.Errorf("tool got %v, want %v", got, want)
	}
	stored := msgs[1].GetAssistant().Content[0].GetToolCall().Arguments.AsMap()
	if stored["n"] != "42" || stored["b"] != "true" {
		t.Errorf("stored arguments were coerced in place: %v", stored)
	}
}

func mustNewStruct(t *testing.T, m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Hooks: AfterToolCall rewrites the result; BeforeToolCall sees validated
// arguments.
func TestAfterToolCallRewrites(t *testing.T) {
	p := faux.New(faux.Options{}, faux.Reply(faux.Message(faux.ToolCall("c1", "read_file", map[string]any{"path": "x"}))), faux.Reply(faux.Message(faux.Text("ok"))))
	cfg := cfgFor(p)
	var sawArgs string
	cfg.BeforeToolCall = func(_ context.Context, c agentloop.ToolCallInfo) (agentloop.BeforeDecision, error) {
		sawArgs = c.Args.Fields["path"].GetStringValue()
		return agentloop.BeforeDecision{}, nil
	}
	yes := true
	cfg.AfterToolCall = func(_ context.Context, info agentloop.AfterToolCallInfo) (*agentloop.ResultOverride, error) {
		if blockText(info.Result.Content) != "content of x" || info.IsError {
			t.Errorf("after hook saw %v", info.Result)
		}
		return &agentloop.ResultOverride{Content: []*agentdv1.ContentBlock{faux.Text("[redacted]")}, IsError: &yes, Details: structpb.NewStringValue("d")}, nil
	}
	rec := &recorder{}
	if _, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{Tools: toolSet(t, echoTool(t))}, cfg, rec.sink); err != nil {
		t.Fatal(err)
	}
	res := rec.toolResults()[0]
	if blockText(res.Content) != "[redacted]" || !res.IsError || res.Details.GetStringValue() != "d" || sawArgs != "x" {
		t.Errorf("result = %v, before saw %q", res, sawArgs)
	}
	// The model's next context holds the rewritten result.
	c := p.Contexts()[1]
	if got := blockText(c.Messages[2].GetToolResult().Content); got != "[redacted]" {
		t.Errorf("model saw %q", got)
	}
}

// Rule 8: terminate and shouldStopAfterTurn.
func TestTerminateAndShouldStop(t *testing.T) {
	term := func(flag bool) execFn {
		return func(context.Context, agentloop.Call) (agentloop.Result, error) {
			return agentloop.Result{Content: []*agentdv1.ContentBlock{faux.Text("done")}, Terminate: flag}, nil
		}
	}
	tests := []struct {
		name      string
		calls     []*agentdv1.ContentBlock
		stop      bool
		wantCalls int
	}{
		{"all terminate: no further model call", []*agentdv1.ContentBlock{faux.ToolCall("a", "yes", nil), faux.ToolCall("b", "yes", nil)}, false, 1},
		{"one does not terminate: continue", []*agentdv1.ContentBlock{faux.ToolCall("a", "yes", nil), faux.ToolCall("b", "no", nil)}, false, 2},
		{"shouldStopAfterTurn", []*agentdv1.ContentBlock{faux.ToolCall("a", "no", nil)}, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := faux.New(faux.Options{}, faux.Reply(faux.Message(tt.calls...)), faux.Reply(faux.Message(faux.Text("after"))))
			cfg := cfgFor(p)
			if tt.stop {
				cfg.ShouldStopAfterTurn = func(_ context.Context, info agentloop.TurnInfo) bool {
					return info.Turn == 1 && len(info.ToolResults) == 1
				}
			}
			rec := &recorder{}
			ts := toolSet(t, newTool(t, "yes", `{"type":"object"}`, term(true)), newTool(t, "no", `{"type":"object"}`, term(false)))
			if _, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{Tools: ts}, cfg, rec.sink); err != nil {
				t.Fatal(err)
			}
			if p.Calls() != tt.wantCalls {
				t.Errorf("model calls = %d, want %d", p.Calls(), tt.wantCalls)
			}
			if ends := rec.agentEnds(); len(ends) != 1 || ends[0].Outcome != agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED {
				t.Errorf("agent_end = %v", ends)
			}
		})
	}
}

// The seed's two-prompt scenario: the second model call sees the first
// turn's tool call, tool result and answer.
func TestSeedTwoPromptScenario(t *testing.T) {
	readFile := newTool(t, "read_file", `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`,
		func(_ context.Context, _ agentloop.Call) (agentloop.Result, error) {
			return textResult("export const config = { port: 3000 };"), nil
		})
	editFile := newTool(t, "edit_file", `{"type":"object","properties":{"path":{"type":"string"},"old":{"type":"string"},"new":{"type":"string"}},"required":["path","old","new"]}`,
		func(context.Context, agentloop.Call) (agentloop.Result, error) {
			return textResult("edited"), nil
		})
	p := faux.New(faux.Options{},
		faux.Reply(faux.Message(faux.ToolCall("call_read", "read_file", map[string]any{"path": "src/config.ts"}))),
		faux.Reply(faux.Message(faux.Text("默认端口是 3000。"))),
		// The model resolves "它" from the history it is given.
		func(_ context.Context, c *agentdv1.Context, _ faux.Call) (*agentdv1.AssistantMessage, error) {
			for _, m := range c.Messages {
				if strings.Contains(blockText(m.GetToolResult().GetContent()), "port: 3000") {
					return faux.Message(faux.ToolCall("call_edit", "edit_file", map[string]any{"path": "src/config.ts", "old": "3000", "new": "8080"})), nil
				}
			}
			return faux.Message(faux.Text("什么是“它”？")), nil
		},
		faux.Reply(faux.Message(faux.Text("已改成 8080。"))),
	)
	state := agentloop.State{SystemPrompt: "你是桌面开发助手。", Tools: toolSet(t, readFile, editFile)}
	first, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("读取 src/config.ts，告诉我默认端口。")}, state, cfgFor(p), (&recorder{}).sink)
	if err != nil {
		t.Fatal(err)
	}
	state.Messages = append(state.Messages, first...)
	second, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("把它改成 8080。")}, state, cfgFor(p), (&recorder{}).sink)
	if err != nil {
		t.Fatal(err)
	}
	ctxs := p.Contexts()
	if len(ctxs) != 4 {
		t.Fatalf("model calls = %d", len(ctxs))
	}
	third := ctxs[2]
	var roles []string
	for _, m := range third.Messages {
		switch {
		case m.GetUser() != nil:
			roles = append(roles, "user:"+blockText(m.GetUser().Content))
		case m.GetAssistant() != nil:
			a := m.GetAssistant()
			if tc := a.Content[0].GetToolCall(); tc != nil {
				roles = append(roles, "toolCall:"+tc.Id)
			} else {
				roles = append(roles, "assistant:"+blockText(a.Content))
			}
		case m.GetToolResult() != nil:
			roles = append(roles, "toolResult:"+m.GetToolResult().ToolCallId)
		}
	}
	want := []string{"user:读取 src/config.ts，告诉我默认端口。", "toolCall:call_read", "toolResult:call_read", "assistant:默认端口是 3000。", "user:把它改成 8080。"}
	if strings.Join(roles, "|") != strings.Join(want, "|") {
		t.Fatalf("second prompt's context = %v", roles)
	}
	if third.SystemPrompt != "你是桌面开发助手。" || len(third.Tools) != 2 {
		t.Errorf("context system/tools = %q %d", third.SystemPrompt, len(third.Tools))
	}
	if tc := second[1].GetAssistant().Content[0].GetToolCall(); tc.GetName() != "edit_file" || tc.Arguments.Fields["new"].GetStringValue() != "8080" {
		t.Errorf("second run's call = %v", tc)
	}
	if got := blockText(second[len(second)-1].GetAssistant().Content); got != "已改成 8080。" {
		t.Errorf("final answer = %q", got)
	}
}

// The sink failing aborts the run cleanly: nothing after the failure but one
// agent_end attempt, and Run returns the error.
func TestSinkFailureAbortsRun(t *testing.T) {
	storeErr := errors.New("disk full")
	p := faux.New(faux.Options{},
		faux.Reply(faux.Message(faux.ToolCall("c1", "read_file", map[string]any{"path": "x"}))),
		faux.Reply(faux.Message(faux.Text("never"))))
	var seen []string
	rec := &recorder{}
	rec.hook = func(ev *agentdv1.AgentEvent) error {
		seen = append(seen, describe(ev))
		if describe(ev) == "message_end:assistant" {
			return storeErr
		}
		return nil
	}
	_, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{Tools: toolSet(t, echoTool(t))}, cfgFor(p), rec.sink)
	var se *agentloop.SinkError
	if !errors.As(err, &se) || !errors.Is(err, storeErr) {
		t.Fatalf("err = %v", err)
	}
	if got := seen[len(seen)-2:]; got[0] != "message_end:assistant" || got[1] != "agent_end:ERROR" {
		t.Fatalf("events after failure: %v", seen)
	}
	if p.Calls() != 1 {
		t.Errorf("model calls after sink failure = %d", p.Calls())
	}
}

// A panic in the loop's own callbacks ends the run with one agent_end.
func TestPanicInShouldStopEndsRun(t *testing.T) {
	p := faux.New(faux.Options{}, faux.Reply(faux.Message(faux.Text("hi"))))
	cfg := cfgFor(p)
	cfg.ShouldStopAfterTurn = func(context.Context, agentloop.TurnInfo) bool { panic("bad hook") }
	rec := &recorder{}
	_, err := agentloop.Run(context.Background(), []*agentdv1.AgentMessage{userMsg("go")}, agentloop.State{}, cfg, rec.sink)
	if err == nil || !strings.Contains(err.Error(), "bad hook") {
		t.Fatalf("err = %v", err)
	}
	tr := rec.trace()
	if got := strings.Join(tr[len(tr)-2:], " "); got != "error:loop agent_end:ERROR" {
		t.Fatalf("tail = %v", tr)
	}
}

func TestRunRejectsMissingConfig(t *testing.T) {
	if _, err := agentloop.Run(context.Background(), nil, agentloop.State{}, agentloop.Config{}, (&recorder{}).sink); err == nil {
		t.Error("nil Stream accepted")
	}
	p := faux.New(faux.Options{})
	if _, err := agentloop.Run(context.Background(), nil, agentloop.State{}, cfgFor(p), nil); err == nil {
		t.Error("nil sink accepted")
	}
}

func TestToolSetRejectsBadTools(t *testing.T) {
	noop := func(context.Context, agentloop.Call) (agentloop.Result, error) {
		return agentloop.Result{}, nil
	}
	if _, err := agentloop.NewToolSet(newTool(t, "a", `{}`, noop), newTool(t, "a", `{}`, noop)); err == nil {
		t.Error("duplicate accepted")
	}
	if _, err := agentloop.NewToolSet(newTool(t, "a", `{"type":"nonsense"}`, noop)); err == nil {
		t.Error("invalid schema accepted")
	}
}
