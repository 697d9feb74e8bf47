//! Which of idem's own migrations this binary knows, and whether a
//! database has them all: a leaf, read by `migrate` (which applies them) and
//! by `/readyz` (which reports them missing).

use anyhow::{Context as _, bail};
use sqlx::PgPool;
use sqlx::migrate::Migrator;

pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// Fails unless every migration this binary knows is applied.
pub async fn applied(pool: &PgPool) -> anyhow::Result<()> {
    let table: Option<String> = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations')::text")
        .fetch_one(pool)
        .await
        .context("failed to query the database")?;
    if table.is_none() {
        bail!("idem's migrations are not applied to this database: run `idem migrate`");
    }
    let applied: Vec<i64> = sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
        .fetch_all(pool)
        .await
        .context("failed to read applied migrations")?;
    let missing: Vec<String> = MIGRATOR
        .iter()
        .filter(|m| !applied.contains(&m.version))
        .map(|m| format!("{} {}", m.version, m.description))
        .collect();
    if !missing.is_empty() {
        bail!("migrations missing: {}; run `idem migrate`", missing.join(", "));
    }
    Ok(())
}
