"""Lifecycle hooks from the app's side.

A session that declares hooks (``SessionConfig.hooks``) stops at each
matching point of a run, emits hook_requested and waits for SubmitHookResult.
``on_pre_tool_use(fn)`` and its siblings turn a plain (or async) function into
a HookHandler for one event; ``AgentdClient.handle(..., hooks=[...])`` watches
the run's stream, picks the handler of each request's event and answers with
what the function returns: ``allow()``, ``deny(reason)``, ``modify(...)`` or
``redact()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional, Sequence, Union

from google.protobuf import json_format

from agentd.v1 import agent_messages_pb2, events_pb2, service_pb2

from agentd_client.reducer import text_of

class _Keep:
    """The type of KEEP."""

    def __repr__(self) -> str:
        return "KEEP"


#: Passed as ``details`` to ``modify`` by default: keep the result's details.
KEEP = _Keep()


@dataclass(frozen=True)
class HookAnswer:
    """A client's answer to one hook_requested event.

    Which verdicts and fields an event accepts is in HookEvent's
    documentation; agentd refuses the others with the field named. Build one
    with allow, deny, modify or redact.
    """

    #: A ``service_pb2.HookVerdict`` value.
    verdict: int
    #: Why; the model sees it on a denied tool call and the HookNotice records it.
    reason: str = ""
    #: PRE_TOOL_USE modify: the arguments the call runs with instead (validated).
    arguments: Optional[dict] = None
    #: POST_TOOL_USE modify: the result the model sees instead; USER_PROMPT:
    #: content added to this run's model calls; STOP: the user message the run
    #: continues with. Text or content blocks.
    content: Any = None
    #: POST_TOOL_USE modify: the details UIs see instead (plain JSON; None
    #: removes them); KEEP leaves them as they are.
    details: Any = KEEP
    #: PRE_COMPACT modify: the summarizer's instructions.
    instructions: str = ""
    #: Whether the model sees the HookNotice this decision records.
    include_in_model_context: bool = False
    #: Who decided, recorded in the HookNotice.
    decided_by: str = ""


def allow(*, include_in_model_context: bool = False, decided_by: str = "") -> HookAnswer:
    """Go on unchanged."""
    return HookAnswer(service_pb2.HOOK_VERDICT_ALLOW, include_in_model_context=include_in_model_context,
                      decided_by=decided_by)


def deny(reason: str = "", *, include_in_model_context: bool = False, decided_by: str = "") -> HookAnswer:
    """Refuse the tool call, the prompt or the compaction; a tool call's model sees the reason."""
    return HookAnswer(service_pb2.HOOK_VERDICT_DENY, reason=reason, include_in_model_context=include_in_model_context,
                      decided_by=decided_by)


def modify(*, arguments: Optional[dict] = None, content: Any = None, details: Any = KEEP, instructions: str = "",
           reason: str = "", include_in_model_context: bool = False, decided_by: str = "") -> HookAnswer:
    """Change what the event allows: arguments, content (and details), or instructions."""
    return HookAnswer(service_pb2.HOOK_VERDICT_MODIFY, reason=reason, arguments=arguments, content=content,
                      details=details, instructions=instructions,
                      include_in_model_context=include_in_model_context, decided_by=decided_by)


def redact(reason: str = "", *, include_in_model_context: bool = False, decided_by: str = "") -> HookAnswer:
    """POST_TOOL_USE: hide the result from the model (it sees "[redacted by hook]")."""
    return HookAnswer(service_pb2.HOOK_VERDICT_REDACT, reason=reason, include_in_model_context=include_in_model_context,
                      decided_by=decided_by)


Answer = Union[HookAnswer, Awaitable[HookAnswer]]


