-- agentd transcript store, schema version 1.
--
-- Times are Unix nanoseconds (INTEGER). Protobuf columns hold the binary
-- encoding of the named agentd.v1 message, readable from any language with
-- the generated code.

-- sessions: one row per session. pk is internal (compact foreign keys in the
-- large entries table); id is the public id. AUTOINCREMENT keeps pk
-- increasing even after deletes, so pk order is creation order and a page
-- token (a pk) never skips a newer session.
CREATE TABLE sessions (
    pk            INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT    NOT NULL UNIQUE,
    create_time   INTEGER NOT NULL,
    update_time   INTEGER NOT NULL,
    -- The current leaf entry id; NULL for an empty transcript.
    leaf_entry_id TEXT,
    -- The seq the next appended entry gets.
    next_seq      INTEGER NOT NULL DEFAULT 1,
    title         TEXT    NOT NULL DEFAULT '',
    -- agentd.v1.SessionConfig
    config        BLOB    NOT NULL
);

-- session_labels: a session's labels, one row per key, indexed by value for
-- ListSessions filters.
CREATE TABLE session_labels (
    session_pk INTEGER NOT NULL REFERENCES sessions (pk) ON DELETE CASCADE,
    key        TEXT    NOT NULL,
    value      TEXT    NOT NULL,
    PRIMARY KEY (session_pk, key)
) WITHOUT ROWID;
CREATE INDEX session_labels_by_value ON session_labels (key, value);

-- entries: the transcript tree. Immutable once written. seq is the
-- per-session append order (1, 2, ...); parent_id is NULL for a root and
-- otherwise names an entry of the same session written earlier (checked by
-- agentd on insert). payload is the agentd.v1.Entry protobuf, the canonical
-- form; the other columns repeat parts of it for indexing and for readers
-- that do not decode protobuf. payload is the last column so reads that need
-- only the other columns never touch its overflow pages.
--
-- key = session_pk * 2^32 + seq is the rowid: a session's entries are one
-- contiguous key range in append order, so paging and loading a transcript
-- are range scans of the table itself and an append updates one index, not
-- two.
CREATE TABLE entries (
    key         INTEGER PRIMARY KEY,
    session_pk  INTEGER NOT NULL REFERENCES sessions (pk) ON DELETE CASCADE,
    seq         INTEGER NOT NULL CHECK (seq BETWEEN 1 AND 4294967295),
    id          TEXT    NOT NULL,
    parent_id   TEXT,
    kind        TEXT    NOT NULL,
    create_time INTEGER NOT NULL,
    payload     BLOB    NOT NULL,
    CHECK (key = session_pk * 4294967296 + seq)
);
CREATE UNIQUE INDEX entries_by_id ON entries (session_pk, id);

-- runs: one row per run of the agent loop. end_time NULL means started and
-- not (yet) ended; after a crash such rows are the interrupted runs.
-- outcome is the agentd.v1.RunOutcome number.
CREATE TABLE runs (
    id            TEXT    NOT NULL PRIMARY KEY,
    session_pk    INTEGER NOT NULL REFERENCES sessions (pk) ON DELETE CASCADE,
    start_time    INTEGER NOT NULL,
    end_time      INTEGER,
    outcome       INTEGER NOT NULL DEFAULT 0,
    error_message TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX runs_by_session ON runs (session_pk);
CREATE INDEX runs_active ON runs (start_time) WHERE end_time IS NULL;
