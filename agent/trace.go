package agent

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/agentloop"
	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/provider"
)

// tracerName names the spans' instrumentation scope.
const tracerName = "github.com/agentd/agentd/agent"

// Attributes of agentd's own beside the GenAI semantic conventions.
var (
	attrCostUSD    = attribute.Key("agentd.usage.cost_usd")
	attrRunID      = attribute.Key("agentd.run.id")
	attrRunOutcome = attribute.Key("agentd.run.outcome")
	attrTenant     = attribute.Key("agentd.tenant")
	attrToolError  = attribute.Key("agentd.tool.is_error")
)

// tracer makes the spans of runs: invoke_agent for a run, chat {model}
// for each model call, execute_tool {name} for each tool call, with the
// OpenTelemetry GenAI semantic conventions' attributes. Message content
// is recorded only with capture.
type tracer struct {
	t       trace.Tracer
	capture bool
}

func newTracer(tp trace.TracerProvider, capture bool) tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tracer{t: tp.Tracer(tracerName), capture: capture}
}

// startRun starts a run's span below the span of the request that
// started it (ctx), and returns it.
func (tr tracer) startRun(ctx context.Context, r *Run, model provider.Model) trace.Span {
	_, span := tr.t.Start(ctx, "invoke_agent agentd", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		semconv.GenAIOperationNameInvokeAgent,
		semconv.GenAIAgentName("agentd"),
		semconv.GenAIConversationID(r.sessionID),
		semconv.GenAIProviderNameKey.String(model.Provider),
		semconv.GenAIRequestModel(model.ID),
		attrRunID.String(r.id),
		attrTenant.String(r.tenant),
	))
	return span
}

// endRun closes a run's span with its outcome and usage.
func endRunSpan(span trace.Span, end *agentdv1.AgentEnd) {
	if span == nil {
		return
	}
	u := end.GetUsage()
	span.SetAttributes(
		attrRunOutcome.String(strings.TrimPrefix(end.GetOutcome().String(), "RUN_OUTCOME_")),
		semconv.GenAIUsageInputTokens(int(u.GetInput())),
		semconv.GenAIUsageOutputTokens(int(u.GetOutput())),
		attrCostUSD.Float64(u.GetCost().GetTotal()),
	)
	switch end.GetOutcome() {
	case agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED, agentdv1.RunOutcome_RUN_OUTCOME_ABORTED:
	default:
		span.SetStatus(codes.Error, end.GetErrorMessage())
	}
	span.End()
}

// stream wraps a model stream function: each call is a chat span, ended
// with the answer's usage and finish reason when the stream ends.
func (tr tracer) stream(next provider.StreamFunc) provider.StreamFunc {
	return func(ctx context.Context, model provider.Model, c *agentdv1.Context, o provider.Options) provider.Stream {
		return func(yield func(provider.Event) bool) {
			ctx, span := tr.t.Start(ctx, "chat "+model.ID, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
				semconv.GenAIOperationNameChat,
				semconv.GenAIProviderNameKey.String(model.Provider),
				semconv.GenAIRequestModel(model.ID),
				semconv.GenAIConversationID(o.SessionID),
			))
			defer span.End()
			if tr.capture {
				span.SetAttributes(semconv.GenAIInputMessagesKey.String(jsonOf(&agentdv1.Context{SystemPrompt: c.GetSystemPrompt(), Messages: c.GetMessages()})))
			}
			for ev := range next(ctx, model, c, o) {
				if ev.Type == provider.EventDone || ev.Type == provider.EventError {
					tr.endChat(span, ev.Message)
				}
				if !yield(ev) {
					return
				}
			}
		}
	}
}

func (tr tracer) endChat(span trace.Span, m *agentdv1.AssistantMessage) {
	u := m.GetUsage()
	span.SetAttributes(
		semconv.GenAIResponseModel(m.GetModel()),
		semconv.GenAIResponseFinishReasons(strings.ToLower(strings.TrimPrefix(m.GetStopReason().String(), "STOP_REASON_"))),
		semconv.GenAIUsageInputTokens(int(u.GetInput())),
		semconv.GenAIUsageOutputTokens(int(u.GetOutput())),
		semconv.GenAIUsageCacheReadInputTokens(int(u.GetCacheRead())),
		semconv.GenAIUsageCacheCreationInputTokens(int(u.GetCacheWrite())),
		attrCostUSD.Float64(u.GetCost().GetTotal()),
	)
	if id := m.GetResponseId(); id != "" {
		span.SetAttributes(semconv.GenAIResponseID(id))
	}
	if tr.capture {
		span.SetAttributes(semconv.GenAIOutputMessagesKey.String(jsonOf(m)))
	}
	if m.GetStopReason() == agentdv1.StopReason_STOP_REASON_ERROR {
		span.SetStatus(codes.Error, m.GetErrorMessage())
	}
}

// tools wraps each tool so that its calls are execute_tool spans.
func (tr tracer) tools(list []agentloop.Tool) []agentloop.Tool {
	out := make([]agentloop.Tool, len(list))
	for i, t := range list {
		out[i] = tracedTool{Tool: t, tr: tr}
	}
	return out
}

// tracedTool is a tool whose calls are spans.
type tracedTool struct {
	agentloop.Tool
	tr tracer
}

// Execute implements [agentloop.Tool].
func (t tracedTool) Execute(ctx context.Context, call agentloop.Call) (agentloop.Result, error) {
	name := t.Definition().GetName()
	ctx, span := t.tr.t.Start(ctx, "execute_tool "+name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		semconv.GenAIOperationNameExecuteTool,
		semconv.GenAIToolName(name),
		semconv.GenAIToolCallID(call.ID),
		semconv.GenAIToolType("function"),
	))
	defer span.End()
	if t.tr.capture {
		span.SetAttributes(semconv.GenAIToolCallArgumentsKey.String(jsonOf(call.Args)))
	}
	res, err := t.Tool.Execute(ctx, call)
	switch {
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	case res.IsError:
		span.SetAttributes(attrToolError.Bool(true))
		span.SetStatus(codes.Error, "the tool returned an error result")
	}
	if t.tr.capture && err == nil {
		span.SetAttributes(semconv.GenAIToolCallResultKey.String(jsonOf(&agentdv1.ToolResultMessage{Content: res.Content, IsError: res.IsError})))
	}
	return res, err
}

// ReadOnly keeps a wrapped tool's nature for the approval defaults.
func (t tracedTool) ReadOnly() bool { return readOnly(t.Tool) }

// jsonOf is a message as JSON, for captured content.
func jsonOf(m proto.Message) string {
	b, err := protojson.Marshal(m)
	if err != nil {
		return fmt.Sprintf("(not encodable: %v)", err)
	}
	return string(b)
}
