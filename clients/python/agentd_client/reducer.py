"""The UI reducer of the seed (§15–16): AgentEvent → ChatItem list.

A streaming assistant message is one card whose text grows in place; tool
cards go running → success | error; approval items appear pending and resolve
when the ApprovalNotice arrives; a hook's decision (HookNotice) is a card of
its own. Drafts and collapsed cards live in UiState,
outside both the items and the transcript, so nothing about the screen can
reach the model. Every function is pure: states are frozen dataclasses and
tuples, and a reduction returns a new state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Iterable, Tuple, Union

from google.protobuf import json_format

from agentd.v1 import agent_messages_pb2, content_pb2, events_pb2


@dataclass(frozen=True)
class UserItem:
    """A user message card."""
    id: str
    entry_id: str
    text: str
    kind: str = "user"


@dataclass(frozen=True)
class AssistantItem:
    """An assistant answer card; is_streaming while deltas arrive."""
    id: str
    entry_id: str
    text: str
    thinking: str
    is_streaming: bool
    error: str = ""
    kind: str = "assistant"


@dataclass(frozen=True)
class ToolItem:
    """A tool call card: state is running, success or error."""
    id: str
    entry_id: str
    tool_call_id: str
    label: str
    state: str
    output: str = ""
    kind: str = "tool"


@dataclass(frozen=True)
class ApprovalItem:
    """An approval request: decision is pending, allowed, denied or timed_out."""
    id: str
    tool_call_id: str
    label: str
    decision: str
    decided_by: str = ""
    reason: str = ""
    kind: str = "approval"


@dataclass(frozen=True)
class CompactionItem:
    """The older conversation was summarized; the model sees the summary from here on.

    state is running, done or failed; reason is manual, threshold, overflow or unknown.
    """
    id: str
    entry_id: str
    state: str
    reason: str
    tokens_before: int = 0
    tokens_after: int = 0
    summary: str = ""
    error: str = ""
    kind: str = "compaction"


@dataclass(frozen=True)
class HookItem:
    """A lifecycle hook changed or refused something (a HookNotice).

    event is pre_tool_use, post_tool_use, user_prompt, stop or pre_compact;
    action is denied, arguments_replaced, result_replaced, result_redacted,
    context_added, continued, instructions_supplied or timed_out (unknown
    for a value this client does not know). entry_id is empty until the
    notice's message_end; decided_by is "timeout" when nobody answered.
    """
    id: str
    entry_id: str
    request_id: str
    event: str
    hook: str
    action: str
    reason: str = ""
    decided_by: str = ""
    tool_call_id: str = ""
    tool_name: str = ""
    kind: str = "hook"


ChatItem = Union[UserItem, AssistantItem, ToolItem, ApprovalItem, CompactionItem, HookItem]


def _enum_word(enum, value: int, prefix: str) -> str:
    """A protobuf enum value as the reducer's word: HOOK_ACTION_DENIED → denied."""
    try:
        name = enum.Name(value)
    except ValueError:
        return "unknown"
    return "unknown" if name.endswith("_UNSPECIFIED") else name[len(prefix):].lower()

_REASONS = {
    agent_messages_pb2.COMPACTION_REASON_MANUAL: "manual",
    agent_messages_pb2.COMPACTION_REASON_THRESHOLD: "threshold",
    agent_messages_pb2.COMPACTION_REASON_OVERFLOW: "overflow",
}


@dataclass(frozen=True)
class ChatState:
    """The items, the assistant card being streamed and the open message card."""
    items: Tuple[ChatItem, ...] = ()
    streaming_id: str = ""
    open_id: str = ""


_DECISIONS = {
    agent_messages_pb2.APPROVAL_DECISION_ALLOWED: "allowed",
    agent_messages_pb2.APPROVAL_DECISION_DENIED: "denied",
    agent_messages_pb2.APPROVAL_DECISION_TIMED_OUT: "timed_out",
}


