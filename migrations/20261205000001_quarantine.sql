-- The quarantine (`[handler.failure] on_exhausted = "quarantine"`,
-- host/src/pipeline/quarantine): a key whose event failed is parked, and
-- that event and every later event of the key wait here, in order, while
-- the partition's other keys flow and its offsets move on. A parked key
-- is retried when due (a retryable failure waiting out its backoff),
-- held once its event's attempts are spent, until an operator releases it
-- (its events run again in order, each once) or dead-letters it.
CREATE TABLE idem.parked_key (
    handler       text        NOT NULL,
    key           bytea       NOT NULL,
    -- Where its events come from (the partition its key hashes to).
    topic         text        NOT NULL,
    "partition"   integer     NOT NULL,
    -- 'retrying': its first event waits out a backoff until due_at;
    -- 'held': that event's attempts are spent, an operator must act;
    -- 'released': an operator released it, due at once.
    state         text        NOT NULL CHECK (state IN ('retrying', 'held', 'released')),
    due_at        timestamptz,
    -- The failure that parked the key, and its first event's latest.
    first_failure text        NOT NULL,
    last_failure  text        NOT NULL,
    last_class    text        NOT NULL,
    parked_at     timestamptz NOT NULL DEFAULT now(),
    -- The host running its events now, and until when that lease holds.
    leased_by     text,
    lease_until   timestamptz,
    PRIMARY KEY (handler, key)
);

CREATE INDEX parked_key_due ON idem.parked_key (handler, due_at) WHERE state <> 'held';

CREATE TABLE idem.parked_event (
    handler          text        NOT NULL,
    key              bytea       NOT NULL,
    -- The order the key's events run in: the order they were parked,
    -- which is their order on the partition.
    seq              bigserial,
    topic            text        NOT NULL,
    "partition"      integer     NOT NULL,
    "offset"         bigint      NOT NULL,
    -- The record, byte for byte: its value, its headers as a JSON array of
    -- [name, base64 value or null], its timestamp (ms since the epoch).
    value            bytea,
    headers          jsonb       NOT NULL,
    record_timestamp bigint,
    -- Executions spent: counted before each runs, so one that kills the
    -- host is spent too.
    attempts         integer     NOT NULL DEFAULT 0,
    parked_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (handler, key, seq),
    -- A record redelivered while parked is parked once.
    UNIQUE (handler, topic, "partition", "offset"),
    FOREIGN KEY (handler, key) REFERENCES idem.parked_key (handler, key) ON DELETE CASCADE
);
