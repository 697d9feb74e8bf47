-- Lanes (`ordering = "key"` or `"none"`, host/src/config/ordering.rs): a
-- partition has a batch in flight per lane, so a row per lane. A crash
-- leaves every lane's row; the partition's next owner runs its records
-- alone, counted, up to the last offset of any of them.
ALTER TABLE idem.batch_in_flight ADD COLUMN lane integer NOT NULL DEFAULT 0;
ALTER TABLE idem.batch_in_flight DROP CONSTRAINT batch_in_flight_pkey;
ALTER TABLE idem.batch_in_flight ADD PRIMARY KEY (consumer, topic, "partition", lane);
