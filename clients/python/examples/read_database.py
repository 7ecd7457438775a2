"""Read a conversation straight from agentd's SQLite file, while agentd serves it.

Only Python's standard sqlite3 and zlib and the generated protobuf classes
(gen/python) are used: no gRPC, no agentd running needed, and agentd is never
held up (the file is opened read-only; SQLite's WAL gives this read its own
consistent snapshot). The tables and columns used are the reader's contract
of migrations/0008_reader_views.sql.

    /usr/bin/python3 clients/python/examples/read_database.py --db ./agentd.db
    /usr/bin/python3 clients/python/examples/read_database.py --db ./agentd.db --session 3f9c2a1b7d0e4c55

Prints the session's model-visible conversation, one message per line:
the path from its leaf to its root, from the latest compaction summary on,
as agentd's convertToLlm turns it into model messages (the session's context
policies are not applied: GetContext shows exactly what the model gets).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import zlib

_GEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "gen", "python")
sys.path.insert(0, os.path.abspath(_GEN))

from agentd.v1 import agent_messages_pb2  # noqa: E402

APPLICATION_ID = 0x61676E64  # "agnd"
KNOWN_VERSIONS = range(8, 12)  # the schema versions this reader understands (9 and 10 add columns, 11 rebuilds run_events only)


def connect(path: str) -> sqlite3.Connection:
    """A read-only connection that refuses files it does not understand."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    app = db.execute("PRAGMA application_id").fetchone()[0]
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if app != APPLICATION_ID:
        raise SystemExit(f"{path} is not an agentd database (application_id {app:#x})")
    if version not in KNOWN_VERSIONS:
        raise SystemExit(f"{path} has schema version {version}; this reader knows {list(KNOWN_VERSIONS)}")
    return db


def decode(encoding: int, payload: bytes) -> agent_messages_pb2.Entry:
    """An entries row's payload as agentd.v1.Entry (inflated when encoding = 1)."""
    if encoding == 1:
        payload = zlib.decompress(payload)
    elif encoding != 0:
        raise ValueError(f"unknown payload encoding {encoding}")
    return agent_messages_pb2.Entry.FromString(payload)


def conversation(db: sqlite3.Connection, session_id: str) -> list:
    """The entries on the path from the session's root to its leaf."""
    with db:  # one read transaction: one snapshot for both queries
        row = db.execute("SELECT session_pk, leaf_entry_id FROM session_heads WHERE session_id = ?", (session_id,)).fetchone()
        if row is None:
            raise SystemExit(f"no session {session_id}")
        pk, leaf = row
        rows = db.execute(
            "SELECT id, parent_id, encoding, payload FROM entries"
            " WHERE key > ?1 * 4294967296 AND key < (?1 + 1) * 4294967296 ORDER BY key", (pk,)).fetchall()
    by_id = {r[0]: r for r in rows}
    path = []
    while leaf:
        entry_id, parent, encoding, payload = by_id[leaf]
        path.append(decode(encoding, payload))
        leaf = parent
    path.reverse()
    return path


def kind_of(entry) -> str | None:
    return entry.message.WhichOneof("kind") if entry.HasField("message") else None


def model_view(path: list) -> list:
    """The path as the model's context starts it: from the latest compaction
    summary on, the summary first, then the entries it kept and those after it."""
    latest = next((i for i in range(len(path) - 1, -1, -1) if kind_of(path[i]) == "compaction_summary"), None)
    if latest is None:
        return path
    kept = path[latest].message.compaction_summary.first_kept_entry_id
    first = next((j for j in range(latest) if path[j].id == kept), latest + 1)
    rest = [e for j, e in enumerate(path[first:], first) if j != latest and not (j < latest and kind_of(e) == "compaction_summary")]
    return [path[latest]] + rest


def text_of(blocks) -> str:
    parts = []
    for b in blocks:
        kind = b.WhichOneof("block")
        if kind == "text":
            parts.append(b.text.text)
        elif kind == "tool_call":
            parts.append(f"{b.tool_call.name}(…)")
        elif kind == "image":
            parts.append("[image]")
    return " ".join(parts)


def line(entry) -> str | None:
    """One model message as a line, or None for what the model never sees."""
    if not entry.HasField("message"):
        return None
    m = entry.message
    kind = m.WhichOneof("kind")
    if kind == "user":
        return "user: " + text_of(m.user.content)
    if kind == "assistant":
        return "assistant: " + (text_of(m.assistant.content) or m.assistant.error_message)
    if kind == "tool_result":
        return f"tool_result {m.tool_result.tool_name}: " + text_of(m.tool_result.content)
    if kind == "compaction_summary":
        return "user (summary of earlier turns): " + m.compaction_summary.summary
    if kind == "branch_summary":
        return "user (summary of a branch): " + m.branch_summary.summary
    if kind == "custom" and m.custom.include_in_model_context and len(m.custom.content):
        return "user: " + text_of(m.custom.content)
    if kind == "bash_execution" and m.bash_execution.include_in_model_context:
        return "user: ran `" + m.bash_execution.command + "`"
    if kind == "approval_notice" and m.approval_notice.include_in_model_context:
        return f"user: approval of {m.approval_notice.tool_name}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="agentd's SQLite file")
    parser.add_argument("--session", help="the session id (default: the session updated last)")
    args = parser.parse_args()
    db = connect(args.db)
    session = args.session
    if not session:
        row = db.execute("SELECT session_id FROM session_heads ORDER BY update_time DESC LIMIT 1").fetchone()
        if row is None:
            raise SystemExit("the database holds no session")
        session = row[0]
    for entry in model_view(conversation(db, session)):
        text = line(entry)
        if text is not None:
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
