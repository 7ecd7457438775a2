-- The schema a new agentd database gets at version 11, in one step: what
-- migrations/0001 to 0011 leave in sqlite_schema, in the order they make it.
-- Generated, do not edit: change the migrations (add one) and run
--   go test ./persistence/sqlite -run TestFreshSchemaIsTheMigrations -update-schema
-- What tables and columns mean is written in the migrations.

CREATE TABLE sessions (
    pk            INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT    NOT NULL UNIQUE,
    create_time   INTEGER NOT NULL,
    update_time   INTEGER NOT NULL,
    -- The current leaf entry id; NULL for an empty transcript.
    leaf_entry_id TEXT,
    -- The seq the next appended entry gets.
    title         TEXT    NOT NULL DEFAULT '',
    -- agentd.v1.SessionConfig
    config        BLOB    NOT NULL
, leaf_seq INTEGER NOT NULL DEFAULT 0, origin_session_id TEXT, origin_entry_id TEXT, tenant TEXT NOT NULL DEFAULT '', origin_run_id TEXT, origin_tool_call_id TEXT, origin_profile TEXT);

CREATE TABLE session_labels (
    session_pk INTEGER NOT NULL REFERENCES sessions (pk) ON DELETE CASCADE,
    key        TEXT    NOT NULL,
    value      TEXT    NOT NULL,
    PRIMARY KEY (session_pk, key)
) WITHOUT ROWID;

CREATE INDEX session_labels_by_value ON session_labels (key, value);

CREATE TABLE runs (
    id            TEXT    NOT NULL PRIMARY KEY,
    session_pk    INTEGER NOT NULL REFERENCES sessions (pk) ON DELETE CASCADE,
    start_time    INTEGER NOT NULL,
    end_time      INTEGER,
    outcome       INTEGER NOT NULL DEFAULT 0,
    error_message TEXT    NOT NULL DEFAULT ''
, last_seq INTEGER NOT NULL DEFAULT 0, events_pruned INTEGER NOT NULL DEFAULT 0 CHECK (events_pruned IN (0, 1)), request BLOB, usage BLOB, structured_output BLOB, prompt_entry_id TEXT, reserved_seq INTEGER NOT NULL DEFAULT 0);

CREATE INDEX runs_active ON runs (start_time) WHERE end_time IS NULL;

CREATE INDEX runs_unpruned ON runs (end_time) WHERE end_time IS NOT NULL AND events_pruned = 0;

CREATE TABLE "entries" (
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

CREATE INDEX sessions_by_origin ON sessions (origin_session_id) WHERE origin_session_id IS NOT NULL;

CREATE INDEX entries_labels ON entries (session_pk, key) WHERE kind = 'label';

CREATE INDEX sessions_tenant ON sessions (tenant, pk);

CREATE TABLE spend (
    key        INTEGER PRIMARY KEY,
    session_pk INTEGER REFERENCES sessions (pk) ON DELETE SET NULL,
    tenant     TEXT    NOT NULL,
    time       INTEGER NOT NULL,
    tokens     INTEGER NOT NULL,
    cost       REAL    NOT NULL
);

CREATE INDEX spend_session ON spend (session_pk);

CREATE INDEX spend_tenant ON spend (tenant, time);

CREATE TABLE run_metadata (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

CREATE INDEX run_metadata_by_key ON run_metadata (key, value);

CREATE INDEX runs_by_session_start ON runs (session_pk, start_time DESC, id DESC);

CREATE VIEW session_heads AS
SELECT
    s.pk                                               AS session_pk,
    s.id                                               AS session_id,
    s.tenant                                           AS tenant,
    s.title                                            AS title,
    s.config                                           AS config,
    s.create_time                                      AS create_time,
    max(s.update_time, coalesce(last.append_time, 0))  AS update_time,
    CASE WHEN coalesce(last.seq, 0) <= s.leaf_seq THEN s.leaf_entry_id ELSE last.id END AS leaf_entry_id,
    coalesce(last.seq, 0)                              AS last_seq,
    s.origin_session_id                                AS origin_session_id,
    s.origin_entry_id                                  AS origin_entry_id,
    s.origin_run_id                                    AS origin_run_id,
    s.origin_tool_call_id                              AS origin_tool_call_id,
    s.origin_profile                                   AS origin_profile
FROM sessions s
LEFT JOIN entries last ON last.key = (SELECT max(key) FROM entries WHERE key > s.pk * 4294967296 AND key < (s.pk + 1) * 4294967296);

CREATE TABLE "run_events" (
    seq_pk    INTEGER PRIMARY KEY,
    run_id    TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    first_seq INTEGER NOT NULL CHECK (first_seq >= 1),
    last_seq  INTEGER NOT NULL CHECK (last_seq >= first_seq),
    encoding  INTEGER NOT NULL DEFAULT 0 CHECK (encoding IN (0, 1)),
    payload   BLOB    NOT NULL
);

CREATE UNIQUE INDEX run_events_by_run ON run_events (run_id, first_seq);
