-- agentd on PostgreSQL, schema version 2: the tenant of each session, as
-- in the SQLite engine's migration 0006: the tenant the session belongs
-- to, taken from the caller's credentials when it was created; '' for a
-- session of no tenant. Sessions of one tenant are listed by (tenant, pk).
ALTER TABLE sessions ADD COLUMN tenant text NOT NULL DEFAULT '';
CREATE INDEX sessions_tenant ON sessions (tenant, pk);
