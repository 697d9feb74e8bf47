-- Canaries (host/src/modules/canary.rs): a stored version that runs a
-- share of a handler's keys (by a hash of the key) while the rest stay on
-- the active version, rolled back by the hosts when it fails more. At most
-- one per handler, never the active or the shadow version.
ALTER TABLE idem.handler_module ADD COLUMN canary_percent smallint CHECK (canary_percent BETWEEN 1 AND 99);
ALTER TABLE idem.handler_module ADD COLUMN canary_since timestamptz;
ALTER TABLE idem.handler_module ADD CONSTRAINT handler_module_canary_alone
    CHECK (canary_percent IS NULL OR NOT (active OR shadow));
CREATE UNIQUE INDEX handler_module_one_canary ON idem.handler_module (handler) WHERE canary_percent IS NOT NULL;

-- How each canary ended: promoted, aborted by an operator, or rolled back
-- by a host, with why (the failure rates it compared).
CREATE TABLE idem.canary_verdict (
    handler text        NOT NULL,
    version integer     NOT NULL,
    percent smallint    NOT NULL,
    verdict text        NOT NULL CHECK (verdict IN ('promoted', 'aborted', 'rolled back')),
    reason  text        NOT NULL,
    by      text        NOT NULL,
    at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX canary_verdict_latest ON idem.canary_verdict (handler, at DESC);

-- The claim accepts the canary's version beside the active one; the rest
-- is migration 20261201000003's. A canary ended under the module gate (as
-- an activation) waits for the transactions running it, and claims after
-- it are refused (ID001): their events run again on the active version.
CREATE OR REPLACE FUNCTION idem_api.claim_events(
    p_event_ids uuid[], p_topics text[], p_partitions integer[], p_offsets bigint[], p_payload_sha256 bytea[],
    p_module_version integer, p_accept_stale boolean
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
    oldest bigint;
    newest bigint;
    missing date[] := '{}';
    gone date[] := '{}';
    unready date;
    claimed uuid[];
    answers text[];
BEGIN
    SELECT handler INTO h FROM idem.handler_role WHERE role_name = session_user;
    IF h IS NULL THEN
        RAISE EXCEPTION 'role % is not a handler role of this database (run idem migrate --config)', session_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_module_version IS NULL AND EXISTS (SELECT 1 FROM idem.handler_module WHERE handler = h) THEN
        RAISE EXCEPTION 'handler %: a claim must name its module version (the store holds versions)', h
            USING ERRCODE = 'ID001';
    END IF;
    IF p_module_version IS NOT NULL THEN
        -- Held to the end of the claiming transaction: an activation (which
        -- locks all of the handler's gate rows FOR UPDATE) waits for every
        -- transaction running the version it replaces, so none commits
        -- after it. One row of 64, chosen by the backend: concurrent claims
        -- rarely share one, so no multixact is made (one shared row cost
        -- half the batched throughput). Rows no handler role can lock.
        PERFORM 1 FROM idem.module_gate WHERE handler = h AND slot = pg_backend_pid() % 64 FOR KEY SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'handler %: no module gate rows (run idem migrate --config)', h
                USING ERRCODE = 'ID003';
        END IF;
        SELECT version INTO active_version FROM idem.handler_module WHERE handler = h AND active;
        -- The active version, or the handler's canary (a share of its keys).
        IF active_version IS DISTINCT FROM p_module_version AND NOT EXISTS (
            SELECT 1 FROM idem.handler_module
            WHERE handler = h AND version = p_module_version AND canary_percent IS NOT NULL
        ) THEN
            RAISE EXCEPTION 'handler %: module version % is neither the active one (%) nor its canary', h,
                p_module_version, coalesce(active_version::text, 'none') USING ERRCODE = 'ID001';
        END IF;
    END IF;
    IF cardinality(p_topics) <> n OR cardinality(p_partitions) <> n OR cardinality(p_offsets) <> n
        OR cardinality(p_payload_sha256) <> n OR p_accept_stale IS NULL THEN
        RAISE EXCEPTION 'claim_events: the arrays differ in length' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (SELECT count(DISTINCT e) FROM unnest(p_event_ids) AS e) <> n THEN
        RAISE EXCEPTION 'claim_events: an event id appears twice' USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- One clock, the database's. In delete mode rows of ids before the
    -- consumer's deletion mark may be gone whatever the retention says now.
    oldest := greatest(floor(extract(epoch FROM now() - idem.retention_of(h)) * 1000)::bigint,
        (SELECT deleted_before FROM idem.consumer_retention WHERE consumer = h));
    newest := floor(extract(epoch FROM now() + coalesce(
        (SELECT future_skew FROM idem.consumer_retention WHERE consumer = h), interval '1 hour')) * 1000)::bigint;
    IF (SELECT relkind FROM pg_class WHERE oid = 'idem.processed_event'::regclass) = 'p' THEN
        SELECT coalesce(array_agg(d), '{}') INTO missing
        FROM (SELECT DISTINCT idem.window_day(e) AS d FROM unnest(p_event_ids) AS e) AS days
        WHERE to_regclass('idem.' || idem.window_name(d)) IS NULL
           OR EXISTS (SELECT 1 FROM idem.dropped_window w WHERE w.day = d);
        IF cardinality(missing) > 0 THEN
            SELECT coalesce(array_agg(day), '{}') INTO gone FROM idem.dropped_window WHERE day = ANY (missing);
            SELECT min(idem.window_day(e)) INTO unready FROM unnest(p_event_ids) AS e
            WHERE idem.window_day(e) = ANY (missing) AND NOT idem.window_day(e) = ANY (gone)
              AND idem.uuid_v7_ms(e) BETWEEN oldest AND newest;
            IF unready IS NOT NULL THEN
                RAISE EXCEPTION 'the dedup window of % (idem.%) does not exist: is maintenance running? (idem maintenance --config creates it)',
                    unready, idem.window_name(unready)
                    USING ERRCODE = 'ID002';
            END IF;
        END IF;
    END IF;

    -- Event-id order: two batches sharing redelivered events never wait on
    -- each other in a cycle.
    WITH inserted AS (
        INSERT INTO idem.processed_event (event_id, consumer, topic, "partition", "offset", payload_sha256, module_version)
        SELECT u.e, h, u.t, u.p, u.o, u.s, p_module_version
        FROM unnest(p_event_ids, p_topics, p_partitions, p_offsets, p_payload_sha256) AS u(e, t, p, o, s)
        WHERE idem.uuid_v7_ms(u.e) <= newest
          AND NOT idem.window_day(u.e) = ANY (missing)
          AND (idem.uuid_v7_ms(u.e) >= oldest OR p_accept_stale)
        ORDER BY u.e
        ON CONFLICT DO NOTHING
        RETURNING event_id
    )
    SELECT coalesce(array_agg(event_id), '{}') INTO claimed FROM inserted;
    -- Planned on each call (EXECUTE): see migration 8.
    EXECUTE $q$
        SELECT array_agg(
                   CASE WHEN c.event_id IS NOT NULL THEN 'claimed'
                        WHEN pe.event_id IS NOT NULL AND (pe.payload_sha256 IS NULL OR pe.payload_sha256 = u.s)
                            THEN 'duplicate'
                        WHEN pe.event_id IS NOT NULL THEN 'conflict'
                        WHEN idem.uuid_v7_ms(u.e) > $5 THEN 'future'
                        WHEN $6 THEN 'unguarded'
                        ELSE 'stale' END
                   ORDER BY u.i)
        FROM unnest($1, $2) WITH ORDINALITY AS u(e, s, i)
        LEFT JOIN unnest($3) AS c(event_id) ON c.event_id = u.e
        LEFT JOIN idem.processed_event pe
            ON pe.event_id = u.e AND pe.consumer = $4 AND c.event_id IS NULL
            -- A constant list: the planner prunes to the windows of these
            -- ids (the join alone would open and lock every window).
            AND pe.event_id = ANY ($1)
    $q$ INTO answers USING p_event_ids, p_payload_sha256, claimed, h, newest, p_accept_stale;
    RETURN coalesce(answers, '{}');
END
$$;
