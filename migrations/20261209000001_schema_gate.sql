-- The schema gate (docs/deployment.md, "Upgrading idem"): the newest of
-- idem's migrations a host must know to run against this schema.
--
-- Migrations are expand or contract. An expand migration adds what an
-- older host does not use (a table, a nullable or defaulted column, an
-- index, a function) and leaves the gate alone: hosts of the previous
-- release keep running beside the new ones during a rolling upgrade. A
-- contract migration removes or changes what an older host relies on; it
-- ships a release after the one that stopped relying on it, and sets
--     UPDATE idem.schema_gate SET requires = <its own version>, reason = '…';
-- so that a host too old for it refuses to start, and reports not ready,
-- naming it, instead of failing on a missing column mid-event.
CREATE TABLE idem.schema_gate (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    requires bigint NOT NULL,
    reason text NOT NULL
);
INSERT INTO idem.schema_gate (requires, reason)
VALUES (20261209000001, 'the schema gate: hosts from here on check it');
REVOKE ALL ON idem.schema_gate FROM PUBLIC;

-- A contract migration begins with
--     SELECT idem.refuse_older_hosts('<the release that stopped needing it>');
-- which fails, naming them, while a host of an older release still
-- records itself in the fleet (seen within 30 s): the gate stops an older
-- host from starting, this stops a contract under one already running.
CREATE FUNCTION idem.refuse_older_hosts(oldest_allowed text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog AS $$
DECLARE
    older text;
BEGIN
    SELECT string_agg(format('%s (idem %s)', host, version), ', ' ORDER BY host) INTO older
    FROM idem.fleet_host
    WHERE seen_at > now() - interval '30 seconds'
      AND string_to_array(substring(version FROM '^[0-9]+(?:\.[0-9]+)*'), '.')::int[]
          < string_to_array(oldest_allowed, '.')::int[];
    IF older IS NOT NULL THEN
        RAISE EXCEPTION 'hosts of a release older than % still run: %; upgrade them first (docs/deployment.md, "Upgrading idem")',
            oldest_allowed, older;
    END IF;
END
$$;
REVOKE ALL ON FUNCTION idem.refuse_older_hosts(text) FROM PUBLIC;
