-- Shadow runs (host/src/shadow): a stored version that runs beside the
-- active one on the same live events, in transactions that are always
-- rolled back. At most one per handler, never the active one.
ALTER TABLE idem.handler_module ADD COLUMN shadow boolean NOT NULL DEFAULT false;
ALTER TABLE idem.handler_module ADD COLUMN shadow_since timestamptz;
ALTER TABLE idem.handler_module ADD CONSTRAINT handler_module_shadow_not_active CHECK (NOT (shadow AND active));
CREATE UNIQUE INDEX handler_module_one_shadow ON idem.handler_module (handler) WHERE shadow;

-- The report: per shadow version and event type, how many events the two
-- versions agreed on, differed on, and how many were not shadowed (the
-- host was behind, or the database failed under a run). Event types come
-- from payloads: a version's report holds at most 100 of them, the rest
-- counted under `(other)`.
CREATE TABLE idem.shadow_tally (
    handler    text    NOT NULL,
    version    integer NOT NULL,
    event_type text    NOT NULL,
    agree      bigint  NOT NULL DEFAULT 0,
    differ     bigint  NOT NULL DEFAULT 0,
    skipped    bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (handler, version, event_type)
);

-- The first differing events of a shadow version (at most 20), each with
-- what both versions did.
CREATE TABLE idem.shadow_difference (
    handler        text        NOT NULL,
    version        integer     NOT NULL,
    active_version integer     NOT NULL,
    event_id       uuid        NOT NULL,
    event_type     text        NOT NULL,
    topic          text        NOT NULL,
    "partition"    integer     NOT NULL,
    "offset"       bigint      NOT NULL,
    differs        text[]      NOT NULL,
    active         jsonb       NOT NULL,
    shadow         jsonb       NOT NULL,
    at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (handler, version, event_id)
);

-- The rows the calling transaction wrote so far per table, as its own
-- statistics count them (they only grow: a rolled-back savepoint's rows
-- stay counted). A shadow run reads it before and after each version's run
-- on the handler's connection; handler roles may not read the statistics
-- views themselves (sandbox/public.rs), and guests cannot name idem_api.
-- An owner that may not read them either answers nothing.
CREATE FUNCTION idem_api.transaction_writes()
RETURNS TABLE (relation text, inserted bigint, updated bigint, deleted bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
        SELECT s.schemaname || '.' || s.relname, s.n_tup_ins, s.n_tup_upd, s.n_tup_del
        FROM pg_stat_xact_user_tables s
        WHERE s.n_tup_ins + s.n_tup_upd + s.n_tup_del > 0 AND s.schemaname NOT IN ('idem', 'idem_api');
EXCEPTION WHEN insufficient_privilege THEN
    RETURN;
END
$$;
REVOKE ALL ON FUNCTION idem_api.transaction_writes() FROM PUBLIC;

DO $$
DECLARE
    r text;
BEGIN
    FOR r IN SELECT role_name FROM idem.handler_role LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION idem_api.transaction_writes() TO %I', r);
        END IF;
    END LOOP;
END
$$;
