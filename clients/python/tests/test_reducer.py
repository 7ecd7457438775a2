"""Unit tests of the ChatItem reducer over hand-built event sequences."""

from __future__ import annotations

import dataclasses
import unittest

import agentd_client  # noqa: F401  (puts gen/python on the path)
from agentd.v1 import agent_messages_pb2, content_pb2, events_pb2, messages_pb2
from agentd_client import (
    ChatState,
    Conversation,
    HookItem,
    apply_event,
    items_from_transcript,
    reduce_chat,
    set_draft,
    toggle_collapsed,
)


def txt(t: str) -> content_pb2.ContentBlock:
    return content_pb2.ContentBlock(text=content_pb2.TextContent(text=t))


def run(*events: dict) -> list:
    return [events_pb2.AgentEvent(session_id="s", run_id="r", seq=i + 1, **e) for i, e in enumerate(events)]


def user(t: str) -> list:
    msg = agent_messages_pb2.AgentMessage(user=messages_pb2.UserMessage(content=[txt(t)]))
    return [dict(message_start=events_pb2.MessageStart(message=msg)),
            dict(message_end=events_pb2.MessageEnd(message=msg, entry_id=f"e-{t}"))]


ASSISTANT_START = dict(message_start=events_pb2.MessageStart(
    message=agent_messages_pb2.AgentMessage(assistant=messages_pb2.AssistantMessage())))


def delta(d: str) -> dict:
    return dict(message_update=events_pb2.MessageUpdate(text_delta=events_pb2.TextDelta(delta=d)))


def assistant_end(t: str, stop=content_pb2.STOP_REASON_STOP, error: str = "") -> dict:
    msg = agent_messages_pb2.AgentMessage(assistant=messages_pb2.AssistantMessage(
        content=[txt(t)], stop_reason=stop, error_message=error))
    return dict(message_end=events_pb2.MessageEnd(message=msg, entry_id="e-a"))


def reduce_all(events) -> ChatState:
    state = ChatState()
    for e in events:
        state = reduce_chat(state, e)
    return state


