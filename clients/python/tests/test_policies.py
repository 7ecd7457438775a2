"""End-to-end tests of the policy helpers against a real agentd.

A PRE_TOOL_USE hook answered with on_pre_tool_use, and an approval resolved
with scope "session" whose rule decides the next run's call unasked. bash
runs in agentd's sandbox inside a temporary workspace.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import unittest

from google.protobuf import duration_pb2, json_format

import agentd_client  # noqa: F401  (puts gen/python on the path)
from agentd.v1 import agent_messages_pb2, content_pb2, messages_pb2, session_pb2
from agentd_client import (
    SUGGESTED,
    Approval,
    ChatState,
    HookItem,
    deny,
    items_from_transcript,
    modify,
    on_pre_tool_use,
    reduce_chat,
    text_of,
)

from tests.agentd_server import AgentdTestCase
from tests.scripts import text


def bash(call_id: str, command: str) -> messages_pb2.AssistantMessage:
    tc = content_pb2.ToolCall(id=call_id, name="bash")
    json_format.ParseDict({"command": command}, tc.arguments)
    return messages_pb2.AssistantMessage(content=[content_pb2.ContentBlock(tool_call=tc)])


async def collect(stream) -> list:
    return [e async for e in stream]


def results(events) -> dict:
    """Each tool call id's result, as its tool_execution_end carried it."""
    return {e.tool_execution_end.result.tool_call_id: e.tool_execution_end.result
            for e in events if e.WhichOneof("event") == "tool_execution_end"}


def of(events, kind: str) -> list:
    return [getattr(e, kind) for e in events if e.WhichOneof("event") == kind]


def notices(entries, kind: str) -> list:
    return [getattr(en.message, kind) for en in entries
            if en.WhichOneof("payload") == "message" and en.message.WhichOneof("kind") == kind]


