-- runs.reserved_seq is the largest seq a run's event log may have streamed
-- to clients before storing it (Store.ReserveEvents); 0 for none. The
-- events that close an interrupted run's log follow it, so they never take
-- the seq of an event a client already received.
ALTER TABLE runs ADD COLUMN reserved_seq INTEGER NOT NULL DEFAULT 0;
