-- agentd on PostgreSQL, schema version 4: run records for programs
-- (GetRun, ListRuns) and the origin of subagent sessions, as in the SQLite
-- engine's migration 0009.
--
-- runs.request is the binary protobuf agentd.v1.RunRequest that started
-- the run; NULL for a run recorded before this version. runs.usage is the
-- agentd.v1.Usage of its model calls added up and runs.structured_output
-- the google.protobuf.Struct of its typed answer, both written when it
-- ends.
ALTER TABLE runs ADD COLUMN request bytea;
ALTER TABLE runs ADD COLUMN usage bytea;
ALTER TABLE runs ADD COLUMN structured_output bytea;
CREATE INDEX runs_by_session_start ON runs (session_pk, start_time DESC, id DESC);
DROP INDEX runs_by_session;

ALTER TABLE sessions ADD COLUMN origin_run_id text;
ALTER TABLE sessions ADD COLUMN origin_tool_call_id text;
ALTER TABLE sessions ADD COLUMN origin_profile text;
