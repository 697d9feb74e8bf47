-- The fleet: every host records itself and the partitions it owns every
-- two seconds (host/src/telemetry/fleet.rs), so that any host's console,
-- API (GET /fleet) and `idem status` show the whole group: which host owns
-- which partition, each host's health and version. A host that stops
-- removes its rows; one that dies leaves them to age (shown as gone after
-- ten seconds, removed after a day).
CREATE TABLE idem.fleet_host (
    host        text        PRIMARY KEY,
    version     text        NOT NULL,
    admin       text,
    started_at  timestamptz NOT NULL,
    seen_at     timestamptz NOT NULL,
    -- why it is not ready (empty: ready), as its /readyz says
    not_ready   text[]      NOT NULL DEFAULT '{}'
);
CREATE TABLE idem.fleet_partition (
    handler     text        NOT NULL,
    topic       text        NOT NULL,
    "partition" integer     NOT NULL,
    host        text        NOT NULL,
    committed   bigint,
    end_offset  bigint,
    paused      boolean     NOT NULL,
    queued      integer     NOT NULL,
    seen_at     timestamptz NOT NULL,
    PRIMARY KEY (handler, topic, "partition")
);
