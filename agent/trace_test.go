package agent_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider/faux"
)

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

// A run is an invoke_agent span below the caller's span, with a chat span
// per model call and an execute_tool span per tool call below it, carrying
// the GenAI semantic conventions' attributes; every event names the trace;
// content is recorded only when asked.
func TestRunTraces(t *testing.T) {
	for _, capture := range []bool{false, true} {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		h := newHarness(t, agent.Options{Tools: []agentloop.Tool{noop}, TracerProvider: tp, CaptureContent: capture})
		cfg := script(costing(faux.Message(faux.ToolCall("c1", "noop", map[string]any{"secret": "s3"})), 30, 0.01), costing(text("done"), 40, 0.02))
		cfg.Tools = []*agentdv1.Tool{{Name: "noop", Approval: agentdv1.ApprovalPolicy_APPROVAL_POLICY_ALLOW}}
		id := h.session(cfg)

		parentCtx, parent := tp.Tracer("test").Start(context.Background(), "client call")
		runID, err := h.a.Start(parentCtx, agent.StartRequest{SessionID: id, Prompt: user("my secret prompt")})
		if err != nil {
			t.Fatal(err)
		}
		evs, err := h.follow(id, runID, 0)
		if err != nil {
			t.Fatal(err)
		}
		parent.End()
		got := decode(t, evs)
		traceID := parent.SpanContext().TraceID()
		for _, ev := range got {
			if !bytes.Equal(ev.GetTraceId(), traceID[:]) {
				t.Fatalf("event %d names trace %q, want %s", ev.GetSeq(), ev.GetTraceId(), traceID)
			}
		}

		byName := map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range exp.GetSpans().Snapshots() {
			byName[s.Name()] = append(byName[s.Name()], s)
		}
		run := byName["invoke_agent agentd"]
		if len(run) != 1 || run[0].Parent().SpanID() != parent.SpanContext().SpanID() || run[0].SpanContext().TraceID() != traceID {
			t.Fatalf("invoke_agent spans %v: want one below the caller's span", run)
		}
		ra := attrs(run[0])
		if ra["gen_ai.operation.name"].AsString() != "invoke_agent" || ra["gen_ai.conversation.id"].AsString() != id || ra["agentd.run.outcome"].AsString() != "COMPLETED" || ra["agentd.usage.cost_usd"].AsFloat64() < 0.029 {
			t.Errorf("invoke_agent attributes %v", ra)
		}
		chats := byName["chat faux-1"]
		if len(chats) != 2 {
			t.Fatalf("spans %v: want two chat spans", byName)
		}
		for i, c := range chats {
			a := attrs(c)
			if c.Parent().SpanID() != run[0].SpanContext().SpanID() || a["gen_ai.operation.name"].AsString() != "chat" || a["gen_ai.provider.name"].AsString() != "faux" ||
				a["gen_ai.request.model"].AsString() != "faux-1" {
				t.Errorf("chat span %d: parent %v, attributes %v", i, c.Parent().SpanID(), a)
			}
		}
		first := attrs(chats[0])
		if reasons := first["gen_ai.response.finish_reasons"].AsStringSlice(); len(reasons) != 1 || reasons[0] != "tool_use" || first["agentd.usage.cost_usd"].AsFloat64() != 0.01 {
			t.Errorf("first chat: %v", first)
		}
		tools := byName["execute_tool noop"]
		if len(tools) != 1 || tools[0].Parent().SpanID() != run[0].SpanContext().SpanID() || attrs(tools[0])["gen_ai.tool.call.id"].AsString() != "c1" {
			t.Fatalf("execute_tool spans %v", tools)
		}
		var all strings.Builder
		for _, s := range exp.GetSpans().Snapshots() {
			for _, kv := range s.Attributes() {
				all.WriteString(kv.Value.String())
			}
		}
		if has := strings.Contains(all.String(), "my secret prompt") && strings.Contains(all.String(), "s3"); has != capture {
			t.Errorf("capture %v: content recorded = %v", capture, has)
		}
	}
}
