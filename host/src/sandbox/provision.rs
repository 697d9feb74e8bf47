//! `idem migrate --config`: creates or updates each handler's role, schema,
//! migrations and grants. Run with an administrator's URL: a superuser, or
//! a role with CREATEROLE that owns the database. Idempotent.

use std::path::Path;

use anyhow::{Context as _, bail};
use sha2::{Digest as _, Sha256};
use sqlx::{Executor as _, PgPool};

use super::{Place, ident};

/// Roles that reach the server's files, programs or other backends.
const DANGEROUS_ROLES: &[&str] =
    &["pg_read_server_files", "pg_write_server_files", "pg_execute_server_program", "pg_signal_backend"];

/// Provisions `place` in the database `admin` is connected to. Returns what
/// was done, one line each (no secrets).
pub async fn apply(admin: &PgPool, place: &Place) -> anyhow::Result<Vec<String>> {
    let at = format!("handler `{}`", place.handler);
    let mut done = Vec::new();
    let (role, schema) = (ident(&place.role), ident(&place.schema));

    let existing: Option<(bool, bool, bool)> =
        sqlx::query_as("SELECT rolsuper, rolreplication, rolbypassrls FROM pg_roles WHERE rolname = $1")
            .bind(&place.role)
            .fetch_optional(admin)
            .await
            .with_context(|| format!("{at}: failed to look up role {}", place.role))?;
    match existing {
        None => {
            admin
                .execute(
                    format!(
                        "CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS NOINHERIT"
                    )
                    .as_str(),
                )
                .await
                .with_context(|| format!("{at}: failed to create role {}", place.role))?;
            done.push(format!("created role {}", place.role));
        }
        Some((superuser, replication, bypassrls)) => {
            if superuser || replication || bypassrls {
                // Only a superuser may take these away; refuse otherwise.
                admin
                    .execute(format!("ALTER ROLE {role} NOSUPERUSER NOREPLICATION NOBYPASSRLS").as_str())
                    .await
                    .with_context(|| {
                        format!("{at}: role {} is a superuser, replication or bypassrls role", place.role)
                    })?;
            }
            admin
                .execute(format!("ALTER ROLE {role} LOGIN NOCREATEDB NOCREATEROLE NOINHERIT").as_str())
                .await
                .with_context(|| format!("{at}: failed to update role {}", place.role))?;
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
    debug_assert!(DANGEROUS_ROLES.iter().all(|r| r.starts_with("pg_")));

    // What PUBLIC gets by default: CREATE and TEMPORARY on the database,
    // CREATE on `public` (already gone in PostgreSQL 15).
    let database: String = sqlx::query_scalar("SELECT current_database()::text").fetch_one(admin).await?;
    let db = ident(&database);
    admin
        .execute(
            format!(
                "REVOKE CREATE, TEMPORARY ON DATABASE {db} FROM PUBLIC; REVOKE CREATE, TEMPORARY ON DATABASE {db} FROM {role}; \
                 GRANT CONNECT ON DATABASE {db} TO {role}; REVOKE CREATE ON SCHEMA public FROM PUBLIC"
            )
            .as_str(),
        )
        .await
        .with_context(|| format!("{at}: failed to set the database's privileges (is the administrator its owner?)"))?;

    // The schema belongs to the administrator: an owner could run DDL.
    admin
        .execute(format!("CREATE SCHEMA IF NOT EXISTS {schema}; REVOKE ALL ON SCHEMA {schema} FROM PUBLIC").as_str())
        .await
        .with_context(|| format!("{at}: failed to create schema {}", place.schema))?;
    let owns: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM pg_class WHERE relowner = r.oid) + (SELECT count(*) FROM pg_namespace WHERE nspowner = r.oid) \
         + (SELECT count(*) FROM pg_proc WHERE proowner = r.oid) FROM pg_roles r WHERE r.rolname = $1",
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

    if let Some(dir) = &place.migrations {
        done.extend(migrate(admin, place, dir).await.with_context(|| format!("{at}: migrations"))?);
    }

    admin
        .execute(
            format!(
                "GRANT USAGE ON SCHEMA {schema} TO {role}; \
                 REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role}; \
                 GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}; \
                 GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}; \
                 GRANT USAGE ON SCHEMA idem_api TO {role}; \
                 GRANT EXECUTE ON FUNCTION idem_api.claim(uuid, text, integer, bigint) TO {role}"
            )
            .as_str(),
        )
        .await
        .with_context(|| format!("{at}: failed to grant the role its rights"))?;

    let mut tx = admin.begin().await?;
    sqlx::query("DELETE FROM idem.handler_role WHERE handler = $1 AND role_name <> $2")
        .bind(&place.handler)
        .bind(&place.role)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO idem.handler_role (role_name, handler) VALUES ($1, $2) \
         ON CONFLICT (role_name) DO UPDATE SET handler = excluded.handler",
    )
    .bind(&place.role)
    .bind(&place.handler)
    .execute(&mut *tx)
    .await
    .with_context(|| format!("{at}: failed to map role {} to the handler", place.role))?;
    tx.commit().await?;
    done.push(format!("role {} may use schema {} and claim as `{}`", place.role, place.schema, place.handler));
    Ok(done)
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
        let sql = std::fs::read_to_string(&path).with_context(|| format!("failed to read {}", path.display()))?;
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
