-- Operators' pauses (`idem pause`, POST /handlers/{name}/pause): a handler,
-- one of its topics or one partition, held until resumed. Durable, so a
-- paused partition stays paused across restarts and rebalances: every host
-- reads this table each second and at every assignment
-- (host/src/pipeline/pauses.rs). A row covers: the handler's every topic
-- (topic = ''), every partition of its topic ("partition" = -1), or one.
CREATE TABLE idem.pause (
    handler     text        NOT NULL,
    topic       text        NOT NULL DEFAULT '',
    "partition" integer     NOT NULL DEFAULT -1 CHECK ("partition" >= -1),
    reason      text        NOT NULL DEFAULT '',
    paused_by   text        NOT NULL,
    paused_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (handler, topic, "partition"),
    CHECK ("partition" = -1 OR topic <> '')
);

-- The fleet view shows which partitions an operator holds.
ALTER TABLE idem.fleet_partition ADD COLUMN held boolean NOT NULL DEFAULT false;
