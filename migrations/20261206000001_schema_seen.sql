-- The writer schema ids each registry-format handler has met on its topic
-- (docs/formats.md, "The contract check"): every host records the ids it
-- has fetched, and refreshes last_seen hourly while it keeps them;
-- `idem check` reads the handler's reader schema against the ids seen
-- within its dedup retention, besides its subject's versions (a version
-- deleted from the registry may still be on the topic).
CREATE TABLE idem.schema_seen (
    consumer   text        NOT NULL,
    schema_id  bigint      NOT NULL,
    first_seen timestamptz NOT NULL DEFAULT now(),
    last_seen  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, schema_id)
);
REVOKE ALL ON idem.schema_seen FROM PUBLIC;