def text_of(content: Iterable[content_pb2.ContentBlock]) -> str:
    """The concatenated text blocks of a message's content."""
    parts = []
    for block in content:
        kind = block.WhichOneof("block")
        if kind == "text":
            parts.append(block.text.text)
        elif kind == "image":
            parts.append("[image]")
    return "".join(parts)


def _thinking_of(content: Iterable[content_pb2.ContentBlock]) -> str:
    return "".join(b.thinking.thinking for b in content if b.WhichOneof("block") == "thinking")


def _label(name: str, args) -> str:
    text = json.dumps(json_format.MessageToDict(args), ensure_ascii=False, separators=(",", ":"))
    return f"{name} {text if len(text) <= 80 else text[:77] + '...'}"


def _update(state: ChatState, item_id: str, change) -> ChatState:
    for i, item in enumerate(state.items):
        if item.id == item_id:
            return replace(state, items=state.items[:i] + (change(item),) + state.items[i + 1:])
    return state


def _find_tool(state: ChatState, tool_call_id: str):
    return next((it for it in state.items if isinstance(it, ToolItem) and it.tool_call_id == tool_call_id), None)


def _finish_tool(state: ChatState, result, entry_id: str, key: str) -> ChatState:
    def done(it: ToolItem) -> ToolItem:
        return replace(it, state="error" if result.is_error else "success", output=text_of(result.content),
                       entry_id=entry_id or it.entry_id)
    card = _find_tool(state, result.tool_call_id)
    if card is not None:
        return _update(state, card.id, done)
    new = ToolItem(id=key, entry_id="", tool_call_id=result.tool_call_id, label=result.tool_name, state="running")
    return replace(state, items=state.items + (done(new),))


def _resolve_approval(state: ChatState, notice, key: str) -> ChatState:
    decision = _DECISIONS.get(notice.decision, "pending")
    for it in state.items:
        if isinstance(it, ApprovalItem) and it.tool_call_id == notice.tool_call_id:
            return _update(state, it.id, lambda a: replace(a, decision=decision, decided_by=notice.decided_by,
                                                           reason=notice.reason))
    if not notice.visible_in_ui:
        return state
    item = ApprovalItem(id=key, tool_call_id=notice.tool_call_id, label=notice.tool_name, decision=decision,
                        decided_by=notice.decided_by, reason=notice.reason)
    return replace(state, items=state.items + (item,))


def _add_hook_notice(state: ChatState, notice, entry_id: str, key: str) -> ChatState:
    """Shows a HookNotice once: message_start adds the card, message_end gives it its entry id."""
    if not notice.visible_in_ui:
        return state
    for it in state.items:
        if isinstance(it, HookItem) and it.request_id and it.request_id == notice.request_id:
            return _update(state, it.id, lambda h: replace(h, entry_id=entry_id)) if entry_id else state
    item = HookItem(id=key, entry_id=entry_id, request_id=notice.request_id,
                    event=_enum_word(agent_messages_pb2.HookEvent, notice.event, "HOOK_EVENT_"), hook=notice.hook,
                    action=_enum_word(agent_messages_pb2.HookAction, notice.action, "HOOK_ACTION_"),
                    reason=notice.reason, decided_by=notice.decided_by, tool_call_id=notice.tool_call_id,
                    tool_name=notice.tool_name)
    return replace(state, items=state.items + (item,))


