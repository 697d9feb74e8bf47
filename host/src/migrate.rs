//! idem's own schema: applied by `idem migrate`, checked at start.

use anyhow::{Context as _, bail};
use sqlx::PgPool;
use sqlx::migrate::Migrator;

use crate::config::RetentionMode;

pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// Applies every pending migration; `idem.processed_event` is created
/// partitioned (see `retention`).
pub async fn apply(pool: &PgPool) -> anyhow::Result<()> {
    apply_for(pool, RetentionMode::Partition).await
}

/// Applies every pending migration, creating `idem.processed_event` for
/// `mode` if that migration is pending (it reads `idem.retention_mode`).
pub async fn apply_for(pool: &PgPool, mode: RetentionMode) -> anyhow::Result<()> {
    let mut conn = pool.acquire().await.context("failed to connect to the database")?;
    // A session setting: this connection is closed afterwards, never reused.
    conn.close_on_drop();
    sqlx::query("SELECT set_config('idem.retention_mode', $1, false)")
        .bind(mode.as_str())
        .execute(&mut *conn)
        .await
        .context("failed to set idem.retention_mode")?;
    MIGRATOR.run(&mut *conn).await.context("failed to apply idem's migrations")
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
    done.extend(crate::outbox::provision::apply(admin, config).await?);
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
    // The key the host vouches for its emits with (`outbox::write`): every
    // path that runs handlers checks the database here first.
    crate::outbox::write::load_key(pool).await;
    Ok(())
}
