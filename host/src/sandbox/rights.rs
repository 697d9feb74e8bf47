//! Refuses to run a handler whose role can do more than the sandbox allows
//! (see the module above). Asked of the server's catalogs, through idem's
//! own connection, so a role's rights are whatever PostgreSQL says they are.

use anyhow::{Context as _, bail};
use sqlx::PgPool;

use super::Place;

#[derive(sqlx::FromRow)]
struct Rights {
    rolsuper: bool,
    rolcreatedb: bool,
    rolcreaterole: bool,
    rolreplication: bool,
    rolbypassrls: bool,
    rolcanlogin: bool,
    member_of: Vec<String>,
    db_create: bool,
    db_temp: bool,
    idem_usage: bool,
    idem_api_usage: bool,
    may_claim: bool,
    own_schema_usage: bool,
    create_in: Vec<String>,
    other_schemas: Vec<String>,
    owns: Vec<String>,
    mapped_to: Option<String>,
}

const QUERY: &str = "
SELECT r.rolsuper, r.rolcreatedb, r.rolcreaterole, r.rolreplication, r.rolbypassrls, r.rolcanlogin,
  ARRAY(SELECT g.rolname::text FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid WHERE m.member = r.oid) AS member_of,
  has_database_privilege(r.oid, current_database(), 'CREATE') AS db_create,
  has_database_privilege(r.oid, current_database(), 'TEMPORARY') AS db_temp,
  has_schema_privilege(r.oid, 'idem', 'USAGE') AS idem_usage,
  has_schema_privilege(r.oid, 'idem_api', 'USAGE') AS idem_api_usage,
  has_function_privilege(r.oid, 'idem_api.claim_events(uuid[], text[], integer[], bigint[], bytea[], integer, boolean)', 'EXECUTE')
    AS may_claim,
  (SELECT has_schema_privilege(r.oid, n.oid, 'USAGE') FROM pg_namespace n WHERE n.nspname = $2) IS TRUE AS own_schema_usage,
  ARRAY(SELECT n.nspname::text FROM pg_namespace n WHERE has_schema_privilege(r.oid, n.oid, 'CREATE')) AS create_in,
  ARRAY(SELECT n.nspname::text FROM pg_namespace n
        WHERE (n.nspname = ANY($3) OR n.nspname IN (SELECT schema_name FROM idem.handler_role WHERE role_name <> r.rolname))
          AND n.nspname <> $2 AND has_schema_privilege(r.oid, n.oid, 'USAGE')) AS other_schemas,
  ARRAY(SELECT c.relname::text FROM pg_class c WHERE c.relowner = r.oid
        UNION ALL SELECT n.nspname::text FROM pg_namespace n WHERE n.nspowner = r.oid
        UNION ALL SELECT p.proname::text FROM pg_proc p WHERE p.proowner = r.oid
        UNION ALL SELECT t.typname::text FROM pg_type t WHERE t.typowner = r.oid
        UNION ALL SELECT 'large object ' || l.oid FROM pg_largeobject_metadata l WHERE l.lomowner = r.oid) AS owns,
  (SELECT handler FROM idem.handler_role WHERE role_name = r.rolname) AS mapped_to
FROM pg_roles r WHERE r.rolname = $1";

/// Fails, naming every excess right, unless `place`'s role has exactly the
/// sandbox's rights; `others` are the other handlers' schemas.
pub async fn check(idem: &PgPool, place: &Place, others: &[String]) -> anyhow::Result<()> {
    let at = format!("handler `{}`: role {}", place.handler, place.role);
    let rights: Option<Rights> = sqlx::query_as(QUERY)
        .bind(&place.role)
        .bind(&place.schema)
        .bind(others)
        .fetch_optional(idem)
        .await
        .with_context(|| format!("{at}: failed to read its rights"))?;
    let Some(r) = rights else {
        bail!("{at} does not exist: run `idem migrate --config` with an administrator's URL");
    };
    let mut excess = Vec::new();
    for (flag, name) in [
        (r.rolsuper, "SUPERUSER"),
        (r.rolcreatedb, "CREATEDB"),
        (r.rolcreaterole, "CREATEROLE"),
        (r.rolreplication, "REPLICATION"),
        (r.rolbypassrls, "BYPASSRLS"),
        (r.db_create, "CREATE on the database"),
        (r.db_temp, "TEMPORARY on the database"),
        (r.idem_usage, "USAGE on schema idem"),
    ] {
        if flag {
            excess.push(name.to_owned());
        }
    }
    if !r.member_of.is_empty() {
        excess.push(format!("membership in {}", r.member_of.join(", ")));
    }
    if !r.create_in.is_empty() {
        excess.push(format!("CREATE on schema {}", r.create_in.join(", ")));
    }
    if !r.other_schemas.is_empty() {
        excess.push(format!("USAGE on other handlers' schema {}", r.other_schemas.join(", ")));
    }
    if !r.owns.is_empty() {
        excess.push(format!("ownership of {}", r.owns.join(", ")));
    }
    if !excess.is_empty() {
        bail!("{at} has more rights than a handler may: {}; run `idem migrate --config`", excess.join("; "));
    }
    let mut missing = Vec::new();
    if !r.rolcanlogin {
        missing.push("LOGIN");
    }
    if !r.own_schema_usage {
        missing.push("USAGE on its schema");
    }
    if !r.idem_api_usage || !r.may_claim {
        missing.push("EXECUTE on idem_api.claim_events");
    }
    if !missing.is_empty() {
        bail!("{at} lacks {}; run `idem migrate --config`", missing.join(", "));
    }
    match r.mapped_to {
        Some(h) if h == place.handler => Ok(()),
        Some(h) => bail!("{at} claims as handler `{h}`, not `{}`; run `idem migrate --config`", place.handler),
        None => bail!("{at} is not mapped to the handler; run `idem migrate --config`"),
    }
}
