package agentloop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider/faux"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder is a sink that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []*agentdv1.AgentEvent
	// hook, when set, runs for every event before it is recorded; it may
	// return an error to fail the sink.
	hook func(ev *agentdv1.AgentEvent) error
}

func (r *recorder) sink(_ context.Context, ev *agentdv1.AgentEvent) error {
	if r.hook != nil {
		if err := r.hook(ev); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	return nil
}

func (r *recorder) all() []*agentdv1.AgentEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*agentdv1.AgentEvent(nil), r.events...)
}

// trace renders events compactly; consecutive identical deltas collapse into
// one "…*" entry so tests do not depend on chunk sizes.
func (r *recorder) trace() []string {
	var out []string
	for _, ev := range r.all() {
		s := describe(ev)
		if strings.HasSuffix(s, "_delta") {
			if len(out) > 0 && out[len(out)-1] == s+"*" {
				continue
			}
			s += "*"
		}
		out = append(out, s)
	}
	return out
}

func role(m *agentdv1.AgentMessage) string {
	switch m.GetKind().(type) {
	case *agentdv1.AgentMessage_User:
		return "user"
	case *agentdv1.AgentMessage_Assistant:
		return "assistant"
	case *agentdv1.AgentMessage_ToolResult:
		return "toolResult"
	case *agentdv1.AgentMessage_Custom:
		return "custom"
	}
	return "other"
}

func describe(ev *agentdv1.AgentEvent) string {
	switch e := ev.Event.(type) {
	case *agentdv1.AgentEvent_AgentStart:
		return "agent_start"
	case *agentdv1.AgentEvent_TurnStart:
		return "turn_start"
	case *agentdv1.AgentEvent_MessageStart:
		return "message_start:" + role(e.MessageStart.Message)
	case *agentdv1.AgentEvent_MessageEnd:
		return "message_end:" + role(e.MessageEnd.Message)
	case *agentdv1.AgentEvent_MessageUpdate:
		switch e.MessageUpdate.Delta.(type) {
		case *agentdv1.MessageUpdate_TextStart:
			return "text_start"
		case *agentdv1.MessageUpdate_TextDelta:
			return "text_delta"
		case *agentdv1.MessageUpdate_TextEnd:
			return "text_end"
		case *agentdv1.MessageUpdate_ThinkingStart:
			return "thinking_start"
		case *agentdv1.MessageUpdate_ThinkingDelta:
			return "thinking_delta"
		case *agentdv1.MessageUpdate_ThinkingEnd:
			return "thinking_end"
		case *agentdv1.MessageUpdate_ToolCallStart:
			return "toolcall_start"
		case *agentdv1.MessageUpdate_ToolCallDelta:
			return "toolcall_delta"
		case *agentdv1.MessageUpdate_ToolCallEnd:
			return "toolcall_end"
		}
	case *agentdv1.AgentEvent_ToolExecutionStart:
		return "tool_start:" + e.ToolExecutionStart.ToolCallId
	case *agentdv1.AgentEvent_ToolExecutionUpdate:
		return "tool_update:" + e.ToolExecutionUpdate.ToolCallId
	case *agentdv1.AgentEvent_ToolExecutionEnd:
		return "tool_end:" + e.ToolExecutionEnd.Result.ToolCallId
	case *agentdv1.AgentEvent_TurnEnd:
		return fmt.Sprintf("turn_end:%d", len(e.TurnEnd.ToolResults))
	case *agentdv1.AgentEvent_AgentEnd:
		return "agent_end:" + strings.TrimPrefix(e.AgentEnd.Outcome.String(), "RUN_OUTCOME_")
	case *agentdv1.AgentEvent_QueueUpdate:
		return "queue_update"
	case *agentdv1.AgentEvent_Error:
		return "error:" + e.Error.Stage
	}
	return "unknown"
}

func (r *recorder) agentEnds() []*agentdv1.AgentEnd {
	var out []*agentdv1.AgentEnd
	for _, ev := range r.all() {
		if e := ev.GetAgentEnd(); e != nil {
			out = append(out, e)
		}
	}
	return out
}

// toolResults returns the tool result messages that reached message_end.
func (r *recorder) toolResults() []*agentdv1.ToolResultMessage {
	var out []*agentdv1.ToolResultMessage
	for _, ev := range r.all() {
		if m := ev.GetMessageEnd().GetMessage().GetToolResult(); m != nil {
			out = append(out, m)
		}
	}
	return out
}

func userMsg(text string) *agentdv1.AgentMessage {
	return &agentdv1.AgentMessage{Kind: &agentdv1.AgentMessage_User{User: &agentdv1.UserMessage{
		Content: []*agentdv1.ContentBlock{faux.Text(text)}, Timestamp: timestamppb.New(time.Unix(1700000000, 0)),
	}}}
}

func mustStruct(t testing.TB, js string) *structpb.Struct {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatalf("bad JSON %s: %v", js, err)
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type execFn = func(ctx context.Context, call agentloop.Call) (agentloop.Result, error)

func newTool(t testing.TB, name, schema string, fn execFn) agentloop.Tool {
	t.Helper()
	return agentloop.FuncTool{Def: &agentdv1.Tool{Name: name, Description: name + " tool", Parameters: mustStruct(t, schema)}, Fn: fn}
}

func textResult(s string) agentloop.Result {
	return agentloop.Result{Content: []*agentdv1.ContentBlock{faux.Text(s)}}
}

func toolSet(t testing.TB, tools ...agentloop.Tool) *agentloop.ToolSet {
	t.Helper()
	ts, err := agentloop.NewToolSet(tools...)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func blockText(blocks []*agentdv1.ContentBlock) string {
	var b strings.Builder
	for _, c := range blocks {
		b.WriteString(c.GetText().GetText())
	}
	return b.String()
}

func cfgFor(p *faux.Provider) agentloop.Config {
	return agentloop.Config{Model: faux.DefaultModel(), Stream: p.Stream}
}

func equalTrace(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("event trace mismatch\n got: %s\nwant: %s", strings.Join(got, " "), strings.Join(want, " "))
	}
}

// echoTool answers with its "path" argument.
func echoTool(t testing.TB) agentloop.Tool {
	return newTool(t, "read_file", `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`,
		func(_ context.Context, call agentloop.Call) (agentloop.Result, error) {
			return textResult("content of " + call.Args.Fields["path"].GetStringValue()), nil
		})
}
