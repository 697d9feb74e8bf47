-- Named operators and the audit trail (host/src/admin/operators.rs,
-- host/src/admin/audit.rs). A token is issued per person by
-- `idem token create NAME --scope read|operate` and kept only as its
-- SHA-256 (a token is 256 random bits, so a fast hash is not a weakness);
-- revoking keeps the row, so a name is never reissued to someone else and
-- the trail keeps meaning who it says.
CREATE TABLE idem.operator (
    name          text        PRIMARY KEY,
    scope         text        NOT NULL CHECK (scope IN ('read', 'operate')),
    token_sha256  bytea       NOT NULL UNIQUE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    created_by    text        NOT NULL,
    revoked_at    timestamptz,
    revoked_by    text
);

-- Every change made through the admin API or the console, by whom, with
-- its answer's status: deploys, activations, rollbacks, replays, logins,
-- tokens issued and revoked. Reads are not recorded.
CREATE TABLE idem.audit (
    id       bigserial   PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT now(),
    actor    text        NOT NULL,
    scope    text        NOT NULL,
    -- `api` or `console`
    via      text        NOT NULL,
    peer     text,
    -- the idem host that served it (as idem.fleet_host names it)
    host     text        NOT NULL,
    action   text        NOT NULL,
    handler  text,
    status   smallint    NOT NULL,
    detail   jsonb
);
CREATE INDEX audit_by_handler ON idem.audit (handler, id DESC);
CREATE INDEX audit_by_actor ON idem.audit (actor, id DESC);
