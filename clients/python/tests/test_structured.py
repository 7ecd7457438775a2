"""Typed answers end to end: a run with an output schema against a real agentd,
the faux model scripted to answer natively (its text is the JSON object) or
through the reserved submit_output tool."""

from __future__ import annotations

import unittest

import grpc
from google.protobuf import json_format

import agentd_client  # noqa: F401  (puts gen/python on the path)
from agentd.v1 import content_pb2, events_pb2, messages_pb2, session_pb2
from agentd_client import refusal_of, structured_output

from tests.agentd_server import AgentdTestCase
from tests.scripts import text

SCHEMA = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "enum": ["bug", "feature"]},
        "priority": {"type": "integer", "minimum": 1, "maximum": 3},
    },
    "required": ["label", "priority"],
}


def submit(call_id: str, args: dict) -> messages_pb2.AssistantMessage:
    tc = content_pb2.ToolCall(id=call_id, name="submit_output")
    json_format.ParseDict(args, tc.arguments)
    return messages_pb2.AssistantMessage(content=[content_pb2.ContentBlock(tool_call=tc)])


async def collect(stream) -> list:
    return [e async for e in stream]


def final_assistant(events) -> messages_pb2.AssistantMessage:
    finals = [e.message_end.message.assistant for e in events
              if e.WhichOneof("event") == "message_end" and e.message_end.message.WhichOneof("kind") == "assistant"]
    return finals[-1]


class StructuredOutputE2E(AgentdTestCase):
    async def test_native_answer_after_a_correction(self) -> None:
        script = session_pb2.FauxScript(responses=[text("It is a bug."), text('{"label": "bug", "priority": 2}')])
        session = await self.client.create_session(session_pb2.SessionConfig(faux=script))
        events = await collect(self.client.prompt(session.id, "Triage: the app crashes on start.", output_schema=SCHEMA))
        end = events[-1].agent_end
        self.assertEqual(end.outcome, events_pb2.RUN_OUTCOME_COMPLETED, end.error_message)
        self.assertEqual(structured_output(events), {"label": "bug", "priority": 2})
        self.assertEqual(json_format.MessageToDict(final_assistant(events).structured_output), {"label": "bug", "priority": 2})
        corrections = [e for e in events if e.WhichOneof("event") == "message_end"
                       and e.message_end.message.WhichOneof("kind") == "user"][1:]
        self.assertEqual(len(corrections), 1, "the plain-text answer went back once")
        # The transcript keeps the typed answer on its message.
        entries = await self.client.transcript(session.id)
        stored = [e.message.assistant for e in entries if e.message.WhichOneof("kind") == "assistant"]
        self.assertEqual(json_format.MessageToDict(stored[-1].structured_output), {"label": "bug", "priority": 2})
        self.assertFalse(stored[0].HasField("structured_output"))

    async def test_finalizer_tool_from_the_session_default(self) -> None:
        cfg = session_pb2.SessionConfig(faux=session_pb2.FauxScript(
            structured_output_tool=True, responses=[submit("c1", {"label": "feature", "priority": 3})]))
        cfg.output_schema.update(SCHEMA)
        session = await self.client.create_session(cfg)
        events = await collect(self.client.prompt(session.id, "Triage: add dark mode."))
        self.assertEqual(events[-1].agent_end.outcome, events_pb2.RUN_OUTCOME_COMPLETED, events[-1].agent_end.error_message)
        self.assertEqual(structured_output(events), {"label": "feature", "priority": 3})
        self.assertEqual(json_format.MessageToDict(final_assistant(events).structured_output), {"label": "feature", "priority": 3})

    async def test_retries_exhausted_end_output_invalid(self) -> None:
        script = session_pb2.FauxScript(responses=[text('{"label": "chore", "priority": 1}')] * 2)
        session = await self.client.create_session(session_pb2.SessionConfig(faux=script))
        events = await collect(self.client.prompt(session.id, "Triage: tidy up.", output_schema=SCHEMA, max_output_retries=0))
        end = events[-1].agent_end
        self.assertEqual(end.outcome, events_pb2.RUN_OUTCOME_OUTPUT_INVALID)
        self.assertIn("label: must be equal to one of the allowed values", end.error_message)
        errors = [e.error for e in events if e.WhichOneof("event") == "error"]
        self.assertEqual([(e.stage, e.fatal) for e in errors], [("output_schema", True)])
        self.assertIsNone(structured_output(events))

    async def test_a_schema_that_is_not_an_object_is_refused(self) -> None:
        session = await self.client.create_session(session_pb2.SessionConfig(faux=session_pb2.FauxScript(echo=True)))
        with self.assertRaises(grpc.aio.AioRpcError) as caught:
            await collect(self.client.prompt(session.id, "hi", output_schema={"type": "array"}))
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        refusal = refusal_of(caught.exception)
        self.assertIsNotNone(refusal)
        self.assertEqual(refusal.metadata.get("field"), "output_schema")


if __name__ == "__main__":
    unittest.main()
