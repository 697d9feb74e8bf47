-- PostgreSQL grants EXECUTE on every new function to PUBLIC. idem's own
-- functions (the dedup windows' helpers, retention_of, the module trigger)
-- are unreachable to handler roles, which have no USAGE on schema idem;
-- revoking EXECUTE too makes that two locks instead of one. Handler roles
-- keep EXECUTE on idem_api.claim_events, granted to each by name.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA idem FROM PUBLIC;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA idem_api FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA idem REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA idem_api REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
