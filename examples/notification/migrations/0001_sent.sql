CREATE TABLE notification.sent (
    event_id    uuid        PRIMARY KEY,
    customer_id bigint      NOT NULL,
    message     text        NOT NULL,
    sent_at     timestamptz NOT NULL DEFAULT now()
);
