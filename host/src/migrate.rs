//! idem's own schema: applied by `idem migrate`, checked at start.

use anyhow::{Context as _, bail};
use sqlx::PgPool;
use sqlx::migrate::Migrator;

pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// Applies every pending migration.
pub async fn apply(pool: &PgPool) -> anyhow::Result<()> {
    MIGRATOR.run(pool).await.context("failed to apply idem's migrations")
}

/// Provisions every handler of `config` (see `sandbox::provision`) in the
/// database `admin` is connected to; returns what was done.
pub async fn provision(admin: &PgPool, config: &crate::config::Config) -> anyhow::Result<Vec<String>> {
    let database = crate::sandbox::provision::database_name(admin).await?;
    let mut done = crate::sandbox::provision::database(admin).await?;
    for h in &config.handlers {
        let place = crate::sandbox::Place::of(h, &database)?;
        for line in crate::sandbox::provision::apply(admin, &place).await? {
            done.push(format!("handler `{}`: {line}", h.name));
        }
    }
    Ok(done)
}

/// Fails unless every migration this binary knows is applied.
pub async fn check(pool: &PgPool) -> anyhow::Result<()> {
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
