-- agentd transcript store, schema version 8: the reader's contract, and a
-- view of each session with its leaf.
--
-- Programs other than agentd may read this database while agentd writes it:
-- open it read-only (file:agentd.db?mode=ro with SQLite's URI names), in any
-- language; SQLite's WAL gives every read transaction a consistent snapshot
-- and no reader ever holds up agentd. Keep read transactions short: while
-- one is open the WAL cannot be reused, so it grows by what agentd writes
-- meanwhile (agentd empties it again once the read ends).
--
-- What a reader may rely on, in this and every later version (a later
-- version only adds; one that must change any of it says so in its
-- migration):
--
--   PRAGMA application_id   1634166372 (0x61676e64, "agnd"): an agentd
--                           database.
--   PRAGMA user_version     the schema version (this file: 8). A reader
--                           that knows versions up to N refuses a file
--                           above N.
--   session_heads (below)   one row per session: session_pk, session_id (the
--                           API's session id), tenant, title, config
--                           (agentd.v1.SessionConfig protobuf), create_time
--                           and update_time (Unix nanoseconds),
--                           leaf_entry_id (NULL for an empty transcript),
--                           last_seq, origin_session_id and origin_entry_id
--                           (a fork's source; NULL otherwise).
--   entries                 one row per transcript entry: session_pk, seq
--                           (1, 2, 3, ... in append order within the
--                           session), key (session_pk * 2^32 + seq, so
--                           ORDER BY key is append order and
--                           "key > pk * 4294967296 AND key < (pk + 1) *
--                           4294967296" is one session's range), id,
--                           parent_id (NULL for a root), kind (the
--                           AgentMessage or Entry kind, such as 'user',
--                           'assistant', 'tool_result', 'compaction_summary',
--                           'label'), create_time (Unix nanoseconds),
--                           encoding and payload: payload is the binary
--                           protobuf of agentd.v1.Entry when encoding = 0,
--                           and that protobuf compressed as a zlib stream
--                           (RFC 1950; Python's zlib.decompress) when
--                           encoding = 1 (see version 2); preview, a
--                           one-line text of at most 120 characters (NULL
--                           in rows written before version 5).
--
-- A conversation is the path from the session's leaf to its root: read the
-- session's entries in key order (one range scan), follow parent_id from
-- leaf_entry_id, and reverse. What the model sees starts at the latest
-- compaction summary on the path: the summary, then the entries from its
-- first_kept_entry_id on (GetContext shows exactly what the next model call
-- gets, after the session's context policies). Every other table and column
-- is agentd's own and may change with any version.
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
    s.origin_entry_id                                  AS origin_entry_id
FROM sessions s
LEFT JOIN entries last ON last.key = (SELECT max(key) FROM entries WHERE key > s.pk * 4294967296 AND key < (s.pk + 1) * 4294967296);