def reduce_chat(state: ChatState, event: events_pb2.AgentEvent) -> ChatState:
    """Applies one event; irrelevant events return the same state."""
    key = f"{event.run_id}/{event.seq}"
    which = event.WhichOneof("event")
    if which == "message_start":
        msg = event.message_start.message
        kind = msg.WhichOneof("kind")
        if kind == "assistant":
            card = AssistantItem(id=key, entry_id="", text=text_of(msg.assistant.content), thinking="",
                                 is_streaming=True)
            return replace(state, items=state.items + (card,), streaming_id=key)
        if kind == "user":
            card = UserItem(id=key, entry_id="", text=text_of(msg.user.content))
            return replace(state, items=state.items + (card,), open_id=key)
        if kind == "tool_result":
            return _finish_tool(state, msg.tool_result, "", key)
        if kind == "approval_notice":
            return _resolve_approval(state, msg.approval_notice, key)
        if kind == "hook_notice":
            return _add_hook_notice(state, msg.hook_notice, "", key)
        return state
    if which == "message_update":
        delta = event.message_update
        piece = delta.WhichOneof("delta")
        if not state.streaming_id or piece not in ("text_delta", "thinking_delta"):
            return state
        if piece == "text_delta":
            return _update(state, state.streaming_id, lambda it: replace(it, text=it.text + delta.text_delta.delta))
        return _update(state, state.streaming_id,
                       lambda it: replace(it, thinking=it.thinking + delta.thinking_delta.delta))
    if which == "message_end":
        end = event.message_end
        msg = end.message
        kind = msg.WhichOneof("kind")
        if kind == "assistant":
            a = msg.assistant
            failed = a.stop_reason in (content_pb2.STOP_REASON_ERROR, content_pb2.STOP_REASON_ABORTED)

            def final(it: AssistantItem) -> AssistantItem:
                return replace(it, entry_id=end.entry_id, text=text_of(a.content), thinking=_thinking_of(a.content),
                               is_streaming=False, error=(a.error_message or "aborted") if failed else "")
            if not state.streaming_id:  # joined after message_start
                card = AssistantItem(id=key, entry_id="", text="", thinking="", is_streaming=True)
                return replace(state, items=state.items + (final(card),))
            return replace(_update(state, state.streaming_id, final), streaming_id="")
        if kind == "user":
            if not state.open_id:
                card = UserItem(id=key, entry_id=end.entry_id, text=text_of(msg.user.content))
                return replace(state, items=state.items + (card,))
            return replace(_update(state, state.open_id, lambda it: replace(it, entry_id=end.entry_id)), open_id="")
        if kind == "tool_result":
            return _finish_tool(state, msg.tool_result, end.entry_id, key)
        if kind == "approval_notice":
            return _resolve_approval(state, msg.approval_notice, key)
        if kind == "hook_notice":
            return _add_hook_notice(state, msg.hook_notice, end.entry_id, key)
        if kind == "compaction_summary":
            # A stored summary (a transcript being replayed, or AppendMessages).
            if any(isinstance(it, CompactionItem) and it.entry_id == end.entry_id for it in state.items):
                return state
            c = msg.compaction_summary
            card = CompactionItem(id=key, entry_id=end.entry_id, state="done", reason=_REASONS.get(c.reason, "unknown"),
                                  tokens_before=c.tokens_before, tokens_after=c.tokens_after, summary=c.summary)
            return replace(state, items=state.items + (card,))
        return state
    if which == "compaction_start":
        start = event.compaction_start
        card = CompactionItem(id=key, entry_id="", state="running", reason=_REASONS.get(start.reason, "unknown"),
                              tokens_before=start.tokens_before)
        return replace(state, items=state.items + (card,))
    if which == "compaction_end":
        end = event.compaction_end
        if end.dry_run:
            return state

        def done(it: CompactionItem) -> CompactionItem:
            return replace(it, entry_id=end.entry_id, state="failed" if end.error_message else "done",
                           tokens_after=end.tokens_after, summary=end.summary.summary, error=end.error_message)
        running = [it for it in state.items if isinstance(it, CompactionItem) and it.state == "running"]
        if running:
            return _update(state, running[-1].id, done)
        card = CompactionItem(id=key, entry_id="", state="running", reason=_REASONS.get(end.reason, "unknown"),
                              tokens_before=end.tokens_before)
        return replace(state, items=state.items + (done(card),))
    if which == "tool_execution_start":
        start = event.tool_execution_start
        label = _label(start.tool_name, start.arguments)
        if _find_tool(state, start.tool_call_id) is not None:
            card = _find_tool(state, start.tool_call_id)
            return _update(state, card.id, lambda it: replace(it, state="running", label=label))
        card = ToolItem(id=key, entry_id="", tool_call_id=start.tool_call_id, label=label, state="running")
        return replace(state, items=state.items + (card,))
    if which == "tool_execution_end":
        return _finish_tool(state, event.tool_execution_end.result, "", key)
    if which == "approval_requested":
        req = event.approval_requested
        if any(isinstance(it, ApprovalItem) and it.tool_call_id == req.tool_call_id for it in state.items):
            return state
        item = ApprovalItem(id=key, tool_call_id=req.tool_call_id, label=_label(req.tool_name, req.arguments),
                            decision="pending")
        return replace(state, items=state.items + (item,))
    if which == "agent_end" and state.streaming_id:
        # A run that ended mid-answer leaves no card spinning.
        return replace(_update(state, state.streaming_id, lambda it: replace(it, is_streaming=False)), streaming_id="")
    return state


