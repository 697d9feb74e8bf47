//! `idem migrate --config`: creates or updates each handler's role, schema,
//! migrations and grants. Run with an administrator's URL: a superuser, or
//! a role with CREATEROLE that owns the database. Idempotent.

use std::path::Path;

use anyhow::{Context as _, bail};
use sha2::{Digest as _, Sha256};
use sqlx::{Executor as _, PgPool};

use super::{Place, ident};

/// What the database itself needs before any handler: PUBLIC loses what
/// PostgreSQL gives it by default (CREATE and TEMPORARY on the database,
/// CREATE on `public`, already gone in PostgreSQL 15), EXECUTE on the
/// functions and SELECT on the views [`super::public`] revokes. Once per `idem migrate --config`, before
/// [`apply`]. Returns what was done, one line each.
pub async fn database(admin: &PgPool) -> anyhow::Result<Vec<String>> {
    let db = ident(&database_name(admin).await?);
    admin
        .execute(
            format!(
                "REVOKE CREATE, TEMPORARY ON DATABASE {db} FROM PUBLIC; REVOKE CREATE ON SCHEMA public FROM PUBLIC"
            )
            .as_str(),
        )
        .await
        .context("failed to revoke PUBLIC's default rights on the database (is the administrator its owner?)")?;
    Ok(super::public::revoke(admin).await)
}

/// Provisions `place` in the database `admin` is connected to (after
/// [`database`]). Returns what was done, one line each (no secrets).
pub async fn apply(admin: &PgPool, place: &Place) -> anyhow::Result<Vec<String>> {
    let at = format!("handler `{}`", place.handler);
    let names =
        Names { role: ident(&place.role), schema: ident(&place.schema), db: ident(&database_name(admin).await?) };
    let mut done = ensure_role(admin, place, &at, &names).await?;
    done.extend(role_settings(admin, place, &at, &names).await?);
    done.extend(revoke_memberships(admin, place, &at, &names).await?);
    done.extend(schema(admin, place, &at, &names).await?);
    if let Some(dir) = &place.migrations {
        done.extend(migrate(admin, place, dir).await.with_context(|| format!("{at}: migrations"))?);
    }
    grant(admin, &at, &names).await?;
    record(admin, place, &at).await?;
    done.push(format!("role {} may use schema {} and claim as `{}`", place.role, place.schema, place.handler));
    Ok(done)
}

/// A handler's names as SQL identifiers.
struct Names {
    role: String,
    schema: String,
    db: String,
}

/// Creates the handler's login role, or takes an existing one over.
async fn ensure_role(admin: &PgPool, place: &Place, at: &str, names: &Names) -> anyhow::Result<Vec<String>> {
    let role = &names.role;
    let existing: Option<(bool, bool, bool)> =
        sqlx::query_as("SELECT rolsuper, rolreplication, rolbypassrls FROM pg_roles WHERE rolname = $1")
            .bind(&place.role)
            .fetch_optional(admin)
            .await
            .with_context(|| format!("{at}: failed to look up role {}", place.role))?;
    let Some(rights) = existing else {
        let create =
            format!("CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS NOINHERIT");
        admin.execute(create.as_str()).await.with_context(|| format!("{at}: failed to create role {}", place.role))?;
        return Ok(vec![format!("created role {}", place.role)]);
    };
    take_over(admin, place, at, names, rights).await?;
    Ok(Vec::new())
}

