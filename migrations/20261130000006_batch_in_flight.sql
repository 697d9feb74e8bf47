-- The batch each partition is executing, written by idem's own role outside
-- the batch's transaction just before it starts and deleted once it ends.
-- A row that survives names the batch a crash rolled back: the host that is
-- assigned the partition next runs that batch's records one at a time and
-- counts their executions (idem.execution_attempt), so that an event killing
-- the host is found however deep in its batch it was
-- (host/src/pipeline/attempts.rs).
CREATE TABLE idem.batch_in_flight (
    consumer     text        NOT NULL,
    topic        text        NOT NULL,
    "partition"  integer     NOT NULL,
    first_offset bigint      NOT NULL,
    last_offset  bigint      NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, topic, "partition")
);
