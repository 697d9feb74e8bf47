-- Captured events (host/src/capture): a sample of a handler's live events,
-- each with what its statements returned and its HTTP answers, redacted,
-- for `idem test --replay`. Written by the hosts (never by a handler's
-- role), one row per event (the last run of it), pruned by age and count.
CREATE TABLE idem.capture (
    handler     text        NOT NULL,
    event_id    uuid        NOT NULL,
    version     integer,
    captured_at timestamptz NOT NULL DEFAULT now(),
    capture     jsonb       NOT NULL,
    PRIMARY KEY (handler, event_id)
);
CREATE INDEX capture_latest ON idem.capture (handler, captured_at DESC);