class ReduceChat(unittest.TestCase):
    def test_message_update_replaces_streaming_card_in_place(self) -> None:
        states, state = [], ChatState()
        for e in run(*user("hi"), ASSISTANT_START, delta("默认"), delta("端口"), assistant_end("默认端口")):
            state = reduce_chat(state, e)
            states.append([(it.kind, it.text, getattr(it, "is_streaming", None)) for it in state.items])
        self.assertEqual(states, [
            [("user", "hi", None)],
            [("user", "hi", None)],
            [("user", "hi", None), ("assistant", "", True)],
            [("user", "hi", None), ("assistant", "默认", True)],
            [("user", "hi", None), ("assistant", "默认端口", True)],
            [("user", "hi", None), ("assistant", "默认端口", False)],
        ])
        self.assertEqual(state.items[0].entry_id, "e-hi")

    def test_approval_item_appears_pending_and_resolves(self) -> None:
        for decision, want in [(agent_messages_pb2.APPROVAL_DECISION_ALLOWED, "allowed"),
                               (agent_messages_pb2.APPROVAL_DECISION_DENIED, "denied"),
                               (agent_messages_pb2.APPROVAL_DECISION_TIMED_OUT, "timed_out")]:
            with self.subTest(want=want):
                req = events_pb2.ApprovalRequested(tool_call_id="c1", tool_name="edit_file")
                req.arguments.update({"path": "a.ts"})
                notice = agent_messages_pb2.AgentMessage(approval_notice=agent_messages_pb2.ApprovalNotice(
                    tool_call_id="c1", tool_name="edit_file", decision=decision, decided_by="alice", reason="ok",
                    visible_in_ui=True))
                events = run(dict(approval_requested=req), dict(message_start=events_pb2.MessageStart(message=notice)),
                             dict(message_end=events_pb2.MessageEnd(message=notice, entry_id="e-n")))
                pending = reduce_chat(ChatState(), events[0])
                self.assertEqual([(it.label, it.decision) for it in pending.items],
                                 [('edit_file {"path":"a.ts"}', "pending")])
                done = reduce_all(events)
                self.assertEqual([(it.decision, it.decided_by, it.reason) for it in done.items],
                                 [(want, "alice", "ok")], "the notice resolves the item instead of adding one")

    def test_tool_card_running_then_success(self) -> None:
        result = messages_pb2.ToolResultMessage(tool_call_id="c1", tool_name="read_file", content=[txt("port: 3000")])
        start = events_pb2.ToolExecutionStart(tool_call_id="c1", tool_name="read_file")
        start.arguments.update({"path": "src/config.ts"})
        msg = agent_messages_pb2.AgentMessage(tool_result=result)
        events = run(dict(tool_execution_start=start), dict(tool_execution_end=events_pb2.ToolExecutionEnd(result=result)),
                     dict(message_start=events_pb2.MessageStart(message=msg)),
                     dict(message_end=events_pb2.MessageEnd(message=msg, entry_id="e-t")))
        self.assertEqual([[it.state for it in reduce_all(events[:i + 1]).items] for i in range(len(events))],
                         [["running"], ["success"], ["success"], ["success"]])
        card = reduce_all(events).items[0]
        self.assertEqual((card.output, card.entry_id), ("port: 3000", "e-t"))

    def test_failed_answer_and_cut_run_leave_no_card_streaming(self) -> None:
        failed = reduce_all(run(ASSISTANT_START, delta("部分"),
                                assistant_end("部分", content_pb2.STOP_REASON_ERROR, "rate limited")))
        self.assertEqual([(it.is_streaming, it.error) for it in failed.items], [(False, "rate limited")])
        cut = reduce_all(run(ASSISTANT_START, delta("部分"), dict(agent_end=events_pb2.AgentEnd())))
        self.assertEqual([(it.is_streaming, it.text) for it in cut.items], [(False, "部分")])


    def test_hook_notice_is_one_card_live_and_reopened(self) -> None:
        def notice(request_id: str, visible: bool) -> agent_messages_pb2.AgentMessage:
            return agent_messages_pb2.AgentMessage(hook_notice=agent_messages_pb2.HookNotice(
                request_id=request_id, event=agent_messages_pb2.HOOK_EVENT_POST_TOOL_USE, hook="secrets",
                action=agent_messages_pb2.HOOK_ACTION_RESULT_REDACTED, reason="a token", decided_by="policy",
                tool_call_id="c1", tool_name="bash", visible_in_ui=visible))
        events = []
        for rid, visible in (("h1", True), ("h2", False)):
            events += [dict(message_start=events_pb2.MessageStart(message=notice(rid, visible))),
                       dict(message_end=events_pb2.MessageEnd(message=notice(rid, visible), entry_id=f"e-{rid}"))]
        live = reduce_all(run(*events))
        self.assertEqual(live.items, (HookItem(id="r/1", entry_id="e-h1", request_id="h1", event="post_tool_use",
                                               hook="secrets", action="result_redacted", reason="a token",
                                               decided_by="policy", tool_call_id="c1", tool_name="bash"),))
        reopened = items_from_transcript([agent_messages_pb2.Entry(id="e-h1", message=notice("h1", True))])
        self.assertEqual([dataclasses.replace(it, id="") for it in reopened],
                         [dataclasses.replace(it, id="") for it in live.items])


class UiStateOutsideTranscript(unittest.TestCase):
    def test_drafts_and_collapsed_never_reach_transcript(self) -> None:
        conv = Conversation()
        ui = toggle_collapsed(set_draft(conv.ui, "把它改成 8080"), "r/3")
        conv = Conversation(ui=ui)
        for e in run(*user("hi"), ASSISTANT_START, delta("a"), assistant_end("a")):
            conv = apply_event(conv, e)
        self.assertIs(conv.ui, ui, "events never touch the UI state")
        self.assertEqual(len(conv.transcript), 2)
        self.assertFalse(any(b"8080" in m.SerializeToString() for m in conv.transcript))
        self.assertNotIn("8080", repr(conv.chat.items))
        self.assertEqual(toggle_collapsed(ui, "r/3").collapsed, frozenset(), "toggling twice expands again")


if __name__ == "__main__":
    unittest.main()
