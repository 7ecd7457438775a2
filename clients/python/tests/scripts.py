"""Faux-model scripts for the end-to-end tests: the answers a session's
faux model gives (SessionConfig.faux), written the same way in every test."""

from __future__ import annotations

from google.protobuf import json_format

import agentd_client  # noqa: F401  (puts gen/python on the path)
from agentd.v1 import content_pb2, messages_pb2, session_pb2


def text(t: str) -> messages_pb2.AssistantMessage:
    """An answer of one text block."""
    return messages_pb2.AssistantMessage(content=[content_pb2.ContentBlock(text=content_pb2.TextContent(text=t))])


def call(call_id: str, name: str, args: dict) -> messages_pb2.AssistantMessage:
    """An answer calling one tool with args."""
    tc = content_pb2.ToolCall(id=call_id, name=name)
    json_format.ParseDict(args, tc.arguments)
    return messages_pb2.AssistantMessage(content=[content_pb2.ContentBlock(tool_call=tc)])


def faux(*responses, tokens_per_second: int = 0) -> session_pb2.SessionConfig:
    """A configuration whose faux model gives responses in order."""
    return session_pb2.SessionConfig(faux=session_pb2.FauxScript(responses=list(responses),
                                                                 tokens_per_second=tokens_per_second))
