-- agentd transcript store, schema version 6: the tenant of each session.
--
-- sessions.tenant is the tenant the session belongs to, taken from the
-- caller's credentials when it was created; '' for a session of no tenant
-- (agentd without tenants, or created by an admin). Sessions of one tenant
-- are listed by (tenant, pk).
ALTER TABLE sessions ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
CREATE INDEX sessions_tenant ON sessions (tenant, pk);
