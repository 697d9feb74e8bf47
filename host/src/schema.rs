//! Which of idem's own migrations this binary knows, and whether a
//! database's schema is one it can run against: a leaf, read by `migrate`
//! (which applies them) and by `/readyz` (which reports a schema it cannot
//! run against).
//!
//! A host runs against a schema that has every migration it knows, and
//! perhaps newer ones (expand migrations of a newer release, which it does
//! not use), unless the schema gate (`idem.schema_gate`, set by a contract
//! migration) requires a migration it does not know. docs/deployment.md,
//! "Upgrading idem", gives the rule and the order.

use sqlx::PgPool;
use sqlx::migrate::Migrator;

pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// Why a host cannot run against a database's schema.
#[derive(Debug, thiserror::Error)]
pub enum Unfit {
    #[error("failed to read the database's schema: {0}")]
    Unreadable(#[from] sqlx::Error),
    #[error("idem's migrations are not applied to this database: run `idem migrate`")]
    Bare,
    #[error("migrations missing: {0}; run `idem migrate`")]
    Missing(String),
    #[error(
        "this database's schema requires an idem that knows migration {requires} ({reason}), \
         applied by a newer release; this idem ({}) knows migrations up to {known}: \
         upgrade this host (docs/deployment.md, \"Upgrading idem\")",
        env!("CARGO_PKG_VERSION")
    )]
    TooOld { requires: i64, reason: String, known: i64 },
}

/// The newest migration this binary knows.
pub fn newest_known() -> i64 {
    MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
}

/// The versions of the migrations applied to the database, or `None`
/// when idem's migrations were never applied there.
pub async fn applied_versions(pool: &PgPool) -> Result<Option<Vec<i64>>, sqlx::Error> {
    let table: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations')::text").fetch_one(pool).await?;
    if table.is_none() {
        return Ok(None);
    }
    let versions = sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success").fetch_all(pool).await?;
    Ok(Some(versions))
}

/// Fails unless every migration this binary knows is applied and the
/// schema gate requires none it does not know.
pub async fn applied(pool: &PgPool) -> Result<(), Unfit> {
    let applied = applied_versions(pool).await?.ok_or(Unfit::Bare)?;
    let missing: Vec<String> = MIGRATOR
        .iter()
        .filter(|m| !applied.contains(&m.version))
        .map(|m| format!("{} {}", m.version, m.description))
        .collect();
    if !missing.is_empty() {
        return Err(Unfit::Missing(missing.join(", ")));
    }
    let (requires, reason): (i64, String) =
        sqlx::query_as("SELECT requires, reason FROM idem.schema_gate").fetch_one(pool).await?;
    // At or below the newest it knows: a binary knows every migration
    // before its newest (they are applied in order).
    if requires <= newest_known() { Ok(()) } else { Err(Unfit::TooOld { requires, reason, known: newest_known() }) }
}
