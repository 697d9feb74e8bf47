//! idem's own schema: applied by `idem migrate`, checked at start.

use anyhow::Context as _;
use sqlx::PgPool;

use crate::config::RetentionMode;

pub use crate::schema::MIGRATOR;

/// What [`apply_for`] left alone: migrations of a newer idem already
/// applied to the database (expand migrations, which this binary does not
/// use), newest last.
pub struct Newer(pub Vec<i64>);

/// Applies every pending migration, creating `idem.processed_event` for
/// `mode` if that migration is pending (it reads `idem.retention_mode`).
///
/// A database a newer idem migrated already (an older release's
/// `idem migrate`, run by a rollback, say) is left as it is when it has
/// every migration this binary knows; the schema gate then decides
/// whether this binary may run against it (`schema::applied`).
pub async fn apply_for(pool: &PgPool, mode: RetentionMode) -> anyhow::Result<Newer> {
    let applied = crate::schema::applied_versions(pool).await.context("failed to read the applied migrations")?;
    let newer = unknown(applied.as_deref().unwrap_or_default());
    if !newer.is_empty() {
        crate::schema::applied(pool).await?;
        return Ok(Newer(newer));
    }
    let mut conn = pool.acquire().await.context("failed to connect to the database")?;
    // A session setting: this connection is closed afterwards, never reused.
    conn.close_on_drop();
    sqlx::query("SELECT set_config('idem.retention_mode', $1, false)")
        .bind(mode.as_str())
        .execute(&mut *conn)
        .await
        .context("failed to set idem.retention_mode")?;
    MIGRATOR.run(&mut *conn).await.context("failed to apply idem's migrations")?;
    // Given back first: a pool of one connection (`idem test`'s scratch
    // database) has no other for the check.
    drop(conn);
    // A gate a newer release raised stays: this binary may not run here.
    crate::schema::applied(pool).await?;
    Ok(Newer(Vec::new()))
}

/// The applied migrations this binary does not know, in order.
fn unknown(applied: &[i64]) -> Vec<i64> {
    let mut unknown: Vec<i64> = applied.iter().copied().filter(|v| MIGRATOR.iter().all(|m| m.version != *v)).collect();
    unknown.sort_unstable();
    unknown
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
