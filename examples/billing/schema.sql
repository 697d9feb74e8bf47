-- The billing example's own table. The handler owns it; the host never
-- touches it. Apply it once per database (the demo and the tests do).
CREATE SCHEMA IF NOT EXISTS billing;

CREATE TABLE IF NOT EXISTS billing.charge (
    event_id    uuid          PRIMARY KEY,
    order_id    bigint        NOT NULL,
    customer_id bigint        NOT NULL,
    amount      numeric(14,2) NOT NULL,
    currency    char(3)       NOT NULL,
    charged_at  timestamptz   NOT NULL DEFAULT now()
);
