-- The outbox's rules in the database too (README, "The outbox": "What the
-- database checks"). The host checks every emit (capabilities/emit.rs); this
-- is the second layer, for a caller that got past the statement guard and
-- calls idem_api.emit_events itself, with its handler's role, for an event it
-- claimed itself (idem_api.claim_events of a made-up event).
--
-- Decision: the host keeps minting event ids (a guest is told its event's
-- id when it emits, long before the transaction's write), and vouches for
-- each row it writes with an HMAC-SHA256, keyed by a secret only idem's
-- own role and the administrator can read (idem.outbox_key), over
--   'idem.emit.v1' ‖ event id ‖ cause ‖ topic ‖ key ‖ event type
--   ‖ idem.correlation-id ‖ traceparent
-- (the ids as their 16 bytes, each text as its 4-byte big-endian UTF-8
-- length then its bytes, an absent header as the length ffffffff). The
-- host sends it as the row's `idem.vouch` header; emit_events recomputes it
-- (PostgreSQL's built-in sha256(bytea): no extension) and refuses a row
-- without a valid one. So a caller without the key cannot choose an event
-- id, nor set idem.correlation-id or traceparent, nor move a vouched row to
-- another topic, key, type or cause; a vouch never leaves the host's own
-- statement, and event ids are unique, so none can be used twice. Minting
-- ids in the database instead would have left the provenance headers
-- unchecked (the database cannot know the source record's headers nor the
-- host's span) and made the guest wait for a round trip per emit.
--
-- Also checked here, as the host does: no other header whose name, folded
-- (lower case, letters and digits only), starts with `idem` or is
-- `traceparent`/`tracestate`, and header names of visible ASCII token
-- characters only (no spaces, no look-alike letters); no top-level payload
-- key that folds to an envelope field (eventId, eventType, occurredAt).
-- What the database cannot check is the host's layer only: the payload
-- against the topic's JSON Schema, and the look-alike letters in payload
-- keys (a table of confusables lives in the host).
--
-- The signature and grants of emit_events are unchanged (CREATE OR REPLACE
-- keeps them: `idem migrate --config` grants it to each handler role by
-- name). Hosts older than this migration send no vouch: their emits are
-- refused (ID004, the event's permanent failure) once it is applied, so
-- stop them before `idem migrate`.

-- The key: 32 random bytes (two v4 UUIDs' 244 random bits), and HMAC's
-- inner and outer pads of it, computed once.
CREATE TABLE idem.outbox_key (
    one       boolean PRIMARY KEY DEFAULT true CHECK (one),
    key       bytea   NOT NULL CHECK (octet_length(key) = 32),
    inner_pad bytea   NOT NULL CHECK (octet_length(inner_pad) = 64),
    outer_pad bytea   NOT NULL CHECK (octet_length(outer_pad) = 64)
);
REVOKE ALL ON idem.outbox_key FROM PUBLIC;

-- Makes (or replaces: a rotation, with every host stopped, since hosts
-- read the key at start) the outbox's key.
CREATE FUNCTION idem.outbox_new_key() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    k bytea := uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid());
    padded bytea;
    ipad bytea;
    opad bytea;
BEGIN
    padded := k || decode(repeat('00', 32), 'hex');
    ipad := padded;
    opad := padded;
    FOR i IN 0..63 LOOP
        ipad := set_byte(ipad, i, get_byte(padded, i) # 54);   -- 0x36
        opad := set_byte(opad, i, get_byte(padded, i) # 92);   -- 0x5c
    END LOOP;
    INSERT INTO idem.outbox_key (one, key, inner_pad, outer_pad) VALUES (true, k, ipad, opad)
    ON CONFLICT (one) DO UPDATE SET key = excluded.key, inner_pad = excluded.inner_pad, outer_pad = excluded.outer_pad;
END
$fn$;
REVOKE ALL ON FUNCTION idem.outbox_new_key() FROM PUBLIC;
SELECT idem.outbox_new_key();

-- One field of the vouched message: its UTF-8 length (4 bytes, big-endian)
-- and bytes, or ffffffff when absent.
CREATE FUNCTION idem.outbox_field(v text) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT CASE WHEN v IS NULL THEN decode('ffffffff', 'hex')
                ELSE int4send(octet_length(convert_to(v, 'UTF8'))) || convert_to(v, 'UTF8') END
$fn$;
REVOKE ALL ON FUNCTION idem.outbox_field(text) FROM PUBLIC;

-- The vouch of one emitted row (HMAC-SHA256, see above), hex; NULL
-- without a key.
CREATE FUNCTION idem.outbox_vouch(
    p_event_id uuid, p_cause uuid, p_topic text, p_key text, p_event_type text, p_correlation text, p_traceparent text
)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT encode(sha256(k.outer_pad || sha256(k.inner_pad || convert_to('idem.emit.v1', 'UTF8')
        || uuid_send(p_event_id) || uuid_send(p_cause)
        || idem.outbox_field(p_topic) || idem.outbox_field(p_key) || idem.outbox_field(p_event_type)
        || idem.outbox_field(p_correlation) || idem.outbox_field(p_traceparent))), 'hex')
    FROM idem.outbox_key k
$fn$;
REVOKE ALL ON FUNCTION idem.outbox_vouch(uuid, uuid, text, text, text, text, text) FROM PUBLIC;

-- A header or payload key folded for comparison with idem's names.
CREATE FUNCTION idem.outbox_folded(name text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT regexp_replace(lower(name), '[^[:alnum:]]', '', 'g') $fn$;
REVOKE ALL ON FUNCTION idem.outbox_folded(text) FROM PUBLIC;

-- A handler's emits, written by the host just before its transaction
-- commits (the guest never calls this: the statement guard refuses any
-- mention of idem_api), with the ids the host minted when the guest
-- emitted them. `p_causations` are the events that emitted them: each must
-- be one this handler claimed in this very transaction. Each row's headers
-- carry the host's provenance (idem.correlation-id, traceparent when
-- traced) and its vouch (idem.vouch, dropped here); idem.causation-id and
-- idem.producer are set here.
CREATE OR REPLACE FUNCTION idem_api.emit_events(
    p_event_ids uuid[], p_topics text[], p_keys text[], p_event_types text[], p_payloads jsonb[], p_headers jsonb[],
    p_causations uuid[]
)
RETURNS uuid[]
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    h text;
    n integer := cardinality(p_topics);
    unclaimed uuid;
    unvouched uuid;
    refused text;
BEGIN
    SELECT handler INTO h FROM idem.handler_role WHERE role_name = session_user;
    IF h IS NULL THEN
        RAISE EXCEPTION 'role % is not a handler role of this database (run idem migrate --config)', session_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NOT coalesce(cardinality(p_event_ids) = n AND cardinality(p_keys) = n AND cardinality(p_event_types) = n
                    AND cardinality(p_payloads) = n AND cardinality(p_headers) = n
                    AND cardinality(p_causations) = n, false) THEN
        RAISE EXCEPTION 'emit_events: the arrays differ in length or are missing' USING ERRCODE = 'ID004';
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
    -- Minted and vouched for by the host. (Compared through sha256, so the
    -- time the comparison takes says nothing of the expected vouch.)
    SELECT u.id INTO unvouched
    FROM unnest(p_event_ids, p_topics, p_keys, p_event_types, p_headers, p_causations)
         WITH ORDINALITY AS u(id, t, k, e, hd, c, i)
    WHERE u.id IS NULL OR jsonb_typeof(u.hd) IS DISTINCT FROM 'object'
       OR sha256(convert_to(coalesce(u.hd->>'idem.vouch', ''), 'UTF8')) IS DISTINCT FROM
          sha256(convert_to(idem.outbox_vouch(u.id, u.c, u.t, u.k, u.e, u.hd->>'idem.correlation-id',
                                              u.hd->>'traceparent'), 'UTF8'))
    ORDER BY u.i
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'handler %: event % was not minted by idem''s host (no valid vouch for its id, cause, topic, '
            'key, type and provenance headers): event ids and idem''s headers are the host''s to set', h, unvouched
            USING ERRCODE = 'ID004';
    END IF;
    -- No header of idem's besides those vouched for, nor one like them.
    SELECT e.key INTO refused
    FROM unnest(p_headers) AS hd, jsonb_each(hd) AS e
    WHERE e.key NOT IN ('idem.vouch', 'idem.correlation-id', 'traceparent')
      AND (idem.outbox_folded(e.key) LIKE 'idem%' OR idem.outbox_folded(e.key) IN ('traceparent', 'tracestate')
           OR e.key !~ '^[-!#$%&''*+.^_`|~0-9A-Za-z]+$')
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'handler %: header "%" is idem''s or looks like one of idem''s (idem*, traceparent, tracestate '
            'in any case or spelling), or is not a name of visible ASCII token characters', h, left(refused, 200)
            USING ERRCODE = 'ID004';
    END IF;
    -- No envelope field in the payload, nor a key like one.
    IF EXISTS (SELECT 1 FROM unnest(p_payloads) AS p WHERE jsonb_typeof(p) IS DISTINCT FROM 'object') THEN
        RAISE EXCEPTION 'outbox: a payload is not a JSON object' USING ERRCODE = 'ID004';
    END IF;
    SELECT e.key INTO refused
    FROM unnest(p_payloads) AS p, jsonb_each(p) AS e
    WHERE idem.outbox_folded(e.key) IN ('eventid', 'eventtype', 'occurredat')
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'handler %: payload key "%" is an envelope field''s (eventId, eventType, occurredAt) or looks '
            'like one: the host adds them', h, left(refused, 200)
            USING ERRCODE = 'ID004';
    END IF;
    RETURN idem.outbox_write(h, p_topics, p_keys, p_event_types, p_payloads, ARRAY(
        SELECT u.hd - 'idem.vouch'
               || jsonb_build_object('idem.causation-id', u.c::text, 'idem.producer', h)
        FROM unnest(p_headers, p_causations) WITH ORDINALITY AS u(hd, c, i) ORDER BY u.i), p_event_ids);
END
$fn$;
