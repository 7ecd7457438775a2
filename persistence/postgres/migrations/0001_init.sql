-- agentd store on PostgreSQL, schema version 1.
--
-- The rows mean what they mean in the SQLite engine (persistence/sqlite,
-- migrations 0001 to 0005): payloads are the same protobuf bytes with the
-- same encoding values, so tools and exports read both engines alike. What
-- differs is what several agentd processes (replicas) sharing one database
-- need: claims on runs with leases and fencing generations, and control
-- messages between replicas (run_controls).
--
-- Times are timestamptz (microseconds), except entries.create_time, which
-- keeps the entry's own time to the nanosecond. Lease times
-- (runs.lease_expiry) are always the database's clock, never a replica's.

-- sessions: one row per session. pk is internal (compact foreign keys in
-- the large entries table); id is the public id. A sequence never reuses a
-- value, so pk order is creation order and a page token (a pk) never
-- skips a newer session.
CREATE TABLE sessions (
    pk                bigserial   PRIMARY KEY,
    id                text        NOT NULL UNIQUE,
    create_time       timestamptz NOT NULL,
    -- When the session last changed: created, updated, appended to, or
    -- its leaf moved.
    update_time       timestamptz NOT NULL,
    -- The current leaf entry id; NULL for an empty transcript and after
    -- SetLeaf to before the first entry. Unlike SQLite, which implies the
    -- leaf from the last entry to spare a page write, an append updates it
    -- here: the append locks the session row anyway, to order appends of
    -- several processes.
    leaf_entry_id     text,
    -- The highest seq of the session's entries (0 for none); the next
    -- append gets last_seq + 1.
    last_seq          bigint      NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    title             text        NOT NULL DEFAULT '',
    -- agentd.v1.SessionConfig, binary protobuf.
    config            bytea       NOT NULL,
    -- Where the session was forked from (ForkSession): the session and
    -- the entry whose path it copied; NULL for a session that was created,
    -- not forked. No foreign key: the origin may be deleted.
    origin_session_id text,
    origin_entry_id   text
);
CREATE INDEX sessions_by_origin ON sessions (origin_session_id) WHERE origin_session_id IS NOT NULL;

-- session_labels: a session's labels, one row per key, indexed by value
-- for ListSessions filters.
CREATE TABLE session_labels (
    session_pk bigint NOT NULL REFERENCES sessions (pk) ON DELETE CASCADE,
    key        text   NOT NULL,
    value      text   NOT NULL,
    PRIMARY KEY (session_pk, key)
);
CREATE INDEX session_labels_by_value ON session_labels (key, value);

-- entries: the transcript tree. Immutable once written. seq is the
-- per-session append order (1, 2, ...), the primary key with the session,
-- so a session's entries are one index range in append order.
CREATE TABLE entries (
    session_pk  bigint      NOT NULL REFERENCES sessions (pk) ON DELETE CASCADE,
    seq         bigint      NOT NULL CHECK (seq >= 1),
    -- The entry id, unique within the session.
    id          text        NOT NULL,
    -- NULL for a root; otherwise an entry of the same session written
    -- earlier (checked by agentd on insert).
    parent_id   text,
    -- persistence.EntryKind: "user", "assistant", "tool_result", ...,
    -- "model_change", "thinking_level_change", "label"; lets tools filter
    -- without decoding payloads.
    kind        text        NOT NULL,
    -- The entry's own time (Entry.time, which a client may set) as Unix
    -- nanoseconds: timestamptz would drop the nanoseconds the payload
    -- keeps.
    create_time bigint      NOT NULL,
    -- When the entry was appended.
    append_time timestamptz NOT NULL,
    -- How payload is stored, as entries.encoding in SQLite:
    --   0  the binary protobuf encoding of agentd.v1.Entry;
    --   1  that protobuf compressed as a zlib stream (RFC 1950); inflate
    --      it, then decode the result as agentd.v1.Entry.
    -- agentd compresses only payloads of at least 2 KiB that shrink to at
    -- most 7/8. Any other value is an error: a future encoding comes with
    -- a new schema version, which older builds refuse to open.
    encoding    smallint    NOT NULL DEFAULT 0 CHECK (encoding IN (0, 1)),
    -- persistence.Preview: a short one-line text of the entry (at most 120
    -- characters), so the tree of a session is listed without decoding
    -- payloads.
    preview     text        NOT NULL,
    -- agentd.v1.Entry as encoding says; the canonical form of the entry,
    -- which the other columns repeat parts of.
    payload     bytea       NOT NULL,
    PRIMARY KEY (session_pk, seq)
);
-- Lookups by id (a parent named by a branch, a leaf moved by navigation,
-- GetEntry) and the backstop for ids a caller chooses.
CREATE UNIQUE INDEX entries_by_id ON entries (session_pk, id);
-- Label entries are few; a partial index finds a session's labels without
-- scanning its entries.
CREATE INDEX entries_labels ON entries (session_pk, seq) WHERE kind = 'label';
-- Large payloads are zlib-compressed by agentd already (encoding 1);
-- PostgreSQL's own TOAST compression would only spend CPU on them.
ALTER TABLE entries ALTER COLUMN payload SET STORAGE EXTERNAL;

