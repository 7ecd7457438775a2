package uistream

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// projector turns a run's AgentEvents, in order from the first, into the
// parts of one protocol's stream. It keeps only what the events before
// told it, so the same events always give the same parts.
type projector interface {
	// project returns the parts of ev.
	project(ev *agentdv1.AgentEvent) []part
	// failed returns the parts that end a stream the server could not
	// continue (sent without an id: no event of the run made them).
	failed(err error) []part
}

// jsonOf is m in the proto3 JSON mapping (camelCase names), as the JSON
// clients of agentd see it everywhere.
func jsonOf(m proto.Message) json.RawMessage {
	if m == nil || !m.ProtoReflect().IsValid() {
		return json.RawMessage("null")
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// textOf is the text blocks of content, joined.
func textOf(content []*agentdv1.ContentBlock) string {
	var b strings.Builder
	for _, c := range content {
		b.WriteString(c.GetText().GetText())
	}
	return b.String()
}

// argumentsText is a tool call's arguments as JSON text.
func argumentsText(tc *agentdv1.ToolCall) string {
	if tc.GetArguments() == nil {
		return "{}"
	}
	return string(jsonOf(tc.GetArguments()))
}

// aguiProjector projects onto AG-UI events (the @ag-ui/core 1.0 names).
// Ids: an assistant message is "<run id>:<seq of its message_start>", its
// text and reasoning blocks "<message id>:<content index>".
type aguiProjector struct {
	threadID, runID string
	// running is whether a RUN_STARTED is open: an interrupt closes it
	// (RUN_FINISHED with the interrupt outcome), and the events after it
	// open the next run.
	running bool
	// step is the STEP_STARTED open ("" for none); suspended is the one
	// an interrupt closed, which the next run opens again.
	step, suspended string
	// message is the id of the assistant message streaming.
	message string
	// toolIDs maps a tool call block's content index to the id its
	// TOOL_CALL_START used.
	toolIDs map[uint32]string
	// messages are the run's messages so far, for MESSAGES_SNAPSHOT.
	messages []map[string]any
}

func newAGUIProjector() *aguiProjector { return &aguiProjector{toolIDs: map[uint32]string{}} }

func aguiEvent(typ string, ev *agentdv1.AgentEvent, fields map[string]any) map[string]any {
	fields["type"] = typ
	if t := ev.GetTime(); t != nil {
		fields["timestamp"] = t.AsTime().UnixMilli()
	}
	return fields
}

func (p *aguiProjector) runStarted(ev *agentdv1.AgentEvent) part {
	p.running = true
	return part{open: "run", data: aguiEvent("RUN_STARTED", ev, map[string]any{"threadId": p.threadID, "runId": p.runID})}
}

func (p *aguiProjector) project(ev *agentdv1.AgentEvent) []part {
	p.threadID, p.runID = ev.GetSessionId(), ev.GetRunId()
	var out []part
	add := func(typ string, fields map[string]any) *part {
		out = append(out, part{data: aguiEvent(typ, ev, fields)})
		return &out[len(out)-1]
	}
	// An event after an interrupt opens the next run (and the step the
	// interrupt closed), unless it shows nothing.
	before := *p
	if _, start := ev.GetEvent().(*agentdv1.AgentEvent_AgentStart); !p.running && !start {
		out = append(out, p.runStarted(ev))
		if p.suspended != "" {
			out = append(out, p.stepStarted(ev, p.suspended))
			p.suspended = ""
		}
	}
	opened := len(out)
	switch e := ev.GetEvent().(type) {
	case *agentdv1.AgentEvent_AgentStart:
		out = append(out, p.runStarted(ev))
		add("STATE_SNAPSHOT", map[string]any{"snapshot": map[string]any{"sessionId": p.threadID, "runId": p.runID, "metadata": e.AgentStart.GetMetadata()}})
	case *agentdv1.AgentEvent_TurnStart:
		out = append(out, p.stepStarted(ev, fmt.Sprintf("turn %d", e.TurnStart.GetTurn())))
	case *agentdv1.AgentEvent_TurnEnd:
		if p.step != "" {
			out = append(out, p.stepFinished(ev))
		}
	case *agentdv1.AgentEvent_MessageStart:
		if e.MessageStart.GetMessage().GetAssistant() != nil {
			p.message = fmt.Sprintf("%s:%d", p.runID, ev.GetSeq())
			clear(p.toolIDs)
		}
	case *agentdv1.AgentEvent_MessageUpdate:
		p.update(e.MessageUpdate, add)
	case *agentdv1.AgentEvent_MessageEnd:
		p.record(e.MessageEnd)
	case *agentdv1.AgentEvent_ToolExecutionUpdate:
		u := e.ToolExecutionUpdate
		add("CUSTOM", map[string]any{"name": "agentd.tool_progress", "value": map[string]any{
			"toolCallId": u.GetToolCallId(), "toolName": u.GetToolName(), "text": textOf(u.GetContent()), "details": jsonOf(u.GetDetails())}})
	case *agentdv1.AgentEvent_ToolExecutionEnd:
		r := e.ToolExecutionEnd.GetResult()
		add("TOOL_CALL_RESULT", map[string]any{"messageId": fmt.Sprintf("%s:%d", p.runID, ev.GetSeq()), "toolCallId": r.GetToolCallId(),
			"content": textOf(r.GetContent()), "role": "tool"})
	case *agentdv1.AgentEvent_ApprovalRequested:
		a := e.ApprovalRequested
		out = append(out, p.interrupted(ev, interrupt{kindApproval, p.runID, ev.GetSeq(), a.GetToolCallId()}, a.GetToolCallId(),
			fmt.Sprintf("approve the call of %s", a.GetToolName()), a.GetDeadline().AsTime(), jsonOf(a))...)
	case *agentdv1.AgentEvent_ToolCallRequested:
		c := e.ToolCallRequested
		out = append(out, p.interrupted(ev, interrupt{kindClientTool, p.runID, ev.GetSeq(), c.GetToolCallId()}, c.GetToolCallId(),
			fmt.Sprintf("run the client tool %s and send its result", c.GetToolName()), c.GetDeadline().AsTime(), jsonOf(c))...)
	case *agentdv1.AgentEvent_HookRequested:
		h := e.HookRequested
		out = append(out, p.interrupted(ev, interrupt{kindHook, p.runID, ev.GetSeq(), h.GetRequestId()}, h.GetToolCall().GetId(),
			fmt.Sprintf("decide the hook %s at %s", h.GetHook(), h.GetEvent()), h.GetDeadline().AsTime(), jsonOf(h))...)
	case *agentdv1.AgentEvent_Error:
		add("CUSTOM", map[string]any{"name": "agentd.error", "value": jsonOf(e.Error)})
	case *agentdv1.AgentEvent_QueueUpdate:
		add("CUSTOM", map[string]any{"name": "agentd.queue_update", "value": jsonOf(e.QueueUpdate)})
	case *agentdv1.AgentEvent_CompactionStart:
		add("CUSTOM", map[string]any{"name": "agentd.compaction_start", "value": jsonOf(e.CompactionStart)})
	case *agentdv1.AgentEvent_CompactionEnd:
		add("CUSTOM", map[string]any{"name": "agentd.compaction_end", "value": jsonOf(e.CompactionEnd)})
	case *agentdv1.AgentEvent_AgentEnd:
		out = append(out, p.ended(ev, e.AgentEnd)...)
	}
	if opened > 0 && len(out) == opened {
		p.running, p.step, p.suspended = before.running, before.step, before.suspended
		return nil
	}
	return out
}

func (p *aguiProjector) stepStarted(ev *agentdv1.AgentEvent, name string) part {
	p.step = name
	return part{open: "step", data: aguiEvent("STEP_STARTED", ev, map[string]any{"stepName": name})}
}

func (p *aguiProjector) stepFinished(ev *agentdv1.AgentEvent) part {
	name := p.step
	p.step = ""
	return part{close: "step", data: aguiEvent("STEP_FINISHED", ev, map[string]any{"stepName": name})}
}

// update projects a piece of the assistant message.
func (p *aguiProjector) update(u *agentdv1.MessageUpdate, add func(string, map[string]any) *part) {
	block := func(i uint32) string { return fmt.Sprintf("%s:%d", p.message, i) }
	switch d := u.GetDelta().(type) {
	case *agentdv1.MessageUpdate_TextStart:
		id := block(d.TextStart.GetContentIndex())
		add("TEXT_MESSAGE_START", map[string]any{"messageId": id, "role": "assistant"}).open = "text:" + id
	case *agentdv1.MessageUpdate_TextDelta:
		if d.TextDelta.GetDelta() != "" {
			add("TEXT_MESSAGE_CONTENT", map[string]any{"messageId": block(d.TextDelta.GetContentIndex()), "delta": d.TextDelta.GetDelta()})
		}
	case *agentdv1.MessageUpdate_TextEnd:
		id := block(d.TextEnd.GetContentIndex())
		add("TEXT_MESSAGE_END", map[string]any{"messageId": id}).close = "text:" + id
	case *agentdv1.MessageUpdate_ThinkingStart:
		id := block(d.ThinkingStart.GetContentIndex())
		add("REASONING_START", map[string]any{"messageId": id}).open = "reasoning:" + id
		add("REASONING_MESSAGE_START", map[string]any{"messageId": id, "role": "reasoning"}).open = "reasoning-message:" + id
	case *agentdv1.MessageUpdate_ThinkingDelta:
		if d.ThinkingDelta.GetDelta() != "" {
			add("REASONING_MESSAGE_CONTENT", map[string]any{"messageId": block(d.ThinkingDelta.GetContentIndex()), "delta": d.ThinkingDelta.GetDelta()})
		}
	case *agentdv1.MessageUpdate_ThinkingEnd:
		id := block(d.ThinkingEnd.GetContentIndex())
		add("REASONING_MESSAGE_END", map[string]any{"messageId": id}).close = "reasoning-message:" + id
		if sig := d.ThinkingEnd.GetThinkingSignature(); sig != "" {
			add("REASONING_ENCRYPTED_VALUE", map[string]any{"subtype": "message", "entityId": id, "encryptedValue": sig})
		}
		add("REASONING_END", map[string]any{"messageId": id}).close = "reasoning:" + id
	case *agentdv1.MessageUpdate_ToolCallStart:
		s := d.ToolCallStart
		id := s.GetId()
		if id == "" {
			id = block(s.GetContentIndex()) // the provider names the call only at its end
		}
		p.toolIDs[s.GetContentIndex()] = id
		add("TOOL_CALL_START", map[string]any{"toolCallId": id, "toolCallName": s.GetName(), "parentMessageId": p.message}).open = "tool:" + id
	case *agentdv1.MessageUpdate_ToolCallDelta:
		if d.ToolCallDelta.GetDelta() != "" {
			add("TOOL_CALL_ARGS", map[string]any{"toolCallId": p.toolIDs[d.ToolCallDelta.GetContentIndex()], "delta": d.ToolCallDelta.GetDelta()})
		}
	case *agentdv1.MessageUpdate_ToolCallEnd:
		id := p.toolIDs[d.ToolCallEnd.GetContentIndex()]
		add("TOOL_CALL_END", map[string]any{"toolCallId": id}).close = "tool:" + id
	}
}

// record keeps a finished message for MESSAGES_SNAPSHOT, as an AG-UI
// message.
func (p *aguiProjector) record(end *agentdv1.MessageEnd) {
	id := end.GetEntryId()
	m := end.GetMessage()
	switch {
	case m.GetUser() != nil:
		p.messages = append(p.messages, map[string]any{"id": id, "role": "user", "content": textOf(m.GetUser().GetContent())})
	case m.GetAssistant() != nil:
		msg := map[string]any{"id": id, "role": "assistant", "content": textOf(m.GetAssistant().GetContent())}
		var calls []map[string]any
		for _, c := range m.GetAssistant().GetContent() {
			if tc := c.GetToolCall(); tc != nil {
				calls = append(calls, map[string]any{"id": tc.GetId(), "type": "function",
					"function": map[string]any{"name": tc.GetName(), "arguments": argumentsText(tc)}})
			}
		}
		if calls != nil {
			msg["toolCalls"] = calls
		}
		p.messages = append(p.messages, msg)
	case m.GetToolResult() != nil:
		r := m.GetToolResult()
		msg := map[string]any{"id": id, "role": "tool", "toolCallId": r.GetToolCallId(), "content": textOf(r.GetContent())}
		if r.GetIsError() {
			msg["error"] = textOf(r.GetContent())
		}
		p.messages = append(p.messages, msg)
	}
}

// interrupted closes the run with an interrupt outcome: the client
// answers it by starting a run whose resume entries carry the payload
// (see resumeEntry); the interrupt's metadata holds the agentd event.
func (p *aguiProjector) interrupted(ev *agentdv1.AgentEvent, in interrupt, toolCallID, message string, deadline time.Time, detail json.RawMessage) []part {
	p.running = false
	var out []part
	if p.step != "" {
		// AG-UI closes a run's steps before it finishes; the run that
		// resumes opens the step again.
		p.suspended = p.step
		out = append(out, p.stepFinished(ev))
	}
	it := map[string]any{"id": in.id(), "reason": in.kind, "message": message, "metadata": map[string]any{"agentd": detail}}
	if toolCallID != "" {
		it["toolCallId"] = toolCallID
	}
	if !deadline.IsZero() && deadline.Unix() > 0 {
		it["expiresAt"] = deadline.UTC().Format(time.RFC3339Nano)
	}
	return append(out, part{close: "run", final: true, data: aguiEvent("RUN_FINISHED", ev, map[string]any{"threadId": p.threadID, "runId": p.runID,
		"outcome": map[string]any{"type": "interrupt", "interrupts": []any{it}}})})
}

// ended closes the run: the messages it added, then how it ended.
func (p *aguiProjector) ended(ev *agentdv1.AgentEvent, end *agentdv1.AgentEnd) []part {
	p.running = false
	var out []part
	if p.step != "" {
		out = append(out, p.stepFinished(ev))
	}
	messages := p.messages
	if messages == nil {
		messages = []map[string]any{}
	}
	out = append(out, part{data: aguiEvent("MESSAGES_SNAPSHOT", ev, map[string]any{"messages": messages})})
	var usage []any
	if u := end.GetUsage(); u != nil {
		usage = []any{map[string]any{"inputTokens": u.GetInput() + u.GetCacheRead() + u.GetCacheWrite(), "outputTokens": u.GetOutput(),
			"totalTokens": u.GetInput() + u.GetCacheRead() + u.GetCacheWrite() + u.GetOutput(), "cachedInputTokens": u.GetCacheRead(), "cacheWriteInputTokens": u.GetCacheWrite()}}
	}
	switch end.GetOutcome() {
	case agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED:
		fields := map[string]any{"threadId": p.threadID, "runId": p.runID, "outcome": map[string]any{"type": "success"}}
		if end.GetStructuredOutput() != nil {
			fields["result"] = jsonOf(end.GetStructuredOutput())
		}
		if usage != nil {
			fields["usage"] = usage
		}
		out = append(out, part{close: "run", final: true, data: aguiEvent("RUN_FINISHED", ev, fields)})
	case agentdv1.RunOutcome_RUN_OUTCOME_ABORTED:
		out = append(out, part{close: "run", final: true, data: aguiEvent("RUN_FINISHED", ev, map[string]any{"threadId": p.threadID, "runId": p.runID,
			"outcome": map[string]any{"type": "cancelled"}})})
	default:
		fields := map[string]any{"message": end.GetErrorMessage(), "code": end.GetOutcome().String()}
		if fields["message"] == "" {
			fields["message"] = "the run ended with " + end.GetOutcome().String()
		}
		if usage != nil {
			fields["usage"] = usage
		}
		out = append(out, part{close: "run", final: true, data: aguiEvent("RUN_ERROR", ev, fields)})
	}
	return out
}

func (p *aguiProjector) failed(err error) []part {
	return []part{{final: true, data: map[string]any{"type": "RUN_ERROR", "message": err.Error(), "code": "STREAM_FAILED"}}}
}
