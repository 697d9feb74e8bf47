-- Claims a batch of events in one statement, for the calling role's handler,
-- and answers one word per event, in the order given: 'claimed',
-- 'duplicate' or 'conflict', as idem_api.claim does for one.
--
-- Rows are inserted in event-id order: two batches that share redelivered
-- events (two partitions, say) wait on each other's claims in one global
-- order and never in a cycle, so they cannot deadlock; the transaction's
-- lock_timeout bounds the wait. An event id given twice is refused: the host
-- ends a batch before an id it already holds.
CREATE FUNCTION idem_api.claim_many(
    p_event_ids uuid[], p_topics text[], p_partitions integer[], p_offsets bigint[], p_payload_sha256 bytea[]
)
RETURNS text[]
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    h text;
    n integer := cardinality(p_event_ids);
    claimed uuid[];
    answers text[];
BEGIN
    SELECT handler INTO h FROM idem.handler_role WHERE role_name = session_user;
    IF h IS NULL THEN
        RAISE EXCEPTION 'role % is not a handler role of this database (run idem migrate --config)', session_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF cardinality(p_topics) <> n OR cardinality(p_partitions) <> n OR cardinality(p_offsets) <> n
        OR cardinality(p_payload_sha256) <> n THEN
        RAISE EXCEPTION 'claim_many: the arrays differ in length' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (SELECT count(DISTINCT e) FROM unnest(p_event_ids) AS e) <> n THEN
        RAISE EXCEPTION 'claim_many: an event id appears twice' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    WITH inserted AS (
        INSERT INTO idem.processed_event (event_id, consumer, topic, "partition", "offset", payload_sha256)
        SELECT u.e, h, u.t, u.p, u.o, u.s
        FROM unnest(p_event_ids, p_topics, p_partitions, p_offsets, p_payload_sha256) AS u(e, t, p, o, s)
        ORDER BY u.e
        ON CONFLICT DO NOTHING
        RETURNING event_id
    )
    SELECT coalesce(array_agg(event_id), '{}') INTO claimed FROM inserted;
    -- A statement of its own, so a new snapshot: the rows of claims that
    -- committed while this one waited are visible.
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
REVOKE ALL ON FUNCTION idem_api.claim_many(uuid[], text[], integer[], bigint[], bytea[]) FROM PUBLIC;

DO $$
DECLARE
    r text;
BEGIN
    FOR r IN SELECT role_name FROM idem.handler_role LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format(
                'GRANT EXECUTE ON FUNCTION idem_api.claim_many(uuid[], text[], integer[], bigint[], bytea[]) TO %I', r
            );
        END IF;
    END LOOP;
END
$$;
