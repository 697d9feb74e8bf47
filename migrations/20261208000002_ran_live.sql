-- Which stored versions ever ran live events: active, or a canary
-- (host/src/pipeline/audit: a dedup row naming any other version is a
-- finding). Set by a trigger whenever a version becomes either; before
-- this migration, a version ran live if it is active or a canary now, was
-- ever a canary, or applied an event whose dedup row is still kept (what
-- the audit checks: one pass over the ledger).
ALTER TABLE idem.handler_module ADD COLUMN ran_live boolean NOT NULL DEFAULT false;
UPDATE idem.handler_module m SET ran_live = true
WHERE active OR canary_percent IS NOT NULL
   OR (handler, version) IN (SELECT handler, version FROM idem.canary_verdict)
   OR (handler, version) IN (
       SELECT DISTINCT consumer, module_version FROM idem.processed_event WHERE module_version IS NOT NULL);

CREATE FUNCTION idem.note_ran_live() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    IF NEW.active OR NEW.canary_percent IS NOT NULL THEN
        NEW.ran_live := true;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER handler_module_ran_live BEFORE INSERT OR UPDATE ON idem.handler_module
    FOR EACH ROW EXECUTE FUNCTION idem.note_ran_live();

-- The ledger audit counts a producer's failed rows each sweep.
CREATE INDEX outbox_failed ON idem.outbox (producer) WHERE published_at IS NULL AND failed_at IS NOT NULL;

-- A trigger's function runs whoever fires it; nobody calls it directly.
REVOKE ALL ON FUNCTION idem.note_ran_live() FROM PUBLIC;