class PoliciesE2E(AgentdTestCase):
    async def asyncSetUp(self) -> None:
        await super().asyncSetUp()
        self.workspace = tempfile.mkdtemp(prefix="agentd-py-ws-")
        with open(os.path.join(self.workspace, "keep.txt"), "w") as f:
            f.write("keep")

    async def asyncTearDown(self) -> None:
        await super().asyncTearDown()
        shutil.rmtree(self.workspace, ignore_errors=True)

    async def test_pre_tool_use_hook_rewrites_and_denies_bash_calls(self) -> None:
        cfg = session_pb2.SessionConfig(
            workspace_root=self.workspace,
            tools=[session_pb2.Tool(name="bash", approval=session_pb2.APPROVAL_POLICY_ALLOW)],
            hooks=[session_pb2.Hook(event=agent_messages_pb2.HOOK_EVENT_PRE_TOOL_USE, tool_pattern="bash",
                                    name="shell-policy", timeout=duration_pb2.Duration(seconds=30),
                                    on_timeout=session_pb2.HOOK_TIMEOUT_ACTION_DENY)],
            faux=session_pb2.FauxScript(responses=[bash("call_1", "echo secret > leaked.txt"),
                                                   bash("call_2", "rm -rf ."), text("done")]))
        session = await self.client.create_session(cfg)
        asked = []

        async def policy(args, request):  # an async handler works as well as a plain one
            asked.append(request)
            if args["command"].startswith("rm "):
                return deny("rm is not allowed here", decided_by="policy", include_in_model_context=True)
            return modify(arguments={"command": "echo rewritten"}, reason="no writes", decided_by="policy")

        events = await collect(self.client.handle(session.id, self.client.prompt(session.id, "clean up"),
                                                  hooks=[on_pre_tool_use(policy)]))
        self.assertEqual([(r.event, r.hook, r.tool_call.id, r.tool_call.name) for r in asked],
                         [(agent_messages_pb2.HOOK_EVENT_PRE_TOOL_USE, "shell-policy", "call_1", "bash"),
                          (agent_messages_pb2.HOOK_EVENT_PRE_TOOL_USE, "shell-policy", "call_2", "bash")])
        self.assertTrue(all(r.request_id and r.HasField("deadline") for r in asked))
        self.assertEqual(len(of(events, "agent_end")), 1)
        self.assertFalse([e for e in of(events, "error") if "hook" in e.stage], "both hooks were answered in time")

        by_call = results(events)
        self.assertEqual(text_of(by_call["call_1"].content).strip(), "rewritten", "the call ran with the hook's arguments")
        self.assertFalse(by_call["call_1"].is_error)
        self.assertFalse(os.path.exists(os.path.join(self.workspace, "leaked.txt")), "the model's command never ran")
        self.assertTrue(by_call["call_2"].is_error, "the denied call is an error result")
        self.assertIn("rm is not allowed here", text_of(by_call["call_2"].content))
        self.assertTrue(os.path.exists(os.path.join(self.workspace, "keep.txt")), "rm never ran")

        # What the model sees next: both results, the reason included.
        context = await self.client.context(session.id)
        tool_texts = [text_of(m.tool_result.content) for m in context.messages if m.WhichOneof("role") == "tool_result"]
        self.assertEqual(len(tool_texts), 2)
        self.assertEqual(tool_texts[0].strip(), "rewritten")
        self.assertIn("rm is not allowed here", tool_texts[1])

        entries = await self.client.transcript(session.id)
        hook_notices = notices(entries, "hook_notice")
        self.assertEqual(
            [(n.event, n.hook, n.action, n.tool_call_id, n.tool_name, n.decided_by, n.include_in_model_context)
             for n in hook_notices],
            [(agent_messages_pb2.HOOK_EVENT_PRE_TOOL_USE, "shell-policy", agent_messages_pb2.HOOK_ACTION_ARGUMENTS_REPLACED,
              "call_1", "bash", "policy", False),
             (agent_messages_pb2.HOOK_EVENT_PRE_TOOL_USE, "shell-policy", agent_messages_pb2.HOOK_ACTION_DENIED,
              "call_2", "bash", "policy", True)])
        self.assertEqual(hook_notices[1].reason, "rm is not allowed here")
        self.assertEqual([n.request_id for n in hook_notices], [r.request_id for r in asked])
        # The reducer shows the same hook cards live and in the reopened transcript.
        state = ChatState()
        for e in events:
            state = reduce_chat(state, e)

        def cards(items):
            return [dataclasses.replace(it, id="") for it in items if isinstance(it, HookItem)]
        self.assertEqual([(c.action, c.tool_call_id) for c in cards(state.items)],
                         [("arguments_replaced", "call_1"), ("denied", "call_2")])
        self.assertEqual(cards(items_from_transcript(entries)), cards(state.items))

    async def test_session_scoped_approval_rule_decides_the_next_run(self) -> None:
        cfg = session_pb2.SessionConfig(
            workspace_root=self.workspace,
            tools=[session_pb2.Tool(name="bash")],  # bash asks by default
            faux=session_pb2.FauxScript(responses=[bash("call_1", "echo one"), text("first"),
                                                   bash("call_2", "echo two"), text("second"),
                                                   bash("call_3", "echo three"), text("third")]))
        session = await self.client.create_session(cfg)
        requests = []

        def approve(req):
            requests.append(req)
            return Approval(True, reason="echo is harmless", decided_by="py-test", scope="session", rule=SUGGESTED)

        first = await collect(self.client.handle(session.id, self.client.prompt(session.id, "say one"), approve=approve))
        self.assertEqual(len(requests), 1)
        req = requests[0]
        self.assertEqual(req.tool_call_id, "call_1")
        self.assertEqual(sorted(req.decisions), sorted([agent_messages_pb2.APPROVAL_DECISION_ALLOWED,
                                                        agent_messages_pb2.APPROVAL_DECISION_DENIED]))
        self.assertIn(agent_messages_pb2.APPROVAL_SCOPE_SESSION, req.scopes)
        self.assertEqual(req.suggested_rule.tool_name, "bash")
        prefix = req.suggested_rule.command_prefix
        self.assertTrue(prefix and "echo one".startswith(prefix.strip()) and "echo two".startswith(prefix.strip()),
                        f"suggested prefix {prefix!r}")
        self.assertEqual(text_of(results(first)["call_1"].content).strip(), "one")

        rules = await self.client.list_approval_rules(session.id)
        self.assertEqual(len(rules), 1)
        rule = rules[0]
        self.assertEqual((rule.tool_name, rule.command_prefix, rule.decision, rule.created_by),
                         ("bash", prefix, agent_messages_pb2.APPROVAL_DECISION_ALLOWED, "py-test"))
        self.assertTrue(rule.id)

        # The second run: the rule decides, no approval_requested.
        def must_not_ask(req):
            raise AssertionError(f"the rule should have decided {req.tool_call_id}")

        second = await collect(self.client.handle(session.id, self.client.prompt(session.id, "say two"),
                                                  approve=must_not_ask))
        self.assertEqual(of(second, "approval_requested"), [])
        self.assertEqual(text_of(results(second)["call_2"].content).strip(), "two")
        approvals = {n.tool_call_id: n for n in notices(await self.client.transcript(session.id), "approval_notice")}
        self.assertEqual(approvals["call_2"].decision, agent_messages_pb2.APPROVAL_DECISION_ALLOWED)
        self.assertEqual(approvals["call_2"].rule.id, rule.id, "the notice names the rule that decided")
        self.assertEqual(approvals["call_1"].scope, agent_messages_pb2.APPROVAL_SCOPE_SESSION)
        self.assertEqual(approvals["call_1"].rule.id, rule.id, "the first notice names the rule it created")

        # Deleted, the rule decides nothing: the third call asks again (denied here).
        removal = await self.client.delete_approval_rule(session.id, rule.id)
        self.assertEqual(removal.WhichOneof("payload"), "approval_rule_removal")
        self.assertEqual(await self.client.list_approval_rules(session.id), [])
        asked = []
        third = await collect(self.client.handle(session.id, self.client.prompt(session.id, "say three"),
                                                 approve=lambda r: asked.append(r) or (False, "not again", "py-test")))
        self.assertEqual(len(asked), 1)
        self.assertTrue(results(third)["call_3"].is_error)
        self.assertIn("not again", text_of(results(third)["call_3"].content))


if __name__ == "__main__":
    unittest.main()
