package uistream

import (
	"encoding/json"
	"fmt"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
)

// aisdkProjector projects onto the AI SDK's UI message stream (protocol
// v1 of the ai package): one assistant UI message per run, whose id is the
// run's id, a step per turn. Text and reasoning parts are
// "<seq of the message_start>:<content index>".
type aisdkProjector struct {
	sessionID, runID string
	// started is whether a "start" is open: an interrupt finishes the
	// message, and the events after it start it again (same id).
	started bool
	// step is whether a start-step is open.
	step bool
	// message is the seq of the assistant message streaming.
	message uint64
	// toolIDs maps a tool call block's content index to its id.
	toolIDs   map[uint32]string
	toolNames map[uint32]string
}

func newAISDKProjector() *aisdkProjector {
	return &aisdkProjector{toolIDs: map[uint32]string{}, toolNames: map[uint32]string{}}
}

func chunk(typ string, fields map[string]any) map[string]any {
	fields["type"] = typ
	return fields
}

// metadata is the messageMetadata of the run's message.
func (p *aisdkProjector) metadata(extra map[string]any) map[string]any {
	m := map[string]any{"sessionId": p.sessionID, "runId": p.runID}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func (p *aisdkProjector) project(ev *agentdv1.AgentEvent) []part {
	p.sessionID, p.runID = ev.GetSessionId(), ev.GetRunId()
	var out []part
	add := func(typ string, fields map[string]any) *part {
		out = append(out, part{data: chunk(typ, fields)})
		return &out[len(out)-1]
	}
	open := func(metadata map[string]any) {
		if !p.started {
			p.started = true
			add("start", map[string]any{"messageId": p.runID, "messageMetadata": p.metadata(metadata)}).open = "message"
		}
	}
	switch e := ev.GetEvent().(type) {
	case *agentdv1.AgentEvent_AgentStart:
		open(map[string]any{"metadata": e.AgentStart.GetMetadata()})
	case *agentdv1.AgentEvent_TurnStart:
		open(nil)
		p.step = true
		add("start-step", map[string]any{}).open = "step"
	case *agentdv1.AgentEvent_TurnEnd:
		if p.step {
			p.step = false
			add("finish-step", map[string]any{}).close = "step"
		}
	case *agentdv1.AgentEvent_MessageStart:
		if e.MessageStart.GetMessage().GetAssistant() != nil {
			p.message = ev.GetSeq()
			clear(p.toolIDs)
			clear(p.toolNames)
		}
	case *agentdv1.AgentEvent_MessageUpdate:
		open(nil)
		p.update(e.MessageUpdate, add)
	case *agentdv1.AgentEvent_ToolExecutionUpdate:
		open(nil)
		u := e.ToolExecutionUpdate
		add("tool-output-available", map[string]any{"toolCallId": u.GetToolCallId(), "preliminary": true,
			"output": map[string]any{"text": textOf(u.GetContent()), "details": jsonOf(u.GetDetails())}})
	case *agentdv1.AgentEvent_ToolExecutionEnd:
		open(nil)
		r := e.ToolExecutionEnd.GetResult()
		if r.GetIsError() {
			add("tool-output-error", map[string]any{"toolCallId": r.GetToolCallId(), "errorText": textOf(r.GetContent())})
		} else {
			add("tool-output-available", map[string]any{"toolCallId": r.GetToolCallId(),
				"output": map[string]any{"text": textOf(r.GetContent()), "details": jsonOf(r.GetDetails())}})
		}
	case *agentdv1.AgentEvent_ApprovalRequested:
		open(nil)
		a := e.ApprovalRequested
		in := interrupt{kindApproval, p.runID, ev.GetSeq(), a.GetToolCallId()}
		add("tool-approval-request", map[string]any{"approvalId": in.id(), "toolCallId": a.GetToolCallId()})
		out = append(out, p.interrupted(in, jsonOf(a))...)
	case *agentdv1.AgentEvent_ToolCallRequested:
		open(nil)
		c := e.ToolCallRequested
		out = append(out, p.interrupted(interrupt{kindClientTool, p.runID, ev.GetSeq(), c.GetToolCallId()}, jsonOf(c))...)
	case *agentdv1.AgentEvent_HookRequested:
		open(nil)
		h := e.HookRequested
		out = append(out, p.interrupted(interrupt{kindHook, p.runID, ev.GetSeq(), h.GetRequestId()}, jsonOf(h))...)
	case *agentdv1.AgentEvent_Error:
		open(nil)
		add("data-agentd-error", map[string]any{"data": jsonOf(e.Error), "transient": true})
	case *agentdv1.AgentEvent_QueueUpdate:
		open(nil)
		add("data-agentd-queue", map[string]any{"id": "queue", "data": jsonOf(e.QueueUpdate)})
	case *agentdv1.AgentEvent_CompactionStart:
		open(nil)
		add("data-agentd-compaction", map[string]any{"id": fmt.Sprintf("compaction:%d", ev.GetSeq()), "data": jsonOf(e.CompactionStart)})
	case *agentdv1.AgentEvent_CompactionEnd:
		open(nil)
		add("data-agentd-compaction", map[string]any{"id": fmt.Sprintf("compaction:%d", ev.GetSeq()), "data": jsonOf(e.CompactionEnd)})
	case *agentdv1.AgentEvent_AgentEnd:
		open(nil)
		out = append(out, p.ended(e.AgentEnd)...)
	}
	return out
}

func (p *aisdkProjector) update(u *agentdv1.MessageUpdate, add func(string, map[string]any) *part) {
	block := func(i uint32) string { return fmt.Sprintf("%d:%d", p.message, i) }
	switch d := u.GetDelta().(type) {
	case *agentdv1.MessageUpdate_TextStart:
		id := block(d.TextStart.GetContentIndex())
		add("text-start", map[string]any{"id": id}).open = "text:" + id
	case *agentdv1.MessageUpdate_TextDelta:
		add("text-delta", map[string]any{"id": block(d.TextDelta.GetContentIndex()), "delta": d.TextDelta.GetDelta()})
	case *agentdv1.MessageUpdate_TextEnd:
		id := block(d.TextEnd.GetContentIndex())
		add("text-end", map[string]any{"id": id}).close = "text:" + id
	case *agentdv1.MessageUpdate_ThinkingStart:
		id := block(d.ThinkingStart.GetContentIndex())
		add("reasoning-start", map[string]any{"id": id}).open = "reasoning:" + id
	case *agentdv1.MessageUpdate_ThinkingDelta:
		add("reasoning-delta", map[string]any{"id": block(d.ThinkingDelta.GetContentIndex()), "delta": d.ThinkingDelta.GetDelta()})
	case *agentdv1.MessageUpdate_ThinkingEnd:
		id := block(d.ThinkingEnd.GetContentIndex())
		add("reasoning-end", map[string]any{"id": id}).close = "reasoning:" + id
	case *agentdv1.MessageUpdate_ToolCallStart:
		s := d.ToolCallStart
		id := s.GetId()
		if id == "" {
			id = block(s.GetContentIndex()) // the provider names the call only at its end
		}
		p.toolIDs[s.GetContentIndex()], p.toolNames[s.GetContentIndex()] = id, s.GetName()
		add("tool-input-start", map[string]any{"toolCallId": id, "toolName": s.GetName()}).open = "tool:" + id
	case *agentdv1.MessageUpdate_ToolCallDelta:
		add("tool-input-delta", map[string]any{"toolCallId": p.toolIDs[d.ToolCallDelta.GetContentIndex()], "inputTextDelta": d.ToolCallDelta.GetDelta()})
	case *agentdv1.MessageUpdate_ToolCallEnd:
		i := d.ToolCallEnd.GetContentIndex()
		tc := d.ToolCallEnd.GetToolCall()
		add("tool-input-available", map[string]any{"toolCallId": p.toolIDs[i], "toolName": p.toolNames[i], "input": json.RawMessage(argumentsText(tc))}).close = "tool:" + p.toolIDs[i]
	}
}

// interrupted finishes the message where the run waits for the client:
// a data-agentd-interrupt part says what for and with which id to answer
// (see resumeEntry); the run goes on after the answer, and the stream of
// the request that carries it continues the same message.
func (p *aisdkProjector) interrupted(in interrupt, detail json.RawMessage) []part {
	var out []part
	if p.step {
		p.step = false
		out = append(out, part{close: "step", data: chunk("finish-step", map[string]any{})})
	}
	it := map[string]any{"id": in.id(), "kind": in.kind, "request": detail}
	p.started = false
	return append(out,
		part{data: chunk("data-agentd-interrupt", map[string]any{"id": in.id(), "data": it})},
		part{close: "message", final: true, data: chunk("finish", map[string]any{"finishReason": "tool-calls",
			"messageMetadata": p.metadata(map[string]any{"interrupt": it})})})
}

// ended finishes the message with the run's outcome in its metadata.
func (p *aisdkProjector) ended(end *agentdv1.AgentEnd) []part {
	var out []part
	if p.step {
		p.step = false
		out = append(out, part{close: "step", data: chunk("finish-step", map[string]any{})})
	}
	meta := p.metadata(map[string]any{"outcome": end.GetOutcome().String(), "usage": jsonOf(end.GetUsage()), "metadata": end.GetMetadata()})
	if end.GetStructuredOutput() != nil {
		meta["structuredOutput"] = jsonOf(end.GetStructuredOutput())
	}
	reason := "stop"
	switch end.GetOutcome() {
	case agentdv1.RunOutcome_RUN_OUTCOME_COMPLETED:
	case agentdv1.RunOutcome_RUN_OUTCOME_ABORTED:
		reason = "other"
		out = append(out, part{data: chunk("abort", map[string]any{"reason": end.GetErrorMessage()})})
	default:
		reason = "error"
		msg := end.GetErrorMessage()
		if msg == "" {
			msg = "the run ended with " + end.GetOutcome().String()
		}
		meta["errorMessage"] = msg
		out = append(out, part{data: chunk("error", map[string]any{"errorText": msg})})
	}
	p.started = false
	return append(out, part{close: "message", final: true, data: chunk("finish", map[string]any{"finishReason": reason, "messageMetadata": meta})})
}

func (p *aisdkProjector) failed(err error) []part {
	return []part{
		{data: chunk("error", map[string]any{"errorText": err.Error()})},
		{final: true, data: chunk("finish", map[string]any{"finishReason": "error", "messageMetadata": p.metadata(map[string]any{"errorMessage": err.Error()})})},
	}
}