def items_from_transcript(entries) -> Tuple[ChatItem, ...]:
    """Rebuilds the items of a stored transcript (GetTranscript).

    The messages are replayed through reduce_chat as the events a live run
    would have sent, so a reopened conversation looks like the watched one.
    """
    state = ChatState()
    seq = 0

    def emit(run_id: str, **event) -> None:
        nonlocal state, seq
        seq += 1
        state = reduce_chat(state, events_pb2.AgentEvent(run_id=run_id, seq=seq, **event))

    for entry in entries:
        if entry.WhichOneof("payload") != "message":
            continue
        msg = entry.message
        run_id = f"entry:{entry.id}"
        kind = msg.WhichOneof("kind")
        if kind == "tool_result":
            emit(run_id, tool_execution_end=events_pb2.ToolExecutionEnd(result=msg.tool_result))
        emit(run_id, message_start=events_pb2.MessageStart(message=msg))
        emit(run_id, message_end=events_pb2.MessageEnd(message=msg, entry_id=entry.id))
        if kind == "assistant":
            for block in msg.assistant.content:
                if block.WhichOneof("block") == "tool_call":
                    call = block.tool_call
                    emit(run_id, tool_execution_start=events_pb2.ToolExecutionStart(
                        tool_call_id=call.id, tool_name=call.name, arguments=call.arguments))
    return state.items


@dataclass(frozen=True)
class UiState:
    """Screen-only state: never part of the items or the transcript."""
    draft: str = ""
    collapsed: frozenset = field(default_factory=frozenset)


def set_draft(ui: UiState, draft: str) -> UiState:
    """ui with a new composer draft."""
    return replace(ui, draft=draft)


def toggle_collapsed(ui: UiState, item_id: str) -> UiState:
    """ui with the card's collapsed flag flipped."""
    return replace(ui, collapsed=ui.collapsed ^ {item_id})


@dataclass(frozen=True)
class Conversation:
    """The seed's DesktopConversationState, its three parts kept apart.

    transcript holds the committed messages (what the model builds on), chat
    the items (what the screen shows), ui what only the screen knows.
    """
    transcript: Tuple[agent_messages_pb2.AgentMessage, ...] = ()
    chat: ChatState = field(default_factory=ChatState)
    ui: UiState = field(default_factory=UiState)


def apply_event(conv: Conversation, event: events_pb2.AgentEvent) -> Conversation:
    """Committed messages join the transcript; ui is never touched."""
    chat = reduce_chat(conv.chat, event)
    transcript = conv.transcript
    if event.WhichOneof("event") == "message_end":
        transcript = transcript + (event.message_end.message,)
    if chat is conv.chat and transcript is conv.transcript:
        return conv
    return replace(conv, chat=chat, transcript=transcript)
