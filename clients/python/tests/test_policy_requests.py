"""The requests the policy helpers send, checked against a recording stub.

No agentd here: the stub records each request, so these tests pin down how a
HookAnswer, an Approval and an in-doubt decision become protobuf fields and
which hook_requested events handle() answers.
"""

from __future__ import annotations

import unittest

from google.protobuf import json_format

import agentd_client  # noqa: F401  (puts gen/python on the path)
from agentd.v1 import agent_messages_pb2, content_pb2, events_pb2, messages_pb2, service_pb2
from agentd_client import (
    KEEP,
    SUGGESTED,
    AgentdClient,
    Approval,
    allow,
    deny,
    modify,
    on_post_tool_use,
    on_pre_compact,
    on_pre_tool_use,
    on_stop,
    on_user_prompt,
    redact,
)


class Recorder:
    """Stands in for the generated stub: records (method, request) pairs."""

    def __init__(self) -> None:
        self.calls: list = []

    def __getattr__(self, method: str):
        responses = {
            "ResolveApproval": service_pb2.ResolveApprovalResponse(),
            "SubmitHookResult": service_pb2.SubmitHookResultResponse(),
            "ResolveInDoubt": service_pb2.ResolveInDoubtResponse(),
        }

        async def call(request, metadata=()):
            self.calls.append((method, request))
            return responses[method]

        return call


async def events(*evs):
    for e in evs:
        yield e


def hook_event(request_id: str, event: int, hook: str = "hooks[0]", **fields) -> events_pb2.AgentEvent:
    return events_pb2.AgentEvent(hook_requested=events_pb2.HookRequested(request_id=request_id, event=event, hook=hook,
                                                                         **fields))


