"""End-to-end tests of the Python client against a real agentd.

agentd runs on a free port with a temporary database; the faux model is
scripted per session with FauxScript.
"""

from __future__ import annotations

import dataclasses
import unittest

import grpc

import agentd_client  # noqa: F401  (puts gen/python on the path)
from agentd.v1 import content_pb2, events_pb2, messages_pb2, service_pb2, session_pb2
from agentd_client import ChatState, Conversation, apply_event, items_from_transcript, reduce_chat, refusal_of

from tests.agentd_server import AgentdTestCase
from tests.scripts import text, call, faux


async def collect(stream) -> list:
    return [e async for e in stream]


def reduce_all(events, state: ChatState = ChatState()) -> ChatState:
    for e in events:
        state = reduce_chat(state, e)
    return state


def view(items):
    """Items without their ids, which differ between a live run and a rebuilt transcript."""
    return [dataclasses.replace(it, id="") for it in items]


def shape(items):
    """Items without ids or entry ids, to compare runs of different sessions."""
    return [dataclasses.replace(it, id="", **({"entry_id": ""} if hasattr(it, "entry_id") else {})) for it in items]


def kinds(events):
    return [e.WhichOneof("event") for e in events]


class AgentdE2E(AgentdTestCase):
    @classmethod
    def tearDownClass(cls) -> None:
        super().tearDownClass()
        assert "agentd stopped" in cls.agentd.log()

    def assert_seqs(self, events) -> None:
        self.assertEqual([e.seq for e in events], list(range(1, len(events) + 1)), "seq runs 1..N exactly once")

    async def test_streamed_answer_is_one_card_and_transcript_decodes(self) -> None:
        answer = "默认端口是 3000。它在 src/config.ts 的 port 字段里定义。"
        cfg = faux(text(answer), text("好的。"))
        cfg.system_prompt = "你是桌面开发助手。"
        session = await self.client.create_session(cfg)
        events = await collect(self.client.prompt(session.id, "读取 src/config.ts，告诉我默认端口。"))
        events += await collect(self.client.prompt(session.id, "谢谢"))
        deltas = [e for e in events if e.WhichOneof("event") == "message_update"
                  and e.message_update.WhichOneof("delta") == "text_delta"]
        self.assertGreater(len(deltas), 1, "the answer streams in several deltas")

        state = ChatState()
        for e in events:
            state = reduce_chat(state, e)
            starts = sum(1 for x in events if x.run_id == e.run_id and x.seq <= e.seq
                         and x.WhichOneof("event") == "message_start"
                         and x.message_start.message.WhichOneof("kind") == "assistant")
            cards = sum(1 for it in state.items if it.kind == "assistant" and it.id.startswith(e.run_id + "/"))
            self.assertEqual(cards, starts, f"after seq {e.seq} ({e.WhichOneof('event')})")
        self.assertEqual(
            [(it.kind, it.text, getattr(it, "is_streaming", False)) for it in state.items],
            [("user", "读取 src/config.ts，告诉我默认端口。", False), ("assistant", answer, False),
             ("user", "谢谢", False), ("assistant", "好的。", False)])

        ends = [e.message_end for e in events if e.WhichOneof("event") == "message_end"]
        entries = await self.client.transcript(session.id)
        stored = [en for en in entries if en.WhichOneof("payload") == "message"]
        self.assertEqual(len(stored), len(ends))
        for en, end in zip(stored, ends):
            self.assertEqual(en.id, end.entry_id)
            self.assertEqual(en.message, end.message, "the stored protobuf entry equals its message_end")
        self.assertEqual(view(items_from_transcript(entries)), view(state.items))

    async def test_compaction_update_and_context_hook_helpers(self) -> None:
        from agentd.v1 import agent_messages_pb2
        from google.protobuf import duration_pb2
        from agentd_client import CompactionItem
        cfg = session_pb2.SessionConfig(
            faux=session_pb2.FauxScript(echo=True, context_window=4000),
            compaction=session_pb2.CompactionSettings(reserve_tokens=1000, keep_recent_tokens=400),
            context_hook=session_pb2.ContextHook(timeout=duration_pb2.Duration(seconds=5)))
        session = await self.client.create_session(cfg)
        note = agent_messages_pb2.AgentMessage(user=messages_pb2.UserMessage(
            content=[content_pb2.ContentBlock(text=content_pb2.TextContent(text="note"))]))
        events = []
        for i in range(14):
            async for e in self.client.prompt(session.id, f"{i} " + "lorem ipsum " * 100):
                events.append(e)
                if e.WhichOneof("event") == "context_requested":
                    req = e.context_requested
                    await self.client.submit_context(session.id, req.request_id,
                                                     [it.entry_id for it in req.items] + [note])
        answers = [e.message_end.message.assistant for e in events
                   if e.WhichOneof("event") == "message_end" and e.message_end.message.WhichOneof("kind") == "assistant"]
        self.assertTrue(answers and all(a.content[0].text.text == "note" for a in answers))
        cards = [it for it in reduce_all(events).items if isinstance(it, CompactionItem)]
        self.assertTrue(cards, "automatic compaction happened")
        for c in cards:
            self.assertEqual((c.state, c.reason), ("done", "threshold"))
            self.assertLess(c.tokens_after, c.tokens_before)
        report = await self.client.context_report(session.id)
        self.assertEqual(report.context_window, 4000)
        self.assertLessEqual(report.total_tokens, 4000)
        dry = await self.client.compact(session.id, dry_run=True, keep_recent_tokens=100)
        self.assertTrue(dry.dry_run and dry.first_kept_entry_id)
        end = await self.client.compact(session.id, summary="my summary", keep_recent_tokens=100)
        self.assertEqual(end.summary.summary, "my summary")
        items = items_from_transcript(await self.client.transcript(session.id))
        self.assertTrue(any(isinstance(it, CompactionItem) and it.summary == "my summary" for it in items))
        updated = await self.client.update_session(
            session.id, ["config.thinking_level", "config.system_prompt"],
            config=session_pb2.SessionConfig(thinking_level=agent_messages_pb2.THINKING_LEVEL_HIGH, system_prompt="be brief"))
        self.assertEqual([e.WhichOneof("payload") for e in updated.entries], ["thinking_level_change"])
        self.assertEqual((await self.client.context(session.id)).system_prompt, "be brief")

    async def test_branch_helpers(self) -> None:
        session = await self.client.create_session(session_pb2.SessionConfig(faux=session_pb2.FauxScript(echo=True)))
        await collect(self.client.prompt(session.id, "one"))
        await collect(self.client.prompt(session.id, "two"))
        main = await self.client.transcript(session.id)

        def cards(entries):
            return [f"{it.kind}:{it.text}" for it in items_from_transcript(entries) if hasattr(it, "text")]
        await collect(self.client.edit_and_resend(session.id, main[1].id, "two, edited"))
        self.assertEqual(cards(await self.client.transcript(session.id)),
                         ["user:one", "assistant:one", "user:two, edited", "assistant:two, edited"])
        self.assertEqual(cards(await self.client.branch(session.id, main[3].id)),
                         ["user:one", "assistant:one", "user:two", "assistant:two"])
        await collect(self.client.edit_and_resend(session.id, "", "one, edited"))
        self.assertEqual(cards(await self.client.transcript(session.id)), ["user:one, edited", "assistant:one, edited"])
        nav = await self.client.navigate(session.id, main[3].id, summary="tried a new root")
        self.assertEqual(nav.branch_summary.message.branch_summary.summary, "tried a new root")
        await self.client.set_label(session.id, main[0].id, "start")
        nodes, leaf = await self.client.tree(session.id)
        self.assertEqual(len([n for n in nodes if not n.parent_id]), 2)
        self.assertEqual([n.label for n in nodes if n.id == main[0].id], ["start"])
        self.assertEqual([n.id for n in nodes if n.is_leaf], [leaf])
        fork = await self.client.fork(session.id, main[1].id, title="fork")
        self.assertEqual(fork.origin.session_id, session.id)
        self.assertEqual(cards(await self.client.transcript(fork.id)), ["user:one", "assistant:one"])

    async def test_tool_card_running_then_error_for_undeclared_tool(self) -> None:
        session = await self.client.create_session(faux(call("call_1", "lookup", {"key": "port"}), text("没有这个工具。")))
        events = await collect(self.client.prompt(session.id, "查一下端口"))
        self.assert_seqs(events)
        self.assertEqual(events[-1].agent_end.outcome, events_pb2.RUN_OUTCOME_COMPLETED)
        start = kinds(events).index("tool_execution_start")
        running = [it for it in reduce_all(events[:start + 1]).items if it.kind == "tool"]
        self.assertEqual([it.state for it in running], ["running"])
        items = reduce_all(events).items
        self.assertEqual([it.kind for it in items], ["user", "assistant", "tool", "assistant"])
        tool = items[2]
        self.assertEqual((tool.state, tool.tool_call_id, tool.label), ("error", "call_1", 'lookup {"key":"port"}'))
        self.assertIn("lookup", tool.output)
        self.assertNotEqual(tool.entry_id, "")
        self.assertEqual(view(items_from_transcript(await self.client.transcript(session.id))), view(items))

    async def test_steer_becomes_user_card_before_next_answer(self) -> None:
        long = "这是一段比较长的回答，" * 8
        session = await self.client.create_session(faux(text(long), text("已改用 8080。"), tokens_per_second=20))
        conv = Conversation()
        steered = False
        async for e in self.client.prompt(session.id, "介绍一下配置"):
            conv = apply_event(conv, e)
            if not steered and e.WhichOneof("event") == "message_update":
                steered = True
                self.assertEqual(await self.client.steer(session.id, "改成 8080"), 1)
        self.assertEqual([(it.kind, it.text) for it in conv.chat.items],
                         [("user", "介绍一下配置"), ("assistant", long), ("user", "改成 8080"),
                          ("assistant", "已改用 8080。")])
        self.assertEqual(len(conv.transcript), 4)
        self.assertEqual(conv.ui, Conversation().ui, "events never touch the UI state")
        # Once the run ended, steering is refused with a typed reason.
        with self.assertRaises(grpc.aio.AioRpcError) as caught:
            await self.client.steer(session.id, "too late")
        refusal = refusal_of(caught.exception)
        self.assertIsNotNone(refusal)
        self.assertEqual(refusal.reason, service_pb2.ERROR_REASON_RUN_NOT_ACTIVE)
        self.assertEqual(refusal.reason_name, "RUN_NOT_ACTIVE")
        self.assertEqual(refusal.metadata.get("session_id"), session.id)
        self.assertEqual(refusal.code, grpc.StatusCode.FAILED_PRECONDITION)

    async def test_dropped_detached_stream_resumes_with_attach(self) -> None:
        script = faux(call("call_1", "lookup", {}), text("一二三四五六七八九十" * 6), tokens_per_second=200)
        reference = await collect(self.client.prompt((await self.client.create_session(script)).id, "开始"))
        self.assert_seqs(reference)

        session = await self.client.create_session(script)
        seen = []
        async for e in self.client.prompt(session.id, "开始", detach=True):
            seen.append(e)
            if len(seen) == 5:
                break  # drops the stream; the detached run goes on
        self.assertNotIn("agent_end", kinds(seen))
        rest = await collect(self.client.attach(session.id, run_id=seen[0].run_id, after_seq=seen[-1].seq))
        self.assertEqual(rest[0].seq, 6, "Attach starts right after the last seq seen")
        both = seen + rest
        self.assert_seqs(both)
        self.assertEqual(kinds(both), kinds(reference))
        self.assertEqual(len({e.run_id for e in both}), 1)
        self.assertEqual(shape(reduce_all(both).items), shape(reduce_all(reference).items))

    async def test_resume_rejoins_after_transport_error(self) -> None:
        script = faux(text("甲乙丙丁戊己庚辛壬癸" * 6), tokens_per_second=200)
        reference = await collect(self.client.prompt((await self.client.create_session(script)).id, "开始"))
        session = await self.client.create_session(script)
        client = self.client

        class Lost(grpc.aio.AioRpcError):
            def __init__(self) -> None:
                super().__init__(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                 details="connection lost")

        async def flaky():
            n = 0
            async for e in client.prompt(session.id, "开始", detach=True):
                yield e
                n += 1
                if n == 4:
                    raise Lost()  # leaving the loop cancels the real stream

        both = await collect(self.client.resume(session.id, flaky()))
        self.assert_seqs(both)
        self.assertEqual(kinds(both), kinds(reference))
        self.assertEqual(shape(reduce_all(both).items), shape(reduce_all(reference).items))


if __name__ == "__main__":
    unittest.main()
