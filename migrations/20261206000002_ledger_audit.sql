-- The ledger audit (pipeline/audit) asks, per chunk of a partition's
-- records, which of them the dead-letter index holds by their place on
-- the source topic.
CREATE INDEX dead_letter_by_source ON idem.dead_letter (handler, source_topic, source_partition, source_offset);

-- Where the audit of each partition of a handler begins: the first record
-- the handler's group accounted for there (or its committed offset when
-- first audited), set once. A group that started at `latest` never
-- consumed what came before it, which the audit must not call lost.
CREATE TABLE idem.audit_start (
    handler      text    NOT NULL,
    topic        text    NOT NULL,
    "partition"  integer NOT NULL,
    first_offset bigint  NOT NULL,
    PRIMARY KEY (handler, topic, "partition")
);
