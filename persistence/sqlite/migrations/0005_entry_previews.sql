-- agentd transcript store, schema version 5: entry previews, payload last
-- again, and the origin of forked sessions.
--
-- entries.preview is a short one-line text of the entry (the start of a
-- message's text, a tool's name and output, a summary, a label; at most
-- 120 characters, see persistence.Preview), written when the entry is
-- appended, so the tree of a session (GetTree) is listed from the rows
-- without decoding payloads. It is NULL in rows an older agentd wrote:
-- readers compute it from the payload then.
--
-- SQLite stores a row's columns in order and a large payload spills into
-- overflow pages, so a column after payload costs a read of all of them.
-- The table is rebuilt with every column before payload (append_time and
-- encoding, which versions 2 and 3 added at the end, included); its rows
-- and keys are kept.
CREATE TABLE entries_v5 (
    key         INTEGER PRIMARY KEY,
    session_pk  INTEGER NOT NULL REFERENCES sessions (pk) ON DELETE CASCADE,
    seq         INTEGER NOT NULL CHECK (seq BETWEEN 1 AND 4294967295),
    id          TEXT    NOT NULL,
    parent_id   TEXT,
    kind        TEXT    NOT NULL,
    create_time INTEGER NOT NULL,
    append_time INTEGER,
    encoding    INTEGER NOT NULL DEFAULT 0 CHECK (encoding IN (0, 1)),
    preview     TEXT,
    payload     BLOB    NOT NULL,
    CHECK (key = session_pk * 4294967296 + seq)
);
INSERT INTO entries_v5 (key, session_pk, seq, id, parent_id, kind, create_time, append_time, encoding, preview, payload)
    SELECT key, session_pk, seq, id, parent_id, kind, create_time, append_time, encoding, NULL, payload FROM entries;
DROP TABLE entries;
ALTER TABLE entries_v5 RENAME TO entries;

-- sessions.origin_session_id and origin_entry_id say where a session was
-- forked from (ForkSession): the session and the entry whose path it
-- copied; NULL for a session that was created, not forked. ListSessions
-- filters by origin.
ALTER TABLE sessions ADD COLUMN origin_session_id TEXT;
ALTER TABLE sessions ADD COLUMN origin_entry_id TEXT;
CREATE INDEX sessions_by_origin ON sessions (origin_session_id) WHERE origin_session_id IS NOT NULL;

-- Label entries (SetLabel) are few; a partial index finds a session's
-- labels without scanning its entries, and appending any other entry does
-- not touch it.
CREATE INDEX entries_labels ON entries (session_pk, key) WHERE kind = 'label';
