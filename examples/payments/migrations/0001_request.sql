-- One row per payment request taken, with the event that caused it.
CREATE TABLE payments.request (
    event_id  uuid          PRIMARY KEY,
    order_id  bigint        NOT NULL,
    amount    numeric(14,2) NOT NULL,
    currency  char(3)       NOT NULL,
    caused_by uuid,
    taken_at  timestamptz   NOT NULL DEFAULT now()
);
