//! idem's own schema: applied by `idem migrate`, checked at start.

use anyhow::Context as _;
use sqlx::PgPool;

use crate::config::RetentionMode;

pub use crate::schema::MIGRATOR;

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

/// Fails unless every migration this binary knows is applied, and loads
/// the key the host vouches for its emits with.
pub async fn check(pool: &PgPool) -> anyhow::Result<()> {
    crate::schema::applied(pool).await?;
    // The key the host vouches for its emits with (`capabilities::emit::write`): every
    // path that runs handlers checks the database here first.
    crate::capabilities::emit::write::load_key(pool).await;
    Ok(())
}
