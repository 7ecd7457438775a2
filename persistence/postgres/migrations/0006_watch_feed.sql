-- agentd on PostgreSQL, schema version 5: the feed of changes between
-- replicas, so a watch (WatchSession, WatchSessions,
-- WatchPendingInteractions) on one replica learns what the others did.
--
-- watch_feed.payload is the binary protobuf
-- agentd.internal.replica.v1.WatchChange a replica stored; origin names
-- that replica. Writers take an EXCLUSIVE lock on the table for their
-- transaction, so seq order is commit order and a reader that resumes
-- after the last seq it read never skips a change committed later with a
-- lower seq. Rows are pruned by age; watch_feed_pruned.upto is the last
-- seq pruned, so a reader that fell further behind learns it missed
-- changes.
CREATE TABLE watch_feed (
    seq     bigserial   PRIMARY KEY,
    origin  text        NOT NULL,
    payload bytea       NOT NULL,
    stored  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE watch_feed_pruned (
    upto bigint NOT NULL
);
INSERT INTO watch_feed_pruned (upto) VALUES (0);
