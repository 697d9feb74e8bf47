-- The audit trail trimmed by age (`[admin] audit_retention`, every host at
-- start-up and hourly: host/src/admin/audit.rs): the oldest rows found by
-- their time without reading the table.
CREATE INDEX IF NOT EXISTS audit_at ON idem.audit (at);
