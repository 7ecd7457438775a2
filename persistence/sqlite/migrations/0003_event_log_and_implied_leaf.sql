-- agentd transcript store, schema version 3: run event logs, and a leaf
-- that an append no longer writes.
--
-- run_events: a run's events, as streamed to clients, in batches. A row
-- holds the events first_seq..last_seq of one run; payload is those
-- events' agentd.v1.AgentEvent protobufs, each preceded by its length as a
-- varint (the "length-delimited" stream of protobuf's writeDelimitedTo,
-- Go's protodelim, Python's _VarintBytes + SerializeToString). The event
-- at position i of a row has seq first_seq + i. encoding is 0 (plain); any
-- other value is an error, as for entries.encoding. Batches of one run
-- follow each other without gaps, and the transcript (entries) stays the
-- source of truth: the event log lets a client resume a stream after a
-- restart, and is pruned after a retention period. Keyed by the run and
-- first_seq without a rowid, so storing a batch writes one B-tree.
CREATE TABLE run_events (
    run_id    TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    first_seq INTEGER NOT NULL CHECK (first_seq >= 1),
    last_seq  INTEGER NOT NULL CHECK (last_seq >= first_seq),
    encoding  INTEGER NOT NULL DEFAULT 0 CHECK (encoding = 0),
    payload   BLOB    NOT NULL,
    PRIMARY KEY (run_id, first_seq)
) WITHOUT ROWID;

-- A run's last stored seq is the last_seq of its last batch; runs.last_seq
-- keeps it when the batches are pruned, which sets runs.events_pruned.
ALTER TABLE runs ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN events_pruned INTEGER NOT NULL DEFAULT 0 CHECK (events_pruned IN (0, 1));
CREATE INDEX runs_unpruned ON runs (end_time) WHERE end_time IS NOT NULL AND events_pruned = 0;

-- The leaf. An append used to move sessions.leaf_entry_id and next_seq,
-- which wrote the session's page on every commit; now the leaf is implied:
-- it is the session's last appended entry (the highest seq), unless
-- SetLeaf chose another entry after that append. sessions.leaf_seq is the
-- highest seq at the time of the last SetLeaf:
--
--   leaf = leaf_entry_id   when no entry has a seq above leaf_seq
--        = the entry with the highest seq   otherwise
--
-- and the next seq is the highest seq + 1. entries.append_time is when the
-- entry was appended (entries.create_time is the entry's own time, which a
-- client may set); a session's update time is the later of
-- sessions.update_time and its last entry's append_time.
ALTER TABLE sessions ADD COLUMN leaf_seq INTEGER NOT NULL DEFAULT 0;
UPDATE sessions SET leaf_seq = next_seq - 1;
ALTER TABLE sessions DROP COLUMN next_seq;
ALTER TABLE entries ADD COLUMN append_time INTEGER;

-- entries_by_id went too: it cost every append a second B-tree page.
-- Entry ids are unique per session by construction (random 64-bit ids
-- assigned by agentd; ids a caller chooses are checked against the
-- session's entries before they are written), and the rare lookups by id
-- (a parent named by a branch, a leaf moved by navigation) scan the
-- session's key range.
DROP INDEX entries_by_id;
