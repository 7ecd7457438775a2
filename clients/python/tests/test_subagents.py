"""Subagents end to end: one client serves a parent and the child it spawns.

The parent's faux model calls spawn_agent; the child's profile declares a
client-executed tool the child calls. The request reaches the client mirrored
on the parent's stream (SubagentEvent) and is answered with the child's
session id; the child's answer becomes the parent's spawn_agent result.
"""

from __future__ import annotations

import unittest

import grpc
from google.protobuf import json_format

import agentd_client  # noqa: F401  (puts gen/python on the path)
from agentd.v1 import events_pb2, messages_pb2, service_pb2, session_pb2
from agentd_client import refusal_of
from agentd_client.client import arguments_dict

from tests.agentd_server import AgentdTestCase
from tests.scripts import text, call, faux

LOOKUP_SCHEMA = {
    "type": "object",
    "properties": {"key": {"type": "string"}},
    "required": ["key"],
}


def result_text(tr: messages_pb2.ToolResultMessage) -> str:
    return "".join(c.text.text for c in tr.content if c.WhichOneof("block") == "text")


def mirrored(events, kind: str) -> list:
    """The SubagentEvents of the kind on a parent's stream, in order."""
    return [e.subagent for e in events
            if e.WhichOneof("event") == "subagent" and e.subagent.event.WhichOneof("event") == kind]


