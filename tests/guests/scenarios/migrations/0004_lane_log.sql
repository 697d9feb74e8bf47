-- The `lane` scenario's log: each record's key, its place among that key's
-- records, and when it began and ended on the clock (not the transaction's
-- start), so tests see the order within a key and the overlap across keys.
CREATE TABLE scenario.lane_log (
    id       bigserial   PRIMARY KEY,
    event_id uuid        NOT NULL UNIQUE,
    key      text        NOT NULL,
    seq      bigint      NOT NULL,
    began    timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended    timestamptz
);
