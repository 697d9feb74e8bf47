-- Executions of an event started by a host that has not yet committed any
-- event of that partition since it was assigned: the only executions a
-- crash loop can consist of (see host/src/pipeline/attempts.rs). A row
-- lives from the first such execution until its record is resolved; a host
-- that finds more than `max_attempts` there dead-letters the record instead
-- of running it again. Written by idem's own role, outside any event's
-- transaction (a crash must not roll it back).
CREATE TABLE idem.execution_attempt (
    consumer    text        NOT NULL,
    topic       text        NOT NULL,
    "partition" integer     NOT NULL,
    "offset"    bigint      NOT NULL,
    attempts    integer     NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, topic, "partition", "offset")
);
