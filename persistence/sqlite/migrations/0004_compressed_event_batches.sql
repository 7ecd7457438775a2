-- agentd transcript store, schema version 4: compressed event batches.
--
-- run_events.encoding now says how run_events.payload is stored, with the
-- same values as entries.encoding (migration 0002):
--
--   0  the events' length-delimited agentd.v1.AgentEvent protobufs, as in
--      schema version 3 (every row written by version 3 reads as 0);
--   1  those same bytes compressed as a zlib stream (RFC 1950). Inflate
--      it, then read the length-delimited events.
--
-- A batch of a streaming answer holds thousands of small events that
-- repeat the session and run ids, so it shrinks to a fraction of its size,
-- and the store writes that many fewer pages. SQLite cannot change a CHECK
-- constraint in place, so the table is rebuilt; its rows are kept.
CREATE TABLE run_events_v4 (
    run_id    TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    first_seq INTEGER NOT NULL CHECK (first_seq >= 1),
    last_seq  INTEGER NOT NULL CHECK (last_seq >= first_seq),
    encoding  INTEGER NOT NULL DEFAULT 0 CHECK (encoding IN (0, 1)),
    payload   BLOB    NOT NULL,
    PRIMARY KEY (run_id, first_seq)
) WITHOUT ROWID;
INSERT INTO run_events_v4 (run_id, first_seq, last_seq, encoding, payload)
    SELECT run_id, first_seq, last_seq, encoding, payload FROM run_events;
DROP TABLE run_events;
ALTER TABLE run_events_v4 RENAME TO run_events;