class PolicyRequests(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.client = AgentdClient("127.0.0.1:1")  # never dialled: rpc is replaced
        self.rec = Recorder()
        self.client.rpc = self.rec

    async def asyncTearDown(self) -> None:
        await self.client.close()

    async def test_hook_answers_become_submit_hook_result_fields(self) -> None:
        cases = [
            ("allow", allow(decided_by="me"),
             service_pb2.SubmitHookResultRequest(verdict=service_pb2.HOOK_VERDICT_ALLOW, decided_by="me")),
            ("deny", deny("no", include_in_model_context=True),
             service_pb2.SubmitHookResultRequest(verdict=service_pb2.HOOK_VERDICT_DENY, reason="no",
                                                 include_in_model_context=True)),
            ("redact", redact("secret"),
             service_pb2.SubmitHookResultRequest(verdict=service_pb2.HOOK_VERDICT_REDACT, reason="secret")),
            ("modify instructions", modify(instructions="keep the numbers"),
             service_pb2.SubmitHookResultRequest(verdict=service_pb2.HOOK_VERDICT_MODIFY,
                                                 instructions="keep the numbers")),
            ("modify content, details kept", modify(content="short"),
             service_pb2.SubmitHookResultRequest(
                 verdict=service_pb2.HOOK_VERDICT_MODIFY,
                 content=[content_pb2.ContentBlock(text=content_pb2.TextContent(text="short"))])),
            ("modify details removed", modify(content="short", details=None),
             service_pb2.SubmitHookResultRequest(
                 verdict=service_pb2.HOOK_VERDICT_MODIFY, replace_details=True,
                 content=[content_pb2.ContentBlock(text=content_pb2.TextContent(text="short"))])),
        ]
        for name, answer, want in cases:
            with self.subTest(name):
                self.rec.calls.clear()
                await self.client.submit_hook_result("s", "r", answer)
                want.session_id, want.request_id = "s", "r"
                self.assertEqual(self.rec.calls, [("SubmitHookResult", want)])

        self.rec.calls.clear()
        await self.client.submit_hook_result("s", "r", modify(arguments={"command": "ls"}, details={"n": 1}))
        (_, got), = self.rec.calls
        self.assertEqual(json_format.MessageToDict(got.arguments), {"command": "ls"})
        self.assertTrue(got.replace_details)
        self.assertEqual(json_format.MessageToDict(got.details), {"n": 1})
        self.assertIs(modify().details, KEEP)

    async def test_handle_answers_the_first_matching_hook_handler_only(self) -> None:
        call = content_pb2.ToolCall(id="c1", name="bash")
        json_format.ParseDict({"command": "rm -rf /"}, call.arguments)
        seen = []
        handlers = [
            on_pre_tool_use(lambda args, req: seen.append(("pre", args)) or deny("no rm"), hook="shell"),
            on_post_tool_use(lambda result, req: seen.append(("post", result.tool_name)) or redact()),
            on_user_prompt(lambda text, req: seen.append(("prompt", text, req.source)) or allow()),
            on_pre_compact(lambda instructions, req: seen.append(("compact", instructions)) or allow()),
        ]
        stream = events(
            hook_event("r1", agent_messages_pb2.HOOK_EVENT_PRE_TOOL_USE, "other", tool_call=call),  # no handler of that name
            hook_event("r2", agent_messages_pb2.HOOK_EVENT_PRE_TOOL_USE, "shell", tool_call=call),
            hook_event("r3", agent_messages_pb2.HOOK_EVENT_POST_TOOL_USE,
                       tool_result=messages_pb2.ToolResultMessage(tool_name="bash")),
            hook_event("r4", agent_messages_pb2.HOOK_EVENT_STOP),  # no STOP handler: left to its timeout
            hook_event("r5", agent_messages_pb2.HOOK_EVENT_USER_PROMPT, source="steer",
                       message=agent_messages_pb2.AgentMessage(user=_user("hi"))),
            hook_event("r6", agent_messages_pb2.HOOK_EVENT_PRE_COMPACT, instructions="be brief"),
        )
        out = [e async for e in self.client.handle("s", stream, hooks=handlers)]
        self.assertEqual(len(out), 6, "every event is yielded, answered or not")
        self.assertEqual(seen, [("pre", {"command": "rm -rf /"}), ("post", "bash"), ("prompt", "hi", "steer"),
                                ("compact", "be brief")])
        self.assertEqual([(m, r.request_id, r.verdict) for m, r in self.rec.calls],
                         [("SubmitHookResult", "r2", service_pb2.HOOK_VERDICT_DENY),
                          ("SubmitHookResult", "r3", service_pb2.HOOK_VERDICT_REDACT),
                          ("SubmitHookResult", "r5", service_pb2.HOOK_VERDICT_ALLOW),
                          ("SubmitHookResult", "r6", service_pb2.HOOK_VERDICT_ALLOW)])

        self.rec.calls.clear()
        stop = [e async for e in self.client.handle("s", events(hook_event(
            "r7", agent_messages_pb2.HOOK_EVENT_STOP,
            message=agent_messages_pb2.AgentMessage(assistant=_assistant("done")))),
            hooks=[on_stop(lambda answer, req: modify(content=f"{answer}? check the tests first"))])]
        self.assertEqual(len(stop), 1)
        (_, got), = self.rec.calls
        self.assertEqual(got.content[0].text.text, "done? check the tests first")

    async def test_approvals_carry_scope_rule_arguments_and_batches(self) -> None:
        req = events_pb2.ApprovalRequested(tool_call_id="c1", tool_name="bash",
                                           suggested_rule=agent_messages_pb2.ApprovalRule(tool_name="bash",
                                                                                          command_prefix="git"))
        D = agent_messages_pb2
        await self.client.approve("s", req, scope="session", rule=SUGGESTED, decided_by="me")
        await self.client.approve("s", req, scope="run", rule={"command_prefix": "git status"})
        await self.client.deny("s", ["c1", "c2", "c3"], reason="not now")
        await self.client.approve("s", "c1", arguments={"command": "git status"})
        await self.client.resolve_approval("s", "c9", True, scope=D.APPROVAL_SCOPE_CALL)
        got = [r for _, r in self.rec.calls]
        self.assertEqual((got[0].scope, got[0].rule.tool_name, got[0].rule.command_prefix, got[0].decided_by),
                         (D.APPROVAL_SCOPE_SESSION, "bash", "git", "me"))
        self.assertEqual((got[1].scope, got[1].rule.tool_name, got[1].rule.command_prefix),
                         (D.APPROVAL_SCOPE_RUN, "bash", "git status"), "the rule's tool defaults to the call's")
        self.assertEqual((got[2].decision, got[2].tool_call_id, list(got[2].tool_call_ids), got[2].reason),
                         (D.APPROVAL_DECISION_DENIED, "c1", ["c2", "c3"], "not now"))
        self.assertEqual(json_format.MessageToDict(got[3].arguments), {"command": "git status"})
        self.assertFalse(got[3].HasField("rule"))
        self.assertEqual(got[4].scope, D.APPROVAL_SCOPE_CALL)
        with self.assertRaises(ValueError):
            await self.client.approve("s", "c1", scope="session", rule=SUGGESTED)  # no request to take it from

        # handle(): an Approval return value carries the same fields; a tuple still works.
        self.rec.calls.clear()
        stream = events(events_pb2.AgentEvent(approval_requested=req),
                        events_pb2.AgentEvent(approval_requested=events_pb2.ApprovalRequested(tool_call_id="c2")))
        answers = iter([Approval(True, scope="session", rule=SUGGESTED), (False, "no", "me")])
        _ = [e async for e in self.client.handle("s", stream, approve=lambda r: next(answers))]
        first, second = (r for _, r in self.rec.calls)
        self.assertEqual((first.scope, first.rule.command_prefix), (D.APPROVAL_SCOPE_SESSION, "git"))
        self.assertEqual((second.decision, second.reason, second.decided_by), (D.APPROVAL_DECISION_DENIED, "no", "me"))

    async def test_in_doubt_actions(self) -> None:
        await self.client.resolve_in_doubt("s", "c1", "retry")
        await self.client.resolve_in_doubt("s", "c1", "skip", message="not retried")
        await self.client.resolve_in_doubt("s", "c1", "supply", content="done", details={"exit": 0}, is_error=False)
        got = [r for _, r in self.rec.calls]
        self.assertEqual([r.action for r in got], [service_pb2.IN_DOUBT_ACTION_RETRY, service_pb2.IN_DOUBT_ACTION_SKIP,
                                                   service_pb2.IN_DOUBT_ACTION_SUPPLY])
        self.assertEqual(got[1].message, "not retried")
        self.assertEqual(got[2].content[0].text.text, "done")
        self.assertEqual(json_format.MessageToDict(got[2].details), {"exit": 0})
        with self.assertRaises(KeyError):
            await self.client.resolve_in_doubt("s", "c1", "ignore")


def _user(t: str) -> messages_pb2.UserMessage:
    return messages_pb2.UserMessage(content=[content_pb2.ContentBlock(text=content_pb2.TextContent(text=t))])


def _assistant(t: str) -> messages_pb2.AssistantMessage:
    return messages_pb2.AssistantMessage(content=[content_pb2.ContentBlock(text=content_pb2.TextContent(text=t))])


if __name__ == "__main__":
    unittest.main()
