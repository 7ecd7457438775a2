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
-- runs.prompt_entry_id is the entry of the run's prompt, set once it is
-- stored; run_metadata repeats each run's request metadata as rows for
-- ListRuns' filter.
ALTER TABLE runs ADD COLUMN prompt_entry_id text;
CREATE TABLE run_metadata (
    run_id text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key    text NOT NULL,
    value  text NOT NULL,
    PRIMARY KEY (run_id, key)
);
CREATE INDEX run_metadata_by_key ON run_metadata (key, value);
CREATE INDEX runs_by_session_start ON runs (session_pk, start_time DESC, id DESC);
DROP INDEX runs_by_session;

ALTER TABLE sessions ADD COLUMN origin_run_id text;
ALTER TABLE sessions ADD COLUMN origin_tool_call_id text;
ALTER TABLE sessions ADD COLUMN origin_profile text;