/// Takes an existing role over: only if it is this handler's already, or
/// plainly harmless; never a role that something else (a person, another
/// application) may depend on.
async fn take_over(
    admin: &PgPool,
    place: &Place,
    at: &str,
    names: &Names,
    (superuser, replication, bypassrls): (bool, bool, bool),
) -> anyhow::Result<()> {
    let role = &names.role;
    let mapped: Option<String> = sqlx::query_scalar("SELECT handler FROM idem.handler_role WHERE role_name = $1")
        .bind(&place.role)
        .fetch_optional(admin)
        .await?;
    let memberships: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member WHERE r.rolname = $1",
    )
    .bind(&place.role)
    .fetch_one(admin)
    .await?;
    let harmless = !superuser && !replication && !bypassrls && memberships == 0;
    match mapped {
        Some(h) if h != place.handler => {
            bail!("{at}: role {} is handler `{h}`'s; give this handler another database.role", place.role)
        }
        Some(_) => {}
        None if harmless => {}
        None => bail!(
            "{at}: role {} exists with rights a handler may not have (superuser, replication, bypassrls or \
             a membership) and is not a handler role here; drop it or set database.role to another name",
            place.role
        ),
    }
    if superuser || replication || bypassrls {
        // Only a superuser may take these away; refuse otherwise.
        admin
            .execute(format!("ALTER ROLE {role} NOSUPERUSER NOREPLICATION NOBYPASSRLS").as_str())
            .await
            .with_context(|| format!("{at}: role {} is a superuser, replication or bypassrls role", place.role))?;
    }
    admin
        .execute(format!("ALTER ROLE {role} LOGIN NOCREATEDB NOCREATEROLE NOINHERIT").as_str())
        .await
        .with_context(|| format!("{at}: failed to update role {}", place.role))?;
    Ok(())
}

/// The role's settings: none of its own at login, bounds on what one
/// statement may take, its password.
async fn role_settings(admin: &PgPool, place: &Place, at: &str, names: &Names) -> anyhow::Result<Vec<String>> {
    let (role, db) = (&names.role, &names.db);
    let mut done = Vec::new();
    // Per-role defaults would apply at every login; the executor pins what
    // matters anyway, but nothing is left to surprise.
    admin
        .execute(format!("ALTER ROLE {role} RESET ALL; ALTER ROLE {role} IN DATABASE {db} RESET ALL").as_str())
        .await
        .with_context(|| format!("{at}: failed to reset the role's settings"))?;
    // Bounds on what one statement of the guest may take from the server:
    // temp_file_limit is a superuser's setting (the role cannot raise it),
    // work_mem the guard keeps the guest from changing.
    let limits = format!(
        "ALTER ROLE {role} IN DATABASE {db} SET temp_file_limit = '{}MB'; \
         ALTER ROLE {role} IN DATABASE {db} SET work_mem = '{}MB'",
        place.temp_file_limit_mib, place.work_mem_mib
    );
    match admin.execute(limits.as_str()).await {
        Ok(_) => done.push(format!(
            "temp_file_limit {} MiB, work_mem {} MiB for {}",
            place.temp_file_limit_mib, place.work_mem_mib, place.role
        )),
        Err(e) => {
            done.push(format!("could not set temp_file_limit and work_mem for {} ({e}): needs a superuser", place.role))
        }
    }
    if let Some(password) = &place.password {
        // Quoted by the server (format's %L), never by string pasting.
        let statement: String = sqlx::query_scalar("SELECT format('ALTER ROLE %I PASSWORD %L', $1::text, $2::text)")
            .bind(&place.role)
            .bind(password)
            .fetch_one(admin)
            .await?;
        admin.execute(statement.as_str()).await.with_context(|| format!("{at}: failed to set the role's password"))?;
        done.push(format!("set the password of {}", place.role));
    }
    Ok(done)
}

/// Revokes every membership the role has.
async fn revoke_memberships(admin: &PgPool, place: &Place, at: &str, names: &Names) -> anyhow::Result<Vec<String>> {
    let role = &names.role;
    let mut done = Vec::new();
    let memberships: Vec<String> = sqlx::query_scalar(
        "SELECT g.rolname::text FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid \
         JOIN pg_roles r ON r.oid = m.member WHERE r.rolname = $1",
    )
    .bind(&place.role)
    .fetch_all(admin)
    .await?;
    for group in memberships {
        admin
            .execute(format!("REVOKE {} FROM {role}", ident(&group)).as_str())
            .await
            .with_context(|| format!("{at}: failed to revoke membership in {group} from {}", place.role))?;
        done.push(format!("revoked membership in {group}"));
    }

    Ok(done)
}

