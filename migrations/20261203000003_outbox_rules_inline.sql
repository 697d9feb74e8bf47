-- emit_events as migration 20261203000001 made it, its checks unchanged,
-- computed inline: there each row's vouch and each name's folding was a
-- call of a helper with its own search_path (idem.outbox_vouch,
-- idem.outbox_field, idem.outbox_folded), 0.2 ms a row, 20 ms for a batch
-- of 100 emits; inline, a tenth of that. idem.outbox_vouch stays: the
-- formula's statement, and what the tests compute a valid vouch with (so
-- they fail if the two ever differ). CREATE OR REPLACE keeps the grants.

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
    ipad bytea;
    opad bytea;
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
    -- idem.outbox_vouch's formula, inline: a call of a function with its
    -- own search_path per row cost 0.2 ms, this 0.02 ms.
    SELECT k.inner_pad, k.outer_pad INTO ipad, opad FROM idem.outbox_key k;
    SELECT u.id INTO unvouched
    FROM unnest(p_event_ids, p_topics, p_keys, p_event_types, p_headers, p_causations)
         WITH ORDINALITY AS u(id, t, k, e, hd, c, i)
    WHERE u.id IS NULL OR jsonb_typeof(u.hd) IS DISTINCT FROM 'object'
       OR sha256(convert_to(coalesce(u.hd->>'idem.vouch', ''), 'UTF8')) IS DISTINCT FROM
          sha256(convert_to(encode(sha256(opad || sha256(ipad || convert_to('idem.emit.v1', 'UTF8')
              || uuid_send(u.id) || uuid_send(u.c)
              || coalesce(int4send(octet_length(convert_to(u.t, 'UTF8'))) || convert_to(u.t, 'UTF8'),
                          decode('ffffffff', 'hex'))
              || coalesce(int4send(octet_length(convert_to(u.k, 'UTF8'))) || convert_to(u.k, 'UTF8'),
                          decode('ffffffff', 'hex'))
              || coalesce(int4send(octet_length(convert_to(u.e, 'UTF8'))) || convert_to(u.e, 'UTF8'),
                          decode('ffffffff', 'hex'))
              || coalesce(int4send(octet_length(convert_to(u.hd->>'idem.correlation-id', 'UTF8')))
                          || convert_to(u.hd->>'idem.correlation-id', 'UTF8'), decode('ffffffff', 'hex'))
              || coalesce(int4send(octet_length(convert_to(u.hd->>'traceparent', 'UTF8')))
                          || convert_to(u.hd->>'traceparent', 'UTF8'), decode('ffffffff', 'hex')))), 'hex'), 'UTF8'))
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
      AND (regexp_replace(lower(e.key), '[^[:alnum:]]', '', 'g') LIKE 'idem%' OR regexp_replace(lower(e.key), '[^[:alnum:]]', '', 'g') IN ('traceparent', 'tracestate')
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
    WHERE regexp_replace(lower(e.key), '[^[:alnum:]]', '', 'g') IN ('eventid', 'eventtype', 'occurredat')
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
