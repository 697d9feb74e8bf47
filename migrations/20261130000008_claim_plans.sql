-- The claim's plans are cached per connection (PL/pgSQL), and pooled
-- connections live for hours: a generic plan made while
-- idem.processed_event was nearly empty scanned the whole table on every
-- later claim (measured: the per-event benchmark fell from 3,000 to 330
-- claims/s at 85,000 rows). The one statement that reads processed_event
-- by key is now planned on each call, with the table as it is; the others
-- keep their cached plans. (Planning every statement on each call halved
-- the per-event rate; disabling sequential scans for the function made a
-- claim take 60-130 ms.)
CREATE OR REPLACE FUNCTION idem_api.claim_events(
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
    -- Planned on each call (EXECUTE), with the table as it is now: a cached
    -- generic plan made while the table was nearly empty would scan it.
    EXECUTE $q$
        SELECT array_agg(
                   CASE WHEN c.event_id IS NOT NULL THEN 'claimed'
                        WHEN pe.payload_sha256 IS NULL OR pe.payload_sha256 = u.s THEN 'duplicate'
                        ELSE 'conflict' END
                   ORDER BY u.i)
        FROM unnest($1, $2) WITH ORDINALITY AS u(e, s, i)
        LEFT JOIN unnest($3) AS c(event_id) ON c.event_id = u.e
        LEFT JOIN idem.processed_event pe ON pe.event_id = u.e AND pe.consumer = $4 AND c.event_id IS NULL
    $q$ INTO answers USING p_event_ids, p_payload_sha256, claimed, h;
    RETURN coalesce(answers, '{}');
END
$$;
