-- agentd on PostgreSQL, schema version 5: reserved event seqs, as in the
-- SQLite engine's migration 0010.
--
-- runs.reserved_seq is the largest seq a run's event log may have streamed
-- to clients before storing it (Store.ReserveEvents); 0 for none. The
-- events that close an interrupted run's log follow it.
ALTER TABLE runs ADD COLUMN reserved_seq bigint NOT NULL DEFAULT 0;