@dataclass(frozen=True)
class HookHandler:
    """Answers the hook_requested events of one event.

    handle() asks the first handler whose event (and hook name, when set)
    matches a request; a request no handler matches stays unanswered until its
    hook times out. An exception leaves the request unanswered (its
    on_timeout rule decides) and ends handle()'s iteration.
    """

    #: An ``agent_messages_pb2.HookEvent`` value.
    event: int
    #: Decides one request: ``answer(request: HookRequested) -> HookAnswer``.
    answer: Callable[[events_pb2.HookRequested], Answer]
    #: Only the requests of the hook of this name (Hook.name, or "hooks[<index>]").
    hook: Optional[str] = None

    def matches(self, request: events_pb2.HookRequested) -> bool:
        """True when this handler answers request."""
        return request.event == self.event and (not self.hook or self.hook == request.hook)


def on_pre_tool_use(fn: Callable[[dict, events_pb2.HookRequested], Answer], *, hook: Optional[str] = None) -> HookHandler:
    """PRE_TOOL_USE: before a tool call runs (arguments validated, before approval).

    ``fn(arguments: dict, request)`` (request.tool_call has the call's id and
    name) allows, denies with a reason the model sees, or modifies
    ``arguments``.
    """
    return HookHandler(agent_messages_pb2.HOOK_EVENT_PRE_TOOL_USE,
                       lambda req: fn(json_format.MessageToDict(req.tool_call.arguments), req), hook)


def on_post_tool_use(fn: Callable[[Any, events_pb2.HookRequested], Answer], *, hook: Optional[str] = None) -> HookHandler:
    """POST_TOOL_USE: after a call ran, before the model sees its result.

    ``fn(result: ToolResultMessage, request)`` allows (keep), modifies
    ``content`` and/or ``details``, or redacts.
    """
    return HookHandler(agent_messages_pb2.HOOK_EVENT_POST_TOOL_USE, lambda req: fn(req.tool_result, req), hook)


def on_user_prompt(fn: Callable[[str, events_pb2.HookRequested], Answer], *, hook: Optional[str] = None) -> HookHandler:
    """USER_PROMPT: before a prompt, steering or follow-up message is stored.

    ``fn(text, request)`` (request.source says which) allows, denies (the
    Prompt fails with PROMPT_REFUSED; nothing is stored), or modifies with
    ``content`` added to this run's model calls.
    """
    return HookHandler(agent_messages_pb2.HOOK_EVENT_USER_PROMPT, lambda req: fn(_message_text(req), req), hook)


def on_stop(fn: Callable[[str, events_pb2.HookRequested], Answer], *, hook: Optional[str] = None) -> HookHandler:
    """STOP: when the run would end normally.

    ``fn(answer_text, request)`` (request.continuations counts the earlier
    continuations) allows the end, or modifies with ``content``, the user
    message the run continues with.
    """
    return HookHandler(agent_messages_pb2.HOOK_EVENT_STOP, lambda req: fn(_message_text(req), req), hook)


def on_pre_compact(fn: Callable[[str, events_pb2.HookRequested], Answer], *, hook: Optional[str] = None) -> HookHandler:
    """PRE_COMPACT: before a compaction (automatic or Compact).

    ``fn(instructions, request)`` (request.compaction_reason,
    request.tokens_before) allows, denies (vetoes), or modifies
    ``instructions``.
    """
    return HookHandler(agent_messages_pb2.HOOK_EVENT_PRE_COMPACT, lambda req: fn(req.instructions, req), hook)


def handler_for(handlers: Sequence[HookHandler], request: events_pb2.HookRequested) -> Optional[HookHandler]:
    """The first of handlers that answers request, or None."""
    return next((h for h in handlers if h.matches(request)), None)


def _message_text(request: events_pb2.HookRequested) -> str:
    kind = request.message.WhichOneof("kind")
    if kind in ("user", "assistant"):
        return text_of(getattr(request.message, kind).content)
    return ""


__all__ = ("HookAnswer", "HookHandler", "KEEP", "allow", "deny", "handler_for", "modify", "on_post_tool_use",
           "on_pre_compact", "on_pre_tool_use", "on_stop", "on_user_prompt", "redact")
