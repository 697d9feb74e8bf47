CREATE SCHEMA IF NOT EXISTS notification;

CREATE TABLE IF NOT EXISTS notification.sent (
    event_id    uuid        PRIMARY KEY,
    customer_id bigint      NOT NULL,
    message     text        NOT NULL,
    sent_at     timestamptz NOT NULL DEFAULT now()
);
