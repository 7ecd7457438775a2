"""A real agentd for tests: free loopback port, temporary database, SIGTERM.

AGENTD_BIN names a prebuilt binary (make py-test builds one); without it the
binary is built from the repository with ``go build``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import unittest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_SERVING = re.compile(r'msg="agentd serving" addr=(\S+)')


class Agentd:
    """A running agentd; stop() it when done."""

    def __init__(self, *extra_args: str, timeout: float = 30.0) -> None:
        self._work = tempfile.mkdtemp(prefix="agentd-py-")
        self.db_path = os.path.join(self._work, "agentd.db")
        binary = os.environ.get("AGENTD_BIN")
        if not binary:
            binary = os.path.join(self._work, "agentd")
            subprocess.run(["go", "build", "-o", binary, "./cmd/agentd"], cwd=REPO_ROOT, check=True,
                           env={**os.environ, "GOTOOLCHAIN": "local"})
        self._proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--db", self.db_path, *extra_args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self._lines: list = []
        serving = threading.Event()
        self.address = ""

        def read() -> None:
            for line in self._proc.stderr:
                self._lines.append(line)
                m = _SERVING.search(line)
                if m and not serving.is_set():
                    self.address = m.group(1)
                    serving.set()
            serving.set()  # exited: wake the waiter

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        if not serving.wait(timeout) or not self.address:
            self.stop()
            raise RuntimeError("agentd did not report its address:\n" + self.log())

    def log(self) -> str:
        """Everything agentd logged so far."""
        return "".join(self._lines)

    def stop(self) -> int:
        """SIGTERM, wait, remove the temporary directory; returns the exit code."""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
        code = self._proc.wait(timeout=30)
        self._reader.join(timeout=5)
        shutil.rmtree(self._work, ignore_errors=True)
        return code


class AgentdTestCase(unittest.IsolatedAsyncioTestCase):
    """Tests that share one agentd per class, each with a client of its own."""

    agentd: Agentd

    @classmethod
    def setUpClass(cls) -> None:
        cls.agentd = Agentd()

    @classmethod
    def tearDownClass(cls) -> None:
        code = cls.agentd.stop()
        assert code == 0, f"agentd exit code {code}; log:\n{cls.agentd.log()}"

    async def asyncSetUp(self) -> None:
        from agentd_client import AgentdClient  # puts gen/python on the path first

        self.client = AgentdClient(self.agentd.address)

    async def asyncTearDown(self) -> None:
        await self.client.close()
