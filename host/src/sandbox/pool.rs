//! Each handler's own connection pool, logged in as its role.
//!
//! A connection goes back to the pool only clean: whatever a guest could
//! have left on it at session level is reset on release, and a connection
//! that cannot be reset is closed. (Everything a guest sets inside the
//! event's transaction with `SET LOCAL`/`set_config(…, true)` ends with it;
//! the executor pins what its guarantees depend on at BEGIN.)

use std::time::Duration;

use anyhow::Context as _;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::Place;

/// Run on every connection returned to a handler's pool, in one round trip.
/// `RESET ALL` does not reset the role, hence `RESET ROLE` (the role is a
/// member of nothing, so only itself could have been set). Temporary objects
/// cannot exist: the role has no TEMPORARY right. SQL-level prepared
/// statements (`PREPARE`, which the guard refuses) cannot be dropped
/// without dropping the driver's own (`DEALLOCATE ALL`), so a connection
/// holding one is closed instead; the last statement counts them.
pub const CLEANUP: &str = "RESET ALL; RESET ROLE; UNLISTEN *; CLOSE ALL; DISCARD SEQUENCES; \
     SELECT (SELECT count(*) FROM pg_prepared_statements WHERE from_sql)";

/// How often a backend checks that its client is still there while it runs
/// a statement (PostgreSQL ≥ 14): when the host abandons a connection whose
/// guest statement overran, the server stops it within this time.
const CLIENT_CHECK_MS: &str = "1000";

/// Connects `place`'s pool: `url` with the handler's role and password.
pub async fn connect(url: &str, place: &Place, max_connections: u32) -> anyhow::Result<PgPool> {
    // idem's own credentials never reach a handler's connections.
    let mut url = reqwest::Url::parse(url).context("[database] url is not a URL")?;
    let _ = url.set_password(None);
    let base: PgConnectOptions = url.as_str().parse().context("[database] url is not a PostgreSQL URL")?;
    let mut options = base.username(&place.role);
    if let Some(password) = &place.password {
        options = options.password(password);
    }
    let options = options
        .application_name(&format!("idem:{}", place.handler))
        // The server checks for a vanished client during a statement, and
        // probes idle ones with TCP keepalives (30 s, then every 10 s, 3
        // tries); the host's own side is bounded by its statement deadlines.
        .options([
            ("client_connection_check_interval", CLIENT_CHECK_MS),
            ("tcp_keepalives_idle", "30"),
            ("tcp_keepalives_interval", "10"),
            ("tcp_keepalives_count", "3"),
        ]);
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        // sqlx pings every connection on release already.
        .test_before_acquire(false)
        .after_release(|conn, _| {
            Box::pin(async move {
                match reset(conn).await {
                    Ok(0) => Ok(true),
                    Ok(_) => {
                        tracing::warn!("closing a handler connection that holds a prepared statement");
                        Ok(false)
                    }
                    Err(e) => {
                        tracing::warn!("closing a handler connection that could not be reset: {e}");
                        Ok(false)
                    }
                }
            })
        })
        .connect_with(options)
        .await
        .with_context(|| format!("handler `{}`: failed to log in as role {}", place.handler, place.role))
}

/// Runs [`CLEANUP`]; returns the SQL-level prepared statements left.
async fn reset(conn: &mut sqlx::PgConnection) -> Result<i64, sqlx::Error> {
    use sqlx::Executor as _;
    let rows = conn.fetch_all(sqlx::raw_sql(CLEANUP)).await?;
    Ok(rows.last().and_then(|row| sqlx::Row::try_get::<i64, _>(row, 0).ok()).unwrap_or(-1))
}
