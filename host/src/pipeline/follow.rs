//! A table every host reads now and then every second: the operators'
//! pauses (`pauses`) and pending rewinds (`rewinds`). What was read last is
//! shared through a watch channel; should PostgreSQL be unreachable, the
//! last reading holds (a pause does not lapse in an outage).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// How often every host reads what operators asked.
pub const REFRESH: Duration = Duration::from_secs(1);

/// Reads with `read` now (a host that cannot must not start consuming what
/// an operator may have paused or rewound: the error names `what`), then
/// every [`REFRESH`] until `stop`.
pub async fn follow<T, F, Fut>(
    pool: sqlx::PgPool,
    mut stop: watch::Receiver<bool>,
    what: &'static str,
    read: F,
) -> anyhow::Result<watch::Receiver<Arc<Vec<T>>>>
where
    T: PartialEq + Send + Sync + 'static,
    F: Fn(sqlx::PgPool) -> Fut + Send + 'static,
    Fut: Future<Output = sqlx::Result<Vec<T>>> + Send,
{
    let first = read(pool.clone()).await.map_err(|e| anyhow::anyhow!("failed to read {what}: {e}"))?;
    let (sender, receiver) = watch::channel(Arc::new(first));
    tokio::spawn(async move {
        let mut failing = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(REFRESH) => {}
                // Stopped, or the process is ending (the sender is gone).
                _ = stop.wait_for(|s| *s) => return,
            }
            match read(pool.clone()).await {
                Ok(now) => {
                    failing = false;
                    sender.send_if_modified(|held| {
                        let changed = **held != now;
                        if changed {
                            *held = Arc::new(now);
                        }
                        changed
                    });
                }
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!("failed to read {what} (the last reading holds): {e}");
                }
                Err(_) => {}
            }
        }
    });
    Ok(receiver)
}
