-- Operators' rewinds (`idem rewind`, POST /handlers/{name}/rewind): a
-- handler's group sent back to an offset, a time or the earliest record
-- kept, on every host of the group without stopping any
-- (host/src/pipeline/rewinds). The host that takes the request resolves
-- the target to one offset per partition, so every owner applies the same
-- one whenever it applies it; each partition's owner applies it at its
-- next pass (or its next owner, after a rebalance) and records when, and
-- where the partition stood then: the window the rewind sent back.
CREATE TABLE idem.rewind (
    id           bigserial   PRIMARY KEY,
    handler      text        NOT NULL,
    topic        text        NOT NULL,
    -- What was asked, as said: "the earliest record", "offset 40", a time.
    target       text        NOT NULL,
    reason       text        NOT NULL DEFAULT '',
    -- Asked past the handler's dedup retention, with --force.
    forced       boolean     NOT NULL DEFAULT false,
    requested_by text        NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE idem.rewind_partition (
    rewind      bigint      NOT NULL REFERENCES idem.rewind (id) ON DELETE CASCADE,
    "partition" integer     NOT NULL CHECK ("partition" >= 0),
    to_offset   bigint      NOT NULL CHECK (to_offset >= 0),
    -- The group's committed offset when it was asked: the dry run's end.
    asked_at    bigint      NOT NULL,
    -- Where the partition stood when its owner applied it (the window's
    -- end), when, and which host.
    from_offset bigint,
    applied_at  timestamptz,
    applied_by  text,
    PRIMARY KEY (rewind, "partition")
);

-- Every host reads what is pending each second.
CREATE INDEX rewind_partition_pending ON idem.rewind_partition (rewind) WHERE applied_at IS NULL;
