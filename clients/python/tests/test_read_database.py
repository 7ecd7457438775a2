"""Reading agentd's database from outside while agentd streams into it.

The reader example (examples/read_database.py, standard sqlite3 and the
generated classes only) and the sqlite3 shell open the file read-only in the
middle of a run: they see what is committed so far, and agentd goes on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import unittest

import agentd_client  # noqa: F401  (puts gen/python on the path)
from agentd_client import AgentdClient

from tests.agentd_server import Agentd
from tests.test_e2e import faux, text

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "read_database.py")


def read(db: str, session: str) -> list:
    out = subprocess.run([sys.executable, EXAMPLE, "--db", db, "--session", session],
                         check=True, capture_output=True, text=True, timeout=30)
    return out.stdout.splitlines()


class ReadDatabaseWhileServing(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.agentd = Agentd()
        self.client = AgentdClient(self.agentd.address)

    async def asyncTearDown(self) -> None:
        await self.client.close()
        self.assertEqual(self.agentd.stop(), 0, self.agentd.log())

    async def test_reader_and_shell_mid_run(self) -> None:
        answer = "The default port is 3000, set in src/config.ts. " * 4
        session = await self.client.create_session(faux(text("Hello."), text(answer), tokens_per_second=40))
        async for _ in self.client.prompt(session.id, "hi"):
            pass

        deltas = 0
        mid = None
        shell = None
        async for e in self.client.prompt(session.id, "Which port does it use?"):
            if e.WhichOneof("event") == "message_update":
                deltas += 1
                if deltas == 3:
                    # The run streams: the prompt is committed, the answer is not yet.
                    mid = read(self.agentd.db_path, session.id)
                    if shutil.which("sqlite3"):
                        shell = subprocess.run(
                            ["sqlite3", f"file:{self.agentd.db_path}?mode=ro",
                             f"SELECT count(*) FROM entries e JOIN session_heads s ON s.session_pk = e.session_pk WHERE s.session_id = '{session.id}'"],
                            check=True, capture_output=True, text=True, timeout=30).stdout.strip()
        self.assertEqual(mid, ["user: hi", "assistant: Hello.", "user: Which port does it use?"])
        if shell is not None:
            self.assertEqual(shell, "3")
        elif os.environ.get("CI") == "true":
            self.fail("CI needs the sqlite3 shell (Debian's sqlite3)")
        self.assertEqual(read(self.agentd.db_path, session.id),
                         ["user: hi", "assistant: Hello.", "user: Which port does it use?", "assistant: " + answer])


if __name__ == "__main__":
    unittest.main()
