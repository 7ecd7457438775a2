"""The seed's two-prompt scenario against a running agentd with the faux model.

"读取 src/config.ts，告诉我默认端口。" is answered with read_file, a
client-executed tool implemented here in Python; "把它改成 8080" makes the
model call the built-in edit_file, which asks for approval, granted here.
The ChatItems are printed as they settle.

    make run &            # agentd on 127.0.0.1:7777
    make py-example       # or: /usr/bin/python3 clients/python/examples/two_prompts.py --address 127.0.0.1:7777
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import agentd_client  # noqa: E402  (puts gen/python on the path)
from agentd.v1 import content_pb2, messages_pb2, session_pb2  # noqa: E402
from agentd_client import AgentdClient, Conversation, apply_event  # noqa: E402
from google.protobuf import json_format  # noqa: E402

PROMPTS = ("读取 src/config.ts，告诉我默认端口。", "把它改成 8080")
CONFIG_SOURCE = "export const config = {\n  port: 3000,\n};\n"


def _text(t: str) -> messages_pb2.AssistantMessage:
    return messages_pb2.AssistantMessage(content=[content_pb2.ContentBlock(text=content_pb2.TextContent(text=t))])


def _call(call_id: str, name: str, args: dict) -> messages_pb2.AssistantMessage:
    tc = content_pb2.ToolCall(id=call_id, name=name)
    json_format.ParseDict(args, tc.arguments)
    return messages_pb2.AssistantMessage(content=[content_pb2.ContentBlock(tool_call=tc)])


def read_file(workspace: str, args: dict):
    """The client-executed tool: a file of the workspace, confined to it."""
    path = os.path.realpath(os.path.join(workspace, args["path"]))
    if os.path.commonpath([path, os.path.realpath(workspace)]) != os.path.realpath(workspace):
        raise PermissionError(f"{args['path']} is outside the workspace")
    with open(path, encoding="utf-8") as f:
        body = f.read()
    return body, {"path": args["path"], "bytes": len(body.encode())}


def session_config(workspace: str) -> session_pb2.SessionConfig:
    """read_file runs in this client; edit_file runs in agentd after approval."""
    read = session_pb2.Tool(name="read_file", description="Read a file of the user's project (runs in the client).",
                            executor=session_pb2.TOOL_EXECUTOR_CLIENT)
    read.parameters.update({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
    edit = session_pb2.Tool(name="edit_file", executor=session_pb2.TOOL_EXECUTOR_SERVER,
                            approval=session_pb2.APPROVAL_POLICY_ASK)
    return session_pb2.SessionConfig(
        system_prompt="你是桌面开发助手。", workspace_root=workspace, tools=[read, edit],
        # The faux model's answers, in order: one per model call.
        faux=session_pb2.FauxScript(responses=[
            _call("call_read", "read_file", {"path": "src/config.ts"}),
            _text("默认端口是 3000。"),
            _call("call_edit", "edit_file", {"path": "src/config.ts", "old_text": "port: 3000", "new_text": "port: 8080"}),
            _text("已把默认端口改成 8080。"),
        ]))


def describe(item) -> str:
    """One line per item, as a terminal UI would draw it."""
    if item.kind == "user":
        return f"you: {item.text}"
    if item.kind == "assistant":
        return f"assistant: {item.text}" + (f" ({item.error})" if item.error else "")
    if item.kind == "tool":
        return f"tool {item.label} [{item.state}]"
    if item.kind == "compaction":
        return f"earlier conversation summarized ({item.reason}) [{item.state}]"
    if item.kind == "hook":
        return f"hook {item.hook} {item.action}" + (f" {item.tool_name}" if item.tool_name else "") + (
            f": {item.reason}" if item.reason else "")
    return f"approval {item.label} [{item.decision}" + (f" by {item.decided_by}]" if item.decided_by else "]")


def _settled(item) -> bool:
    return (not getattr(item, "is_streaming", False) and getattr(item, "state", "") != "running"
            and getattr(item, "decision", "") != "pending")


async def two_prompts(client: AgentdClient, workspace: str, out=lambda line: None):
    """Runs both prompts on a new session; returns (session id, conversation, events)."""
    session = await client.create_session(session_config(workspace))
    conv, events = Conversation(), []
    printed = set()  # an item changes after it settles (its entry id arrives): print it once

    def approve(req):
        out(f"  ? approve {req.tool_name} {json.dumps(json_format.MessageToDict(req.arguments), ensure_ascii=False)} → yes")
        return True, "looks right", "example"

    for prompt in PROMPTS:
        stream = client.handle(session.id, client.prompt(session.id, prompt),
                               tools={"read_file": lambda args, _req: read_file(workspace, args)}, approve=approve)
        async for event in stream:
            events.append(event)
            conv = apply_event(conv, event)
            for item in conv.chat.items:
                if _settled(item) and item.id not in printed:
                    printed.add(item.id)
                    out("  " + describe(item))
    return session.id, conv, events


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="127.0.0.1:7777")
    parser.add_argument("--token", default=None)
    args = parser.parse_args()
    workspace = tempfile.mkdtemp(prefix="agentd-example-")
    os.mkdir(os.path.join(workspace, "src"))
    with open(os.path.join(workspace, "src", "config.ts"), "w", encoding="utf-8") as f:
        f.write(CONFIG_SOURCE)
    try:
        async with AgentdClient(args.address, token=args.token) as client:
            session_id, conv, _ = await two_prompts(client, workspace, print)
        print(f"session {session_id}: {len(conv.chat.items)} items, {len(conv.transcript)} messages in the transcript")
        with open(os.path.join(workspace, "src", "config.ts"), encoding="utf-8") as f:
            print(f"{workspace}/src/config.ts now reads: {f.read()!r}")
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
