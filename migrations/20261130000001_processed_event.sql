-- idem's own state lives in the `idem` schema; every host statement names it.
CREATE SCHEMA IF NOT EXISTS idem;

-- One row per (event, handler) whose effect has been committed.
-- `consumer` is the handler's name, not the Kafka group: an operator may
-- rename a group to reset its offsets, and that must not re-apply effects.
CREATE TABLE idem.processed_event (
    event_id     uuid        NOT NULL,
    consumer     text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    topic        text        NOT NULL,
    "partition"  integer     NOT NULL,
    "offset"     bigint      NOT NULL,
    PRIMARY KEY (event_id, consumer)
);

-- Retention (a later issue) deletes or detaches by age.
CREATE INDEX processed_event_processed_at ON idem.processed_event (processed_at);
