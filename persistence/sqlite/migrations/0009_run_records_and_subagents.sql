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
-- ListRuns pages a session's runs newest first.
CREATE INDEX runs_by_session_start ON runs (session_pk, start_time DESC, id DESC);
DROP INDEX runs_by_session;

-- A subagent's session records the parent's run and spawn_agent tool call
-- and the profile it was spawned with (origin_session_id is the parent).
ALTER TABLE sessions ADD COLUMN origin_run_id TEXT;
ALTER TABLE sessions ADD COLUMN origin_tool_call_id TEXT;
ALTER TABLE sessions ADD COLUMN origin_profile TEXT;
