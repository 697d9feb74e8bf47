-- The billing example's own table. `idem migrate --config` applies this as
-- the administrator, in the handler's schema; the handler's role gets
-- SELECT, INSERT, UPDATE and DELETE on it, nothing more.
CREATE TABLE billing.charge (
    event_id    uuid          PRIMARY KEY,
    order_id    bigint        NOT NULL,
    customer_id bigint        NOT NULL,
    amount      numeric(14,2) NOT NULL,
    currency    char(3)       NOT NULL,
    charged_at  timestamptz   NOT NULL DEFAULT now()
);
