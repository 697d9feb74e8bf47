-- Handler modules uploaded to the store (`idem deploy`, the admin API), and
-- which version of each handler is active: exactly one, enforced here.
CREATE TABLE idem.handler_module (
    handler     text        NOT NULL,
    version     integer     NOT NULL CHECK (version > 0),
    sha256      text        NOT NULL,
    bytes       bytea       NOT NULL,
    size        integer     NOT NULL,
    uploaded_at timestamptz NOT NULL DEFAULT now(),
    uploaded_by text        NOT NULL,
    note        text,
    active      boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (handler, version),
    -- The same bytes uploaded twice are one version.
    UNIQUE (handler, sha256)
);
CREATE UNIQUE INDEX handler_module_one_active ON idem.handler_module (handler) WHERE active;

-- Which module version processed each event (NULL: before this migration,
-- or a native handler).
ALTER TABLE idem.processed_event ADD COLUMN module_version integer;

-- The claim of events 1..n for the calling role's handler, as
-- idem_api.claim_many, and one check more: `p_module_version` must be the
-- handler's active version (NULL: a native handler, not versioned). A host
-- that has not yet switched to a newly activated version gets SQLSTATE
-- ID001 and runs the events again on the active one. The check holds a
-- shared advisory lock that activations take exclusively, so no transaction
-- on the replaced version commits after the activation does.
CREATE FUNCTION idem_api.claim_events(
    p_event_ids uuid[], p_topics text[], p_partitions integer[], p_offsets bigint[], p_payload_sha256 bytea[],
    p_module_version integer
)
RETURNS text[]
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    h text;
    n integer := cardinality(p_event_ids);
    active_version integer;
    claimed uuid[];
    answers text[];
BEGIN
    SELECT handler INTO h FROM idem.handler_role WHERE role_name = session_user;
    IF h IS NULL THEN
        RAISE EXCEPTION 'role % is not a handler role of this database (run idem migrate --config)', session_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- Only a handler without stored modules (a native one) runs unversioned.
    IF p_module_version IS NULL AND EXISTS (SELECT 1 FROM idem.handler_module WHERE handler = h) THEN
        RAISE EXCEPTION 'handler %: a claim must name its module version (the store holds versions)', h
            USING ERRCODE = 'ID001';
    END IF;
    IF p_module_version IS NOT NULL THEN
        -- Held to the end of the claiming transaction: an activation (which
        -- takes this lock exclusively) waits for every transaction running
        -- the version it replaces, so none commits after it.
        PERFORM pg_advisory_xact_lock_shared(hashtext('idem.handler_module'), hashtext(h));
        SELECT version INTO active_version FROM idem.handler_module WHERE handler = h AND active;
        IF active_version IS DISTINCT FROM p_module_version THEN
            RAISE EXCEPTION 'handler %: module version % is not the active one (%)', h, p_module_version,
                coalesce(active_version::text, 'none') USING ERRCODE = 'ID001';
        END IF;
    END IF;
    IF cardinality(p_topics) <> n OR cardinality(p_partitions) <> n OR cardinality(p_offsets) <> n
        OR cardinality(p_payload_sha256) <> n THEN
        RAISE EXCEPTION 'claim_events: the arrays differ in length' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (SELECT count(DISTINCT e) FROM unnest(p_event_ids) AS e) <> n THEN
        RAISE EXCEPTION 'claim_events: an event id appears twice' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Event-id order: two batches sharing redelivered events never wait on
    -- each other in a cycle (see claim_many).
    WITH inserted AS (
        INSERT INTO idem.processed_event (event_id, consumer, topic, "partition", "offset", payload_sha256, module_version)
        SELECT u.e, h, u.t, u.p, u.o, u.s, p_module_version
        FROM unnest(p_event_ids, p_topics, p_partitions, p_offsets, p_payload_sha256) AS u(e, t, p, o, s)
        ORDER BY u.e
        ON CONFLICT DO NOTHING
        RETURNING event_id
    )
    SELECT coalesce(array_agg(event_id), '{}') INTO claimed FROM inserted;
    SELECT array_agg(
               CASE WHEN c.event_id IS NOT NULL THEN 'claimed'
                    WHEN pe.payload_sha256 IS NULL OR pe.payload_sha256 = u.s THEN 'duplicate'
                    ELSE 'conflict' END
               ORDER BY u.i)
    INTO answers
    FROM unnest(p_event_ids, p_payload_sha256) WITH ORDINALITY AS u(e, s, i)
    LEFT JOIN unnest(claimed) AS c(event_id) ON c.event_id = u.e
    LEFT JOIN idem.processed_event pe ON pe.event_id = u.e AND pe.consumer = h AND c.event_id IS NULL;
    RETURN coalesce(answers, '{}');
END
$$;
REVOKE ALL ON FUNCTION idem_api.claim_events(uuid[], text[], integer[], bigint[], bytea[], integer) FROM PUBLIC;

-- The older claims check no version: handler roles lose them, so a host of
-- an earlier release stops (a fatal "permission denied" that names `idem
-- migrate`) instead of processing events with a module that may have been
-- replaced. Upgrade every host with this migration.
DO $$
DECLARE
    r text;
BEGIN
    FOR r IN SELECT role_name FROM idem.handler_role LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format(
                'GRANT EXECUTE ON FUNCTION idem_api.claim_events(uuid[], text[], integer[], bigint[], bytea[], integer) TO %I',
                r
            );
            EXECUTE format('REVOKE EXECUTE ON FUNCTION idem_api.claim(uuid, text, integer, bigint, bytea) FROM %I', r);
            EXECUTE format(
                'REVOKE EXECUTE ON FUNCTION idem_api.claim_many(uuid[], text[], integer[], bigint[], bytea[]) FROM %I', r
            );
        END IF;
    END LOOP;
END
$$;

-- Hosts LISTEN on this channel for activations (they also poll: a
-- notification sent while a host's connection is down is lost).
CREATE FUNCTION idem.notify_module_change() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_notify('idem_module', coalesce(NEW.handler, OLD.handler));
    RETURN NULL;
END
$$;
CREATE TRIGGER handler_module_changed AFTER INSERT OR UPDATE OR DELETE ON idem.handler_module
    FOR EACH ROW EXECUTE FUNCTION idem.notify_module_change();
