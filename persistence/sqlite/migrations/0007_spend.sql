-- agentd transcript store, schema version 7: what model calls cost.
--
-- spend holds one row per stored assistant message that used tokens or
-- money (see persistence.EntrySpend): its session, the session's tenant,
-- when it was appended (Unix nanoseconds) and its total tokens and cost in
-- US dollars. Spending of a session or a tenant is summed from these small
-- rows without decoding payloads. A deleted session's rows stay (its
-- session_pk becomes NULL), so a tenant's spending cannot be undone by
-- deleting sessions. Messages stored before this version are not counted.
CREATE TABLE spend (
    key        INTEGER PRIMARY KEY,
    session_pk INTEGER REFERENCES sessions (pk) ON DELETE SET NULL,
    tenant     TEXT    NOT NULL,
    time       INTEGER NOT NULL,
    tokens     INTEGER NOT NULL,
    cost       REAL    NOT NULL
);
CREATE INDEX spend_session ON spend (session_pk);
CREATE INDEX spend_tenant ON spend (tenant, time);
