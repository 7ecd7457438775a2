-- agentd transcript store, schema version 11: event batches in append
-- order.
--
-- run_events was keyed by (run_id, first_seq) without a rowid, so its
-- batches, payloads included, lay in run id order: with many runs
-- streaming at once, every commit of the log wrote a page in a different
-- place of the table for each run it held, and split pages as they
-- filled. Rows now take a rowid in the order they are stored, so the
-- batches of one commit share the table's last pages, and only the small
-- (run_id, first_seq) index is written in run order. The columns and their
-- meaning are unchanged; the rowid column is seq_pk (no meaning beyond
-- order). The rows are kept.
CREATE TABLE run_events_v11 (
    seq_pk    INTEGER PRIMARY KEY,
    run_id    TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    first_seq INTEGER NOT NULL CHECK (first_seq >= 1),
    last_seq  INTEGER NOT NULL CHECK (last_seq >= first_seq),
    encoding  INTEGER NOT NULL DEFAULT 0 CHECK (encoding IN (0, 1)),
    payload   BLOB    NOT NULL
);
INSERT INTO run_events_v11 (run_id, first_seq, last_seq, encoding, payload)
    SELECT run_id, first_seq, last_seq, encoding, payload FROM run_events ORDER BY run_id, first_seq;
DROP TABLE run_events;
ALTER TABLE run_events_v11 RENAME TO run_events;
CREATE UNIQUE INDEX run_events_by_run ON run_events (run_id, first_seq);
