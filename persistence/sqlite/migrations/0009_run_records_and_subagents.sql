-- Run records for programs (GetRun, ListRuns) and the origin of subagent
-- sessions.
--
-- runs.request is the binary protobuf agentd.v1.RunRequest that started
-- the run (its per-run settings, output schema and metadata); NULL for a
-- run recorded before this version. runs.usage is the agentd.v1.Usage of
-- its model calls added up and runs.structured_output the
-- google.protobuf.Struct of its typed answer, both written when it ends.
ALTER TABLE runs ADD COLUMN request BLOB;
ALTER TABLE runs ADD COLUMN usage BLOB;
ALTER TABLE runs ADD COLUMN structured_output BLOB;
-- runs.prompt_entry_id is the entry of the run's prompt (RunRequest's
-- prompt_entry_id), set once the prompt is stored; NULL before and for
-- Continue.
ALTER TABLE runs ADD COLUMN prompt_entry_id TEXT;
-- run_metadata holds the request metadata of each run once more, as rows,
-- so ListRuns filters on it in SQL rather than by decoding requests.
CREATE TABLE run_metadata (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE INDEX run_metadata_by_key ON run_metadata (key, value);
-- ListRuns pages a session's runs newest first.
CREATE INDEX runs_by_session_start ON runs (session_pk, start_time DESC, id DESC);
DROP INDEX runs_by_session;

-- A subagent's session records the parent's run and spawn_agent tool call
-- and the profile it was spawned with (origin_session_id is the parent).
ALTER TABLE sessions ADD COLUMN origin_run_id TEXT;
ALTER TABLE sessions ADD COLUMN origin_tool_call_id TEXT;
ALTER TABLE sessions ADD COLUMN origin_profile TEXT;
-- The readers' view shows them too (a later version only adds columns).
DROP VIEW session_heads;
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
