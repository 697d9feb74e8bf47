-- A secret of this database's idem hosts, for the part of each consumer's
-- static group membership id (`group.instance.id`) that nobody outside can
-- compute: a Kafka client that joins a handler's group with a host's id
-- fences that host's consumer, so the id must not be guessable from the
-- host's name (see host/src/identity.rs). One row, made once, from
-- PostgreSQL's strong random source (gen_random_uuid, 2 x 122 bits);
-- readable by idem's role only (handler roles have no USAGE on schema idem).
CREATE TABLE idem.instance_secret (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    secret bytea NOT NULL
);
REVOKE ALL ON idem.instance_secret FROM PUBLIC;
INSERT INTO idem.instance_secret (secret)
VALUES (decode(replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', ''), 'hex'));