/// The role's database privileges, and the handler's schema, owned by the
/// administrator (an owner could run DDL), with whatever the role owned
/// taken over.
async fn schema(admin: &PgPool, place: &Place, at: &str, names: &Names) -> anyhow::Result<Vec<String>> {
    let (role, schema, db) = (&names.role, &names.schema, &names.db);
    let mut done = Vec::new();
    admin
        .execute(
            format!("REVOKE CREATE, TEMPORARY ON DATABASE {db} FROM {role}; GRANT CONNECT ON DATABASE {db} TO {role}")
                .as_str(),
        )
        .await
        .with_context(|| format!("{at}: failed to set the role's database privileges"))?;

    // The schema belongs to the administrator: an owner could run DDL.
    admin
        .execute(format!("CREATE SCHEMA IF NOT EXISTS {schema}; REVOKE ALL ON SCHEMA {schema} FROM PUBLIC").as_str())
        .await
        .with_context(|| format!("{at}: failed to create schema {}", place.schema))?;
    let owns: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM pg_class WHERE relowner = r.oid) + (SELECT count(*) FROM pg_namespace WHERE nspowner = r.oid) \
         + (SELECT count(*) FROM pg_proc WHERE proowner = r.oid) + (SELECT count(*) FROM pg_type WHERE typowner = r.oid) \
         + (SELECT count(*) FROM pg_largeobject_metadata WHERE lomowner = r.oid) FROM pg_roles r WHERE r.rolname = $1",
    )
    .bind(&place.role)
    .fetch_one(admin)
    .await?;
    if owns > 0 {
        admin
            .execute(format!("REASSIGN OWNED BY {role} TO CURRENT_USER").as_str())
            .await
            .with_context(|| format!("{at}: role {} owns objects; failed to take them over", place.role))?;
        done.push(format!("took over {owns} object(s) the role owned"));
    }

    Ok(done)
}

/// The rights a handler's role has: its schema's tables and sequences, and
/// idem's claim and emit functions, and the count of its transaction's
/// writes (read by a shadow run, `crate::shadow`).
async fn grant(admin: &PgPool, at: &str, names: &Names) -> anyhow::Result<()> {
    let (role, schema) = (&names.role, &names.schema);
    admin
        .execute(
            format!(
                "GRANT USAGE ON SCHEMA {schema} TO {role}; \
                 REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role}; \
                 GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}; \
                 GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}; \
                 GRANT USAGE ON SCHEMA idem_api TO {role}; \
                 REVOKE EXECUTE ON FUNCTION idem_api.claim(uuid, text, integer, bigint, bytea) FROM {role}; \
                 REVOKE EXECUTE ON FUNCTION idem_api.claim_many(uuid[], text[], integer[], bigint[], bytea[]) FROM {role}; \
                 GRANT EXECUTE ON FUNCTION idem_api.claim_events(uuid[], text[], integer[], bigint[], bytea[], integer, boolean) TO {role}; \
                 GRANT EXECUTE ON FUNCTION idem_api.emit_events(uuid[], text[], text[], text[], jsonb[], jsonb[], uuid[]) TO {role}; \
                 GRANT EXECUTE ON FUNCTION idem_api.transaction_writes() TO {role}"
            )
            .as_str(),
        )
        .await
        .with_context(|| format!("{at}: failed to grant the role its rights"))?;

    Ok(())
}

