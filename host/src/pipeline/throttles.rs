//! Operators' rates at run time (`idem.throttle`): every host reads the
//! handler's rows each second and applies them over the config's rates
//! (`crate::throttle`), so a change is in force everywhere within about
//! two seconds. Should PostgreSQL be unreachable, the last reading holds.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

use crate::throttle::{Rate, Throttles};

/// One row of `idem.throttle`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct Change {
    pub handler: String,
    pub target: String,
    /// `None`: no limit.
    pub per_second: Option<f64>,
    pub burst: Option<i32>,
    pub reason: String,
    pub set_by: String,
    pub set_at: chrono::DateTime<chrono::Utc>,
}

impl Change {
    fn rate(&self) -> Option<Rate> {
        let per_second = self.per_second?;
        let rate = Rate::per_second(per_second);
        Some(self.burst.and_then(|b| u32::try_from(b).ok()).map_or(rate, |burst| Rate { burst, ..rate }))
    }
}

/// `handler`'s rows, by target.
pub async fn read(pool: &sqlx::PgPool, handler: &str) -> sqlx::Result<Vec<Change>> {
    sqlx::query_as(
        "SELECT handler, target, per_second, burst, reason, set_by, set_at FROM idem.throttle \
         WHERE handler = $1 ORDER BY target",
    )
    .bind(handler)
    .fetch_all(pool)
    .await
}

/// Sets `target`'s rate for `handler` (`per_second` `None`: no limit).
pub async fn set(
    pool: &sqlx::PgPool,
    handler: &str,
    target: &str,
    rate: Option<Rate>,
    reason: &str,
    by: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO idem.throttle (handler, target, per_second, burst, reason, set_by) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (handler, target) DO UPDATE SET per_second = EXCLUDED.per_second, burst = EXCLUDED.burst, \
         reason = EXCLUDED.reason, set_by = EXCLUDED.set_by, set_at = now()",
    )
    .bind(handler)
    .bind(target)
    .bind(rate.map(|r| r.per_second))
    .bind(rate.map(|r| i32::try_from(r.burst).unwrap_or(i32::MAX)))
    .bind(reason)
    .bind(by)
    .execute(pool)
    .await
    .map(drop)
}

/// Back to the config's rate for `target`: whether there was a change.
pub async fn reset(pool: &sqlx::PgPool, handler: &str, target: &str) -> sqlx::Result<bool> {
    let deleted = sqlx::query("DELETE FROM idem.throttle WHERE handler = $1 AND target = $2")
        .bind(handler)
        .bind(target)
        .execute(pool)
        .await?;
    Ok(deleted.rows_affected() > 0)
}

/// Reads `handler`'s rows now and every second until `stop`, applying
/// them to `throttles`.
pub(crate) async fn follow(
    pool: sqlx::PgPool,
    stop: watch::Receiver<bool>,
    handler: String,
    throttles: Arc<Throttles>,
) -> anyhow::Result<()> {
    let read = move |pool: sqlx::PgPool| {
        let handler = handler.clone();
        async move { read(&pool, &handler).await }
    };
    let mut changes = super::follow::follow(pool, stop.clone(), "the operators' rates (idem.throttle)", read).await?;
    apply(&throttles, &changes.borrow());
    tokio::spawn(async move {
        while changes.changed().await.is_ok() {
            apply(&throttles, &changes.borrow_and_update());
        }
    });
    Ok(())
}

fn apply(throttles: &Throttles, changes: &[Change]) {
    throttles.set_changed(changes.iter().map(|c| (c.target.clone(), c.rate())).collect::<BTreeMap<_, _>>());
}
