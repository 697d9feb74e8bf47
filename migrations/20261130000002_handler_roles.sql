-- Handlers log in as roles of their own, with no rights on the `idem`
-- schema. They claim events through one SECURITY DEFINER function, which
-- takes the handler's namespace from `session_user` (the login role, which
-- no SET ROLE changes) through this mapping, never from an argument: a guest
-- that calls it directly can only claim in its own namespace.

-- Written by `idem migrate --config`: which login role is which handler.
CREATE TABLE idem.handler_role (
    role_name   text PRIMARY KEY,
    handler     text NOT NULL UNIQUE,
    schema_name text NOT NULL
);

-- Handler migrations applied, per handler (see `idem migrate --config`).
CREATE TABLE idem.handler_migration (
    handler    text        NOT NULL,
    version    bigint      NOT NULL,
    name       text        NOT NULL,
    sha256     text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (handler, version)
);

-- Nobody but idem's own role reaches idem's tables.
REVOKE ALL ON SCHEMA idem FROM PUBLIC;

-- The one schema handler roles get USAGE on: it holds only the claim.
CREATE SCHEMA idem_api;
REVOKE ALL ON SCHEMA idem_api FROM PUBLIC;

-- Claims `p_event_id` for the calling role's handler: true the first time,
-- false when it was already processed. Under READ COMMITTED a concurrent
-- claim of the same key waits for the first transaction to end.
CREATE FUNCTION idem_api.claim(p_event_id uuid, p_topic text, p_partition integer, p_offset bigint)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    h text;
BEGIN
    SELECT handler INTO h FROM idem.handler_role WHERE role_name = session_user;
    IF h IS NULL THEN
        RAISE EXCEPTION 'role % is not a handler role of this database (run idem migrate --config)', session_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    INSERT INTO idem.processed_event (event_id, consumer, topic, "partition", "offset")
    VALUES (p_event_id, h, p_topic, p_partition, p_offset)
    ON CONFLICT DO NOTHING;
    RETURN FOUND;
END
$$;
REVOKE ALL ON FUNCTION idem_api.claim(uuid, text, integer, bigint) FROM PUBLIC;
