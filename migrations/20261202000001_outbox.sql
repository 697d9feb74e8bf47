-- The transactional outbox (README, "The outbox"): events a handler emits,
-- or another application publishes, written in the transaction that
-- decides them and published to Kafka by a relay after it commits.
--
-- Nobody but idem's own role reads or changes these tables. Handler roles
-- write rows only through idem_api.emit_events (the host calls it just
-- before COMMIT, with what its guests emitted and the ids it minted for
-- them, which must be UUID v7 of this transaction's minute), other
-- applications' roles through idem_api.publish (which mints the id): both
-- SECURITY DEFINER, both taking the producer from `session_user`, never from
-- an argument. Their refusals are SQLSTATE ID004: the event's own failure,
-- never the host's.

-- A UUID v7 (RFC 9562): 48 bits of Unix milliseconds, version 7, 74 random
-- bits (PostgreSQL 15 has no uuidv7()). Ids minted in one millisecond are
-- not ordered among themselves; nothing here relies on it.
CREATE FUNCTION idem.uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    -- Random bytes (a v4 id's), the first 6 replaced by the milliseconds,
    -- then the version (0111 in byte 6's high bits) and the variant (10 in
    -- byte 8's); set_bit numbers bits from each byte's least significant.
    SELECT encode(set_bit(set_bit(set_bit(set_bit(set_bit(set_bit(
        overlay(uuid_send(gen_random_uuid())
                PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                FROM 1 FOR 6),
        55, 0), 54, 1), 53, 1), 52, 1), 71, 1), 70, 0), 'hex')::uuid
$$;
REVOKE ALL ON FUNCTION idem.uuid_v7() FROM PUBLIC;

-- What a producer may publish to, and which event types on each topic.
-- A handler's rows come from its [[handler.emit]] tables, an application's
-- from [[outbox.producer]]; `idem migrate --config` writes both.
CREATE TABLE idem.outbox_topic (
    producer    text   NOT NULL,
    topic       text   NOT NULL,
    event_types text[] NOT NULL,
    PRIMARY KEY (producer, topic)
);

-- Which login role publishes as which producer (applications; a handler's
-- role is its handler, through idem.handler_role).
CREATE TABLE idem.outbox_producer (
    role_name text PRIMARY KEY,
    producer  text NOT NULL UNIQUE
);

-- The rows. `id` orders a key's rows in commit order: a transaction takes
-- its keys' bucket rows (idem.outbox_bucket) before it inserts, so another
-- transaction with one of those keys inserts only after it ended.
CREATE TABLE idem.outbox (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    producer     text        NOT NULL,
    topic        text        NOT NULL,
    key          text        NOT NULL,
    event_id     uuid        NOT NULL UNIQUE,
    value        jsonb       NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz,
    failed_at    timestamptz,
    failure      text
);
CREATE INDEX outbox_unpublished ON idem.outbox (producer, id) WHERE published_at IS NULL AND failed_at IS NULL;
CREATE INDEX outbox_published ON idem.outbox (published_at) WHERE published_at IS NOT NULL;

-- A producer's topic's keys hashed into 1,024 buckets, a row each, locked by
-- every transaction writing one of its keys (in bucket order within a call:
-- the host writes a transaction's emits in one, so two of idem's never wait
-- on each other in a cycle; an application calling publish for keys A then
-- B can deadlock with one doing B then A, and PostgreSQL ends one of them).
-- Bounded, whatever the number of keys.
CREATE TABLE idem.outbox_bucket (
    producer text     NOT NULL,
    topic    text     NOT NULL,
    bucket   smallint NOT NULL,
    rows     bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (producer, topic, bucket)
);

-- Which host's relay publishes a producer's rows, until when.
CREATE TABLE idem.outbox_lease (
    producer   text        PRIMARY KEY,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL
);

REVOKE ALL ON idem.outbox_topic, idem.outbox_producer, idem.outbox, idem.outbox_bucket, idem.outbox_lease FROM PUBLIC;

-- Writes `producer`'s rows; the callers below have checked who it is.
-- Every array holds one entry per row; headers are JSON objects of text.
-- `p_event_ids`: the ids the host minted and already told its guests
-- (UUID v7 of this transaction's time, a minute either way for the host's
-- clock, each new), or NULL to mint them here.
CREATE FUNCTION idem.outbox_write(
    p_producer text, p_topics text[], p_keys text[], p_event_types text[], p_payloads jsonb[], p_headers jsonb[],
    p_event_ids uuid[]
)
RETURNS uuid[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n integer := cardinality(p_topics);
    refused text;
    ids uuid[];
BEGIN
    IF cardinality(p_keys) <> n OR cardinality(p_event_types) <> n OR cardinality(p_payloads) <> n
        OR cardinality(p_headers) <> n OR coalesce(cardinality(p_event_ids), n) <> n THEN
        RAISE EXCEPTION 'outbox: the arrays differ in length' USING ERRCODE = 'ID004';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_event_ids) AS e
               WHERE e IS NULL OR substring(e::text FROM 15 FOR 1) <> '7'
                  OR idem.uuid_v7_ms(e) < floor(extract(epoch FROM now()) * 1000) - 60000
                  OR idem.uuid_v7_ms(e) > floor(extract(epoch FROM clock_timestamp()) * 1000) + 60000) THEN
        RAISE EXCEPTION 'outbox: an event id is not a UUID v7 of this transaction''s time' USING ERRCODE = 'ID004';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_headers) AS h
               WHERE h IS NOT NULL AND (jsonb_typeof(h) <> 'object'
                  OR EXISTS (SELECT 1 FROM jsonb_each(h) AS e WHERE jsonb_typeof(e.value) <> 'string'))) THEN
        RAISE EXCEPTION 'outbox: headers must be JSON objects of text values' USING ERRCODE = 'ID004';
    END IF;
    SELECT format('%s (%s)', u.t, u.e) INTO refused
    FROM unnest(p_topics, p_event_types) AS u(t, e)
    WHERE NOT EXISTS (SELECT 1 FROM idem.outbox_topic o WHERE o.producer = p_producer AND o.topic = u.t
                      AND u.e = ANY (o.event_types))
    LIMIT 1;
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION 'producer %: may not publish % (its topics and event types are configured)', p_producer, refused
            USING ERRCODE = 'ID004';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_payloads) AS p WHERE jsonb_typeof(p) <> 'object') THEN
        RAISE EXCEPTION 'outbox: a payload is not a JSON object' USING ERRCODE = 'ID004';
    END IF;
    -- The keys' buckets, locked in order, before any row is inserted.
    INSERT INTO idem.outbox_bucket AS b (producer, topic, bucket, rows)
    SELECT p_producer, t, k, count(*) FROM (
        SELECT u.t, (hashtext(u.k) & 1023)::smallint AS k FROM unnest(p_topics, p_keys) AS u(t, k)
    ) AS keyed GROUP BY t, k ORDER BY t, k
    ON CONFLICT (producer, topic, bucket) DO UPDATE SET rows = b.rows + excluded.rows;
    WITH minted AS (
        SELECT u.i, coalesce(p_event_ids[u.i], idem.uuid_v7()) AS id, u.t, u.k, u.e, u.p, u.h
        FROM unnest(p_topics, p_keys, p_event_types, p_payloads, p_headers) WITH ORDINALITY AS u(t, k, e, p, h, i)
    ), written AS (
        INSERT INTO idem.outbox (producer, topic, key, event_id, value, headers)
        SELECT p_producer, m.t, m.k, m.id,
               m.p - 'eventId' - 'eventType' - 'occurredAt' || jsonb_build_object(
                   'eventId', m.id::text, 'eventType', m.e,
                   'occurredAt', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
               coalesce(m.h, '{}')
        FROM minted m ORDER BY m.i
        RETURNING 1
    )
    -- (A data-modifying WITH runs whether or not it is read.)
    SELECT array_agg(m.id ORDER BY m.i) INTO ids FROM minted m;
    PERFORM pg_notify('idem_outbox', p_producer);
    RETURN ids;
END
$$;
REVOKE ALL ON FUNCTION idem.outbox_write(text, text[], text[], text[], jsonb[], jsonb[], uuid[]) FROM PUBLIC;

-- A handler's emits, written by the host just before its transaction
-- commits (the guest never calls this: the statement guard refuses any
-- mention of idem_api), with the ids the host minted when the guest
-- emitted them. `p_causations` are the events that emitted them:
-- each must be one this handler claimed in this very transaction, so even
-- a caller that got past the guard cannot name another event as the cause.
-- The host's provenance headers (idem.correlation-id, traceparent) come in
-- `p_headers`; idem.causation-id and idem.producer are set here.
CREATE FUNCTION idem_api.emit_events(
    p_event_ids uuid[], p_topics text[], p_keys text[], p_event_types text[], p_payloads jsonb[], p_headers jsonb[],
    p_causations uuid[]
)
RETURNS uuid[]
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    h text;
    unclaimed uuid;
BEGIN
    SELECT handler INTO h FROM idem.handler_role WHERE role_name = session_user;
    IF h IS NULL THEN
        RAISE EXCEPTION 'role % is not a handler role of this database (run idem migrate --config)', session_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF cardinality(p_causations) <> cardinality(p_topics) THEN
        RAISE EXCEPTION 'emit_events: the arrays differ in length' USING ERRCODE = 'ID004';
    END IF;
    -- Claimed by this very transaction: its xmin (and, against a frozen
    -- row's reused xid, its time). Planned on each call (EXECUTE), so only
    -- the causes' windows are opened (see migration 8).
    EXECUTE $q$
        SELECT c FROM unnest($1::uuid[]) AS c
        WHERE c IS NULL OR NOT EXISTS (
            SELECT 1 FROM idem.processed_event pe
            WHERE pe.event_id = c AND pe.consumer = $2 AND pe.event_id = ANY ($1)
              AND pe.xmin = pg_current_xact_id()::xid AND pe.processed_at = now())
        LIMIT 1
    $q$ INTO unclaimed USING p_causations, h;
    IF unclaimed IS NOT NULL OR array_position(p_causations, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'handler %: event % was not claimed in this transaction: only it may emit', h, unclaimed
            USING ERRCODE = 'ID004';
    END IF;
    RETURN idem.outbox_write(h, p_topics, p_keys, p_event_types, p_payloads, ARRAY(
        SELECT coalesce(u.hd, '{}') - 'idem.causation-id' - 'idem.producer'
               || jsonb_build_object('idem.causation-id', u.c::text, 'idem.producer', h)
        FROM unnest(p_headers, p_causations) WITH ORDINALITY AS u(hd, c, i) ORDER BY u.i), p_event_ids);
END
$$;
REVOKE ALL ON FUNCTION idem_api.emit_events(uuid[], text[], text[], text[], jsonb[], jsonb[], uuid[]) FROM PUBLIC;

-- Another application's event, in its own transaction: e.g. the order
-- service's `SELECT idem_api.publish('orders.confirmed', order_id::text,
-- 'order.confirmed.v1', jsonb_build_object(...))` beside its INSERT INTO
-- orders. Its role must be an [[outbox.producer]] (`idem migrate --config`
-- grants this function to it); the event id is minted here and returned.
CREATE FUNCTION idem_api.publish(p_topic text, p_key text, p_event_type text, p_payload jsonb, p_headers jsonb DEFAULT '{}')
RETURNS uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text;
    ids uuid[];
BEGIN
    SELECT producer INTO p FROM idem.outbox_producer WHERE role_name = session_user;
    IF p IS NULL THEN
        RAISE EXCEPTION 'role % is not an outbox producer of this database ([[outbox.producer]], idem migrate --config)',
            session_user USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_headers IS NOT NULL AND jsonb_typeof(p_headers) <> 'object' THEN
        RAISE EXCEPTION 'publish: headers must be a JSON object of text values' USING ERRCODE = 'ID004';
    END IF;
    -- The application's headers, less those the outbox sets or carries
    -- along a chain (whatever their case).
    ids := idem.outbox_write(p, ARRAY[p_topic], ARRAY[p_key], ARRAY[p_event_type], ARRAY[p_payload], ARRAY[
        (SELECT coalesce(jsonb_object_agg(k, v), '{}') FROM jsonb_each(coalesce(p_headers, '{}')) AS e(k, v)
         WHERE lower(k) NOT LIKE 'idem.%' AND lower(k) NOT IN ('traceparent', 'tracestate'))
        || jsonb_build_object('idem.producer', p)], NULL);
    RETURN ids[1];
END
$$;
REVOKE ALL ON FUNCTION idem_api.publish(text, text, text, jsonb, jsonb) FROM PUBLIC;
