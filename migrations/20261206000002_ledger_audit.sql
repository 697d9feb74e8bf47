-- The ledger audit (pipeline/audit) asks, per chunk of a partition's
-- records, which of them the dead-letter index holds by their place on
-- the source topic.
CREATE INDEX dead_letter_by_source ON idem.dead_letter (handler, source_topic, source_partition, source_offset);
