-- agentd on PostgreSQL, schema version 3: what model calls cost, as in the
-- SQLite engine's migration 0007: one row per stored assistant message
-- that used tokens or money, with its session, the session's tenant, when
-- it was appended and its total tokens and cost in US dollars. A deleted
-- session's rows stay (session_pk becomes NULL), so a tenant's spending
-- cannot be undone by deleting sessions.
CREATE TABLE spend (
    key        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_pk bigint REFERENCES sessions (pk) ON DELETE SET NULL,
    tenant     text             NOT NULL,
    time       timestamptz      NOT NULL,
    tokens     bigint           NOT NULL,
    cost       double precision NOT NULL
);
CREATE INDEX spend_session ON spend (session_pk);
CREATE INDEX spend_tenant ON spend (tenant, time);
