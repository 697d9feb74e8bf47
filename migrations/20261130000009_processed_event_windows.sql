-- Retention of idem.processed_event (R-KFK-IDEM-2).
--
-- The table is range-partitioned on `event_id` itself: a UUID v7 begins
-- with its creation time in milliseconds, and PostgreSQL compares uuids
-- byte by byte, so a range of ids is a range of creation times. One
-- partition ("window") per UTC day. The key stays (event_id, consumer): a
-- duplicate always lands in the window of its first delivery, whenever it
-- arrives, and dropping a window drops exactly the events created that day.
-- (Partitioning on processed_at, as the seed does, needs processed_at in
-- the key, and a duplicate processed a second later gets another key.)
--
-- There is no default partition: a row in it would make creating its
-- window later fail. Windows are created ahead by the host's maintenance
-- (`idem maintenance`); a claim refuses ids further in the future than the
-- skew limit, which stays inside the created horizon.
--
-- Databases where partitioning is not an option keep the plain table:
-- `idem migrate --config` with `[retention] mode = "delete"` sets
-- `idem.retention_mode` for this migration, and maintenance then deletes
-- expired rows in small chunks instead.

-- The creation time of a UUID v7, in milliseconds since the epoch.
CREATE FUNCTION idem.uuid_v7_ms(id uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT ('x' || lpad(substr(replace(id::text, '-', ''), 1, 12), 16, '0'))::bit(64)::bigint $$;

-- The smallest uuid created at `at` (milliseconds): a window's bound.
CREATE FUNCTION idem.uuid_v7_floor(at timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT (lpad(to_hex(floor(extract(epoch FROM at) * 1000)::bigint), 12, '0') || repeat('0', 20))::uuid $$;

-- The UTC day a UUID v7 was created on: its window.
CREATE FUNCTION idem.window_day(id uuid) RETURNS date
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT date '1970-01-01' + (idem.uuid_v7_ms(id) / 86400000)::integer $$;

-- A window's table name (in schema idem).
CREATE FUNCTION idem.window_name(day date) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT 'processed_event_p' || to_char(day, 'YYYYMMDD') $$;

-- Creates the window of `day` unless it exists; true when it created it.
-- The table is made on its own and then attached: ATTACH PARTITION takes
-- only SHARE UPDATE EXCLUSIVE on the parent, which claims (ROW EXCLUSIVE)
-- never wait for, where CREATE TABLE ... PARTITION OF would take ACCESS
-- EXCLUSIVE and queue every claim behind it.
CREATE FUNCTION idem.create_window(day date) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    name text := idem.window_name(day);
BEGIN
    IF to_regclass('idem.' || name) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE idem.%I (LIKE idem.processed_event INCLUDING DEFAULTS)', name);
    EXECUTE format(
        'ALTER TABLE idem.processed_event ATTACH PARTITION idem.%I FOR VALUES FROM (%L) TO (%L)',
        name,
        idem.uuid_v7_floor(day::timestamp AT TIME ZONE 'UTC'),
        idem.uuid_v7_floor((day + 1)::timestamp AT TIME ZONE 'UTC')
    );
    RETURN true;
END
$$;

-- How long each consumer's dedup rows must be kept, as its host recorded
-- it at start-up (`dedup_retention`), and how far in the future an event
-- id may lie. The claim reads them here, and maintenance keeps windows for
-- the longest retention recorded: no host decides from its own config
-- alone what another host's handler still needs. A consumer no host
-- recorded counts as 7 days and 1 hour; the consumers already in the table
-- are recorded so by this migration. (A retired handler's row keeps
-- counting until it is deleted.)
CREATE TABLE idem.consumer_retention (
    consumer    text        PRIMARY KEY,
    retention   interval    NOT NULL CHECK (retention >= interval '1 hour'),
    future_skew interval    NOT NULL CHECK (future_skew >= interval '0'),
    recorded_at timestamptz NOT NULL DEFAULT now(),
    recorded_by text        NOT NULL,
    -- Delete mode: rows of ids created before this (ms since the epoch) may
    -- have been deleted. It only moves forward, so after a retention is
    -- raised an event older than it is still refused as stale, never
    -- claimed as new (partition mode has idem.dropped_window for this).
    deleted_before bigint   NOT NULL DEFAULT 0
);

CREATE FUNCTION idem.retention_of(c text) RETURNS interval
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT coalesce((SELECT retention FROM idem.consumer_retention WHERE consumer = c), interval '7 days') $$;

-- Windows maintenance dropped: a dropped window is never created again,
-- so a claim of an event in it answers 'stale' rather than claiming an
-- event whose row is gone.
-- A window is recorded here before it is detached, so claims treat it
-- as gone from that moment.
CREATE TABLE idem.dropped_window (
    day        date        PRIMARY KEY,
    dropped_at timestamptz NOT NULL DEFAULT now(),
    -- The planner's estimate of the rows it held.
    rows_about bigint      NOT NULL
);

-- Passes of several hosts never overlap: a pass holds this row locked (FOR
-- UPDATE, on a connection of its own) while it works. A table in schema
-- idem, which handler roles cannot reach: an advisory lock key could be
-- taken by any role, a guest's included.
CREATE TABLE idem.maintenance_lock (id integer PRIMARY KEY CHECK (id = 1));
INSERT INTO idem.maintenance_lock VALUES (1);

DO $$
DECLARE
    mode text := coalesce(nullif(current_setting('idem.retention_mode', true), ''), 'partition');
    not_v7 bigint;
    today date := (now() AT TIME ZONE 'UTC')::date;
    d date;
BEGIN
    IF mode NOT IN ('partition', 'delete') THEN
        RAISE EXCEPTION 'idem.retention_mode = %: use partition or delete', mode;
    END IF;
    IF mode = 'delete' THEN
        RAISE NOTICE 'idem.processed_event stays unpartitioned ([retention] mode = "delete")';
        -- The delete pass reads a consumer's oldest ids.
        CREATE INDEX processed_event_consumer ON idem.processed_event (consumer, event_id);
        RETURN;
    END IF;
    SELECT count(*) INTO not_v7 FROM idem.processed_event WHERE substr(event_id::text, 15, 1) <> '7';
    IF not_v7 > 0 THEN
        RAISE EXCEPTION 'idem.processed_event holds % rows whose event_id is not a UUID v7, which cannot be placed in a time window: delete them, or migrate with [retention] mode = "delete" (idem migrate --config)',
            not_v7;
    END IF;
    -- One window per day of history, created in this transaction (a few
    -- locks each): a very long history would exhaust the lock table.
    IF (SELECT count(DISTINCT idem.window_day(event_id)) FROM idem.processed_event) > 400 THEN
        RAISE EXCEPTION 'idem.processed_event holds rows of more than 400 distinct days; delete rows older than your longest dedup_retention first (e.g. DELETE FROM idem.processed_event WHERE processed_at < now() - interval ''90 days''), or migrate with [retention] mode = "delete"';
    END IF;
    -- In place: the rows move into windows of the new table in this
    -- transaction (about a second per million rows here), then the old
    -- table goes.
    ALTER TABLE idem.processed_event RENAME TO processed_event_unpartitioned;
    ALTER TABLE idem.processed_event_unpartitioned
        RENAME CONSTRAINT processed_event_pkey TO processed_event_unpartitioned_pkey;
    CREATE TABLE idem.processed_event (
        event_id       uuid        NOT NULL,
        consumer       text        NOT NULL,
        processed_at   timestamptz NOT NULL DEFAULT now(),
        topic          text        NOT NULL,
        "partition"    integer     NOT NULL,
        "offset"       bigint      NOT NULL,
        payload_sha256 bytea,
        module_version integer,
        PRIMARY KEY (event_id, consumer)
    ) PARTITION BY RANGE (event_id);
    FOR d IN
        SELECT DISTINCT idem.window_day(event_id) FROM idem.processed_event_unpartitioned
        UNION
        SELECT generate_series(today - 7, today + 3, interval '1 day')::date
    LOOP
        PERFORM idem.create_window(d);
    END LOOP;
    INSERT INTO idem.consumer_retention (consumer, retention, future_skew, recorded_by)
    SELECT DISTINCT consumer, interval '7 days', interval '1 hour', 'migration 9'
    FROM idem.processed_event_unpartitioned
    ON CONFLICT DO NOTHING;
    INSERT INTO idem.processed_event
        (event_id, consumer, processed_at, topic, "partition", "offset", payload_sha256, module_version)
    SELECT event_id, consumer, processed_at, topic, "partition", "offset", payload_sha256, module_version
    FROM idem.processed_event_unpartitioned;
    DROP TABLE idem.processed_event_unpartitioned;
END
$$;

-- The claim of migration 8, with the retention guard. For each event, in
-- the order given:
--   'claimed'    first time: run the handler;
--   'duplicate'  already processed with the same payload (or with no hash);
--   'conflict'   already processed with a different payload;
--   'stale'      not found, but the id is older than the consumer's
--                retention (database clock) or its window was dropped: its
--                dedup row may be gone, so it is not claimed blindly;
--   'unguarded'  the same, when `p_accept_stale`: run it with no dedup row
--                (an operator's `stale_events = "process"` or `--force`);
--                a stale event whose window still exists is claimed instead;
--   'future'     the id lies further ahead than the consumer's future_skew.
-- An event whose window was never created and is not stale raises ID002
-- (maintenance is behind): the batch waits and runs again.
CREATE FUNCTION idem_api.claim_events(
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
        PERFORM pg_advisory_xact_lock_shared(hashtext('idem.handler_module'), hashtext(h));
        SELECT version INTO active_version FROM idem.handler_module WHERE handler = h AND active;
        IF active_version IS DISTINCT FROM p_module_version THEN
            RAISE EXCEPTION 'handler %: module version % is not the active one (%)', h, p_module_version,
                coalesce(active_version::text, 'none') USING ERRCODE = 'ID001';
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
REVOKE ALL ON FUNCTION idem_api.claim_events(uuid[], text[], integer[], bigint[], bytea[], integer, boolean)
    FROM PUBLIC;

-- Handler roles move to the claim with the guard; the previous one goes,
-- so a host of an earlier release stops (a fatal "does not exist" naming
-- `idem migrate`) instead of claiming without it. Upgrade every host with
-- this migration.
DO $$
DECLARE
    r text;
BEGIN
    FOR r IN SELECT role_name FROM idem.handler_role LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format(
                'GRANT EXECUTE ON FUNCTION idem_api.claim_events(uuid[], text[], integer[], bigint[], bytea[], integer, boolean) TO %I',
                r
            );
        END IF;
    END LOOP;
END
$$;
DROP FUNCTION idem_api.claim_events(uuid[], text[], integer[], bigint[], bytea[], integer);