class SubagentsE2E(AgentdTestCase):
    async def test_child_client_tool_is_served_through_the_parent_stream(self) -> None:
        child_cfg = faux(call("k1", "lookup", {"key": "port"}), text("the port is 3000"))
        child_cfg.system_prompt = "You look things up."
        tool = session_pb2.Tool(name="lookup", description="Looks a setting up in the user's app.",
                                executor=session_pb2.TOOL_EXECUTOR_CLIENT)
        tool.parameters.update(LOOKUP_SCHEMA)
        child_cfg.tools.append(tool)

        cfg = faux(call("s1", "spawn_agent", {"profile": "looker", "task": "find the default port"}),
                   text("done: 3000"))
        cfg.system_prompt = "You coordinate."
        cfg.subagents.append(session_pb2.SubagentProfile(name="looker", description="Looks settings up.",
                                                         config=child_cfg))
        parent = await self.client.create_session(cfg)

        events: list = []
        refused = None
        async for e in self.client.prompt(parent.id, "What is the default port?"):
            events.append(e)
            if e.WhichOneof("event") != "subagent" or e.subagent.event.WhichOneof("event") != "tool_call_requested":
                continue
            sub = e.subagent
            req = sub.event.tool_call_requested
            self.assertEqual((req.tool_call_id, req.tool_name, arguments_dict(req.arguments)),
                             ("k1", "lookup", {"key": "port"}))
            self.assertEqual((sub.profile, sub.tool_call_id, sub.event.session_id, sub.event.run_id),
                             ("looker", "s1", sub.session_id, sub.run_id))
            self.assertNotEqual(sub.session_id, parent.id)
            # The call is the child's: the parent's session id does not reach it.
            with self.assertRaises(grpc.aio.AioRpcError) as caught:
                await self.client.submit_tool_result(parent.id, req.tool_call_id, "3000")
            refused = caught.exception
            await self.client.submit_tool_result(sub.session_id, req.tool_call_id, "3000", details={"source": "test"})

        end = events[-1].agent_end
        self.assertEqual(end.outcome, events_pb2.RUN_OUTCOME_COMPLETED, end.error_message)
        self.assertEqual([e.seq for e in events], list(range(1, len(events) + 1)), "mirrored events take the parent's seq")
        self.assertTrue(all(e.session_id == parent.id for e in events))
        run_id = events[0].run_id

        # Refused as not waiting in the parent's run.
        self.assertIsNotNone(refused, "the child's tool call was never mirrored")
        self.assertEqual(refused.code(), grpc.StatusCode.NOT_FOUND)
        refusal = refusal_of(refused)
        self.assertIsNotNone(refusal)
        self.assertEqual(refusal.reason, service_pb2.ERROR_REASON_NOT_WAITING)
        self.assertEqual(refusal.metadata.get("id"), "k1", "NOT_WAITING names the call in its metadata")
        self.assertIn('"k1"', refused.details())
        self.assertIn(parent.id, refused.details())

        starts, asks, ends = (mirrored(events, k) for k in ("agent_start", "tool_call_requested", "agent_end"))
        self.assertEqual((len(starts), len(asks), len(ends)), (1, 1, 1))
        child_id, child_run = starts[0].session_id, starts[0].run_id
        self.assertEqual((asks[0].session_id, ends[0].session_id), (child_id, child_id))
        self.assertEqual((asks[0].run_id, ends[0].run_id), (child_run, child_run))
        origin = starts[0].event.agent_start.origin
        self.assertEqual((origin.session_id, origin.run_id, origin.tool_call_id, origin.subagent_profile),
                         (parent.id, run_id, "s1", "looker"))
        self.assertEqual(ends[0].event.agent_end.outcome, events_pb2.RUN_OUTCOME_COMPLETED)
        self.assertEqual(mirrored(events, "message_end"), [], "only key events are mirrored")
        # The child's end comes before the parent's spawn_agent result.
        spawn_results = [i for i, e in enumerate(events) if e.WhichOneof("event") == "message_end"
                         and e.message_end.message.WhichOneof("kind") == "tool_result"
                         and e.message_end.message.tool_result.tool_call_id == "s1"]
        self.assertEqual(len(spawn_results), 1)
        child_end = next(i for i, e in enumerate(events) if e.WhichOneof("event") == "subagent"
                         and e.subagent.event.WhichOneof("event") == "agent_end")
        self.assertLess(child_end, spawn_results[0])
        on_stream = events[spawn_results[0]].message_end.message.tool_result
        self.assertEqual((on_stream.tool_name, result_text(on_stream), on_stream.is_error),
                         ("spawn_agent", "the port is 3000", False))

        # The parent's transcript holds the child's answer as the call's result.
        results = {en.message.tool_result.tool_call_id: en.message.tool_result
                   for en in await self.client.transcript(parent.id)
                   if en.WhichOneof("payload") == "message" and en.message.WhichOneof("kind") == "tool_result"}
        self.assertEqual(set(results), {"s1"}, "the child's client tool call is in its own transcript only")
        self.assertEqual(result_text(results["s1"]), "the port is 3000")
        self.assertFalse(results["s1"].is_error)

        # The child's transcript has the client's answer to its tool call.
        child_results = [en.message.tool_result for en in await self.client.transcript(child_id)
                         if en.WhichOneof("payload") == "message" and en.message.WhichOneof("kind") == "tool_result"]
        self.assertEqual([(r.tool_call_id, result_text(r), json_format.MessageToDict(r.details)) for r in child_results],
                         [("k1", "3000", {"source": "test"})])

        # ListSessions by origin finds the child, with where it comes from.
        listed = await self.client.list_sessions(origin_session_id=parent.id)
        self.assertEqual([s.id for s in listed.sessions], [child_id])
        self.assertEqual(listed.next_page_token, "")
        child = listed.sessions[0]
        o = child.origin
        self.assertEqual((o.session_id, o.run_id, o.tool_call_id, o.subagent_profile, o.entry_id),
                         (parent.id, run_id, "s1", "looker", ""))
        self.assertEqual(child.config.system_prompt, "You look things up.")
        self.assertEqual([t.name for t in child.config.tools], ["lookup"])
        self.assertEqual(len(child.config.subagents), 0, "max_depth 1: the child cannot spawn")
        self.assertNotIn("spawn_agent", [t.name for t in (await self.client.context(child_id)).tools])
        # The child has no children of its own, and the parent no origin.
        self.assertEqual(len((await self.client.list_sessions(origin_session_id=child_id)).sessions), 0)
        self.assertFalse(parent.HasField("origin"))

        # The child's whole stream is its own, complete on Attach.
        own = [e async for e in self.client.attach(child_id, run_id=child_run)]
        self.assertEqual(own[0], starts[0].event)
        self.assertEqual(own[-1], ends[0].event)
        self.assertIn("message_end", [e.WhichOneof("event") for e in own])


if __name__ == "__main__":
    unittest.main()
