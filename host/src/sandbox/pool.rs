//! Each handler's own connection pool, logged in as its role.
//!
//! A connection goes back to the pool only clean: a guest reaches one only
//! inside an event's transaction ([`crate::transaction::EventTx`]), which
//! resets the session in its COMMIT's or ROLLBACK's round trip and closes
//! a connection it could not reset. (Everything a guest sets inside the
//! transaction with `SET LOCAL`/`set_config(…, true)` ends with it; the
//! executor pins what its guarantees depend on at BEGIN.) The host's own
//! statements on the pool (a probe, ending an abandoned backend) leave
//! nothing behind.

use std::time::Duration;

use anyhow::Context as _;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::Place;

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
        .connect_with(options)
        .await
        .with_context(|| format!("handler `{}`: failed to log in as role {}", place.handler, place.role))
}