-- runs: one row per run of the agent loop. end_time NULL means started and
-- not (yet) ended.
CREATE TABLE runs (
    id            text        PRIMARY KEY,
    session_pk    bigint      NOT NULL REFERENCES sessions (pk) ON DELETE CASCADE,
    start_time    timestamptz NOT NULL,
    end_time      timestamptz,
    -- The agentd.v1.RunOutcome number; 0 (unspecified) while active.
    outcome       integer     NOT NULL DEFAULT 0,
    -- Why the run failed or was aborted; empty otherwise.
    error_message text        NOT NULL DEFAULT '',
    -- The seq of the run's last stored event (0 before the first batch),
    -- updated with every batch (the batch locks the row anyway, to order
    -- writers) and kept when the batches are pruned.
    last_seq      bigint      NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    -- The run's batches in run_events were deleted by PruneEvents.
    events_pruned boolean     NOT NULL DEFAULT false,
    -- The replica that claimed the run (ClaimRun); NULL for a run started
    -- with StartRun, which no lease or fence applies to.
    owner         text,
    -- The claim's fencing generation: 1 when claimed, incremented whenever
    -- the claim is taken away (CloseExpiredRuns, or EndRun without a
    -- fence). Every fenced write names the generation it holds, so a
    -- replica whose claim was taken away cannot write any more; 0 for a
    -- run without owner.
    generation    bigint      NOT NULL DEFAULT 0,
    -- When the owner's lease expires unless renewed (RenewLeases), on the
    -- database's clock; NULL for a run without owner. An active claimed
    -- run past it is closed by CloseExpiredRuns.
    lease_expiry  timestamptz,
    CHECK ((owner IS NULL) = (lease_expiry IS NULL))
);
CREATE INDEX runs_by_session ON runs (session_pk);
CREATE INDEX runs_active ON runs (start_time) WHERE end_time IS NULL;
CREATE INDEX runs_unpruned ON runs (end_time) WHERE end_time IS NOT NULL AND NOT events_pruned;
-- At most one active claimed run per session across all replicas: a
-- second ClaimRun fails on this index (persistence.ActiveRunError). Runs
-- without owner (StartRun) are not limited.
CREATE UNIQUE INDEX runs_one_claimed_per_session ON runs (session_pk) WHERE end_time IS NULL AND owner IS NOT NULL;

-- run_events: a run's events, as streamed to clients, in batches, exactly
-- as in SQLite. A row holds the events first_seq..last_seq of one run;
-- the event at position i of a row has seq first_seq + i. Batches of one
-- run follow each other without gaps; the transcript (entries) stays the
-- source of truth, and the event log is pruned after a retention period.
CREATE TABLE run_events (
    run_id    text     NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    first_seq bigint   NOT NULL CHECK (first_seq >= 1),
    last_seq  bigint   NOT NULL CHECK (last_seq >= first_seq),
    -- How payload is stored:
    --   0  the events' agentd.v1.AgentEvent protobufs, each preceded by
    --      its length as a varint (the "length-delimited" stream of
    --      protobuf's writeDelimitedTo, Go's protodelim);
    --   1  those same bytes compressed as a zlib stream (RFC 1950).
    encoding  smallint NOT NULL DEFAULT 0 CHECK (encoding IN (0, 1)),
    payload   bytea    NOT NULL,
    PRIMARY KEY (run_id, first_seq)
);
ALTER TABLE run_events ALTER COLUMN payload SET STORAGE EXTERNAL;

-- run_controls: control messages for the replica that owns an active run
-- (for example a tool approval that arrived at another replica), and
-- their answers. The sender stores a row and NOTIFYs the owner; the owner
-- answers in the row and NOTIFYs the sender. Answered rows are deleted an
-- hour after the answer (PruneEvents).
CREATE TABLE run_controls (
    id          bigserial   PRIMARY KEY,
    run_id      text        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    -- The run's owner when the control was sent: the replica to act on it.
    owner       text        NOT NULL,
    -- What the sender stored, as given (opaque to the store).
    payload     bytea       NOT NULL,
    -- The owner's answer, as given; NULL while unanswered.
    answer      bytea,
    create_time timestamptz NOT NULL DEFAULT now(),
    answer_time timestamptz,
    CHECK ((answer IS NULL) = (answer_time IS NULL))
);
CREATE INDEX run_controls_pending ON run_controls (owner, id) WHERE answer IS NULL;
CREATE INDEX run_controls_answered ON run_controls (answer_time) WHERE answer_time IS NOT NULL;