/// Maps the role to the handler (refusing an outbox producer's name) and
/// makes the handler's module gate.
async fn record(admin: &PgPool, place: &Place, at: &str) -> anyhow::Result<()> {
    // One namespace with the outbox's producers: a handler named as one
    // would have that application's role publish as the handler.
    let producer_role: Option<String> =
        sqlx::query_scalar("SELECT role_name FROM idem.outbox_producer WHERE producer = $1")
            .bind(&place.handler)
            .fetch_optional(admin)
            .await?;
    if let Some(other) = producer_role {
        bail!(
            "{at}: `{}` is an outbox producer of this database (role {other}): `idem outbox --remove-producer {}` \
             first, or name the handler otherwise",
            place.handler,
            place.handler
        );
    }
    let mut tx = admin.begin().await?;
    sqlx::query("DELETE FROM idem.handler_role WHERE handler = $1 AND role_name <> $2")
        .bind(&place.handler)
        .bind(&place.role)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO idem.handler_role (role_name, handler, schema_name) VALUES ($1, $2, $3) \
         ON CONFLICT (role_name) DO UPDATE SET handler = excluded.handler, schema_name = excluded.schema_name",
    )
    .bind(&place.role)
    .bind(&place.handler)
    .bind(&place.schema)
    .execute(&mut *tx)
    .await
    .with_context(|| format!("{at}: failed to map role {} to the handler", place.role))?;
    // The rows claims and activations lock (see migration 20261201000003).
    sqlx::query("SELECT idem.ensure_module_gate($1)")
        .bind(&place.handler)
        .execute(&mut *tx)
        .await
        .with_context(|| format!("{at}: failed to make its module gate"))?;
    tx.commit().await?;
    Ok(())
}

/// The database `admin` is connected to: handler roles are named after it.
pub async fn database_name(admin: &PgPool) -> anyhow::Result<String> {
    Ok(sqlx::query_scalar("SELECT current_database()::text").fetch_one(admin).await?)
}

/// One migration file: `NNNN_name.sql`.
struct Migration {
    version: i64,
    name: String,
    sql: String,
    sha256: String,
}

fn read_migrations(dir: &Path) -> anyhow::Result<Vec<Migration>> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("failed to read {}", dir.display()))?;
    let mut migrations = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let Some(file) = path.file_name().and_then(|f| f.to_str()) else { continue };
        let Some(stem) = file.strip_suffix(".sql") else { continue };
        let (version, name) = stem
            .split_once('_')
            .and_then(|(v, n)| Some((v.parse::<i64>().ok()?, n)))
            .with_context(|| format!("{}: a migration is named NNNN_name.sql", path.display()))?;
        let sql = crate::files::read_text(&path).with_context(|| format!("failed to read {}", path.display()))?;
        let sha256 = hex::encode(Sha256::digest(sql.as_bytes()));
        migrations.push(Migration { version, name: name.to_owned(), sql, sha256 });
    }
    migrations.sort_by_key(|m| m.version);
    if let Some(w) = migrations.windows(2).find(|w| w[0].version == w[1].version) {
        bail!("two migrations have version {}", w[0].version);
    }
    Ok(migrations)
}

/// Applies the pending migrations of `dir`, each in a transaction of its own
/// with `search_path` set to the handler's schema.
async fn migrate(admin: &PgPool, place: &Place, dir: &Path) -> anyhow::Result<Vec<String>> {
    let applied: Vec<(i64, String)> =
        sqlx::query_as("SELECT version, sha256 FROM idem.handler_migration WHERE handler = $1")
            .bind(&place.handler)
            .fetch_all(admin)
            .await?;
    let mut done = Vec::new();
    for m in read_migrations(dir)? {
        if let Some((_, sha)) = applied.iter().find(|(v, _)| *v == m.version) {
            if *sha != m.sha256 {
                bail!(
                    "migration {} ({}) was changed after it was applied; add a new migration instead",
                    m.version,
                    m.name
                );
            }
            continue;
        }
        let mut tx = admin.begin().await?;
        tx.execute(format!("SET LOCAL search_path = {}, pg_catalog", ident(&place.schema)).as_str()).await?;
        tx.execute(m.sql.as_str()).await.with_context(|| format!("migration {} ({}) failed", m.version, m.name))?;
        sqlx::query("INSERT INTO idem.handler_migration (handler, version, name, sha256) VALUES ($1, $2, $3, $4)")
            .bind(&place.handler)
            .bind(m.version)
            .bind(&m.name)
            .bind(&m.sha256)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        done.push(format!("applied migration {} ({})", m.version, m.name));
    }
    Ok(done)
}
