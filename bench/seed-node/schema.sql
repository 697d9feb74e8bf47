-- The seed's processed_event (R-KFK-IDEM-2), keyed on (event_id,
-- consumer_group) as the seed says for several groups on one topic.
CREATE SCHEMA IF NOT EXISTS seed;
CREATE TABLE IF NOT EXISTS seed.processed_event (
    event_id       uuid        NOT NULL,
    consumer_group text        NOT NULL,
    processed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, consumer_group)
);
CREATE INDEX IF NOT EXISTS ix_processed_event_processed_at ON seed.processed_event (processed_at);
