-- The dead-letter index: one row per record in a handler's dead-letter
-- topic, written by the host right after the broker acknowledged it
-- (host/src/pipeline/dlq/index.rs), so that the console, the API and the
-- CLI search and count dead letters without reading the topic. The topic
-- stays the source of truth: `idem dlq reindex` rebuilds a handler's rows
-- from it and reports what differed. Only a sealed record's failure,
-- origin and time are indexed (anyone who can produce to the topic can
-- write the others' headers); a replay writes its outcome on the row.
CREATE TABLE idem.dead_letter (
    topic            text        NOT NULL,
    "partition"      integer     NOT NULL,
    "offset"         bigint      NOT NULL,
    handler          text        NOT NULL,
    -- sealed, unsealed (before seals, or not written by idem), forged
    authenticity     text        NOT NULL,
    -- the failure's time (sealed), else when it was indexed
    failed_at        timestamptz NOT NULL,
    class            text,
    reason           text,
    -- the reason with its numbers, ids and quoted values masked: the
    -- totals group dead letters that failed for the same cause
    pattern          text,
    attempts         integer,
    replays          integer     NOT NULL DEFAULT 0,
    envelope         boolean     NOT NULL DEFAULT false,
    source_topic     text,
    source_partition integer,
    source_offset    bigint,
    record_key       text,
    event_id         uuid,
    header_names     text[]      NOT NULL DEFAULT '{}',
    payload_bytes    integer     NOT NULL,
    payload_sha256   bytea,
    -- the payload when it is a JSON object of at most 64 KiB (search by path)
    payload          jsonb,
    -- after a replay of this record: applied, duplicate, invalid, failed
    outcome          text,
    outcome_at       timestamptz,
    PRIMARY KEY (topic, "partition", "offset")
);
CREATE INDEX dead_letter_by_time ON idem.dead_letter (handler, failed_at DESC, "partition" DESC, "offset" DESC);
CREATE INDEX dead_letter_by_event ON idem.dead_letter (handler, event_id);
CREATE INDEX dead_letter_by_key ON idem.dead_letter (handler, record_key);
