"""The example's two-prompt scenario end to end: a Python client tool, an
approval, the reducer's final ChatItems and the stored transcript."""

from __future__ import annotations

import os
import sys
import tempfile
import unittest


import agentd_client  # noqa: F401  (puts gen/python on the path)
from agentd_client import AgentdClient, items_from_transcript

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import two_prompts as example  # noqa: E402

from tests.agentd_server import Agentd  # noqa: E402


def summary(it):
    if it.kind in ("user", "assistant"):
        return (it.kind, it.text)
    if it.kind == "tool":
        return (it.kind, it.tool_call_id, it.state)
    return (it.kind, it.tool_call_id, it.decision, it.decided_by)


class TwoPromptsExample(unittest.IsolatedAsyncioTestCase):
    agentd: Agentd

    @classmethod
    def setUpClass(cls) -> None:
        cls.agentd = Agentd()

    @classmethod
    def tearDownClass(cls) -> None:
        assert cls.agentd.stop() == 0

    async def test_two_prompts(self) -> None:
        workspace = tempfile.mkdtemp(prefix="agentd-py-ws-")
        self.addCleanup(lambda: __import__("shutil").rmtree(workspace, ignore_errors=True))
        os.mkdir(os.path.join(workspace, "src"))
        with open(os.path.join(workspace, "src", "config.ts"), "w", encoding="utf-8") as f:
            f.write(example.CONFIG_SOURCE)
        async with AgentdClient(self.agentd.address) as client:
            printed = []
            session_id, conv, events = await example.two_prompts(client, workspace, printed.append)
            entries = await client.transcript(session_id)
        item_lines = [line for line in printed if not line.startswith("  ? ")]
        self.assertEqual(len(item_lines), len(conv.chat.items), f"each item printed once: {printed}")

        items = [summary(it) for it in conv.chat.items]
        self.assertEqual(items[:4], [("user", example.PROMPTS[0]), ("assistant", ""), ("tool", "call_read", "success"),
                                     ("assistant", "默认端口是 3000。")])
        self.assertEqual(items[4:6], [("user", example.PROMPTS[1]), ("assistant", "")])
        # The approval item and the edit's tool card may come in either order.
        self.assertEqual(sorted(items[6:8]), sorted([("approval", "call_edit", "allowed", "example"),
                                                     ("tool", "call_edit", "success")]))
        self.assertEqual(items[8:], [("assistant", "已把默认端口改成 8080。")])

        read = next(it for it in conv.chat.items if it.kind == "tool" and it.tool_call_id == "call_read")
        self.assertEqual(read.output, example.CONFIG_SOURCE, "the model saw what the Python tool read")
        with open(os.path.join(workspace, "src", "config.ts"), encoding="utf-8") as f:
            self.assertIn("port: 8080", f.read(), "the approved edit ran")
        kinds = {e.WhichOneof("event") for e in events}
        self.assertTrue({"tool_call_requested", "approval_requested"} <= kinds)
        self.assertEqual(sorted(map(summary, items_from_transcript(entries))), sorted(items),
                         "the stored transcript rebuilds the same cards")


if __name__ == "__main__":
    unittest.main()
