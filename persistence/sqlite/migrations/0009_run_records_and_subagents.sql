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
