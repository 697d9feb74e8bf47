-- A claim keeps the hash of the payload it was made for, so that an event id
-- reused with a different payload is told apart from a duplicate: the first
-- is a producer's bug whose event would otherwise vanish as "already
-- processed", the second is Kafka's at-least-once delivery. Rows claimed
-- before this migration have no hash and count as duplicates.
ALTER TABLE idem.processed_event ADD COLUMN payload_sha256 bytea;

-- Claims `p_event_id` for the calling role's handler and answers:
--   'claimed'   the first time: run the handler;
--   'duplicate' already processed with the same payload (or with no hash);
--   'conflict'  already processed with a different payload.
-- The handler's namespace comes from `session_user` through
-- idem.handler_role, never from an argument. Under READ COMMITTED a
-- concurrent claim of the same key waits for the first transaction to end;
-- the SELECT that follows then sees its committed row.
CREATE FUNCTION idem_api.claim(
    p_event_id uuid, p_topic text, p_partition integer, p_offset bigint, p_payload_sha256 bytea
)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    h text;
    previous bytea;
BEGIN
    SELECT handler INTO h FROM idem.handler_role WHERE role_name = session_user;
    IF h IS NULL THEN
        RAISE EXCEPTION 'role % is not a handler role of this database (run idem migrate --config)', session_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    INSERT INTO idem.processed_event (event_id, consumer, topic, "partition", "offset", payload_sha256)
    VALUES (p_event_id, h, p_topic, p_partition, p_offset, p_payload_sha256)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN 'claimed';
    END IF;
    SELECT payload_sha256 INTO previous FROM idem.processed_event WHERE event_id = p_event_id AND consumer = h;
    IF previous IS NULL OR previous = p_payload_sha256 THEN
        RETURN 'duplicate';
    END IF;
    RETURN 'conflict';
END
$$;
REVOKE ALL ON FUNCTION idem_api.claim(uuid, text, integer, bigint, bytea) FROM PUBLIC;

-- Roles provisioned before this migration keep the right to claim.
DO $$
DECLARE
    r text;
BEGIN
    FOR r IN SELECT role_name FROM idem.handler_role LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION idem_api.claim(uuid, text, integer, bigint, bytea) TO %I', r);
        END IF;
    END LOOP;
END
$$;

-- The old signature stays, for hosts of the previous release still running
-- during a rolling upgrade: it claims with no payload hash (a duplicate
-- then never counts as a conflict).
CREATE OR REPLACE FUNCTION idem_api.claim(p_event_id uuid, p_topic text, p_partition integer, p_offset bigint)
RETURNS boolean
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT idem_api.claim(p_event_id, p_topic, p_partition, p_offset, NULL) = 'claimed' $$;
