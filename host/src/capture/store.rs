//! `idem.capture`: the writer (redacts, upserts, prunes) and the reads of
//! the admin API.

use std::sync::Weak;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::mpsc;

use super::{Capture, Capturing};

/// How long captures live, and how many a handler keeps.
#[derive(Debug, Clone, Copy)]
pub struct Pruning {
    pub retention: Duration,
    pub max_events: u32,
}

/// The oldest and the surplus go at most this often.
const PRUNE_EVERY: Duration = Duration::from_secs(30);

/// Writes the captures of `capturing`'s handler until it is dropped, and
/// prunes its old ones every [`PRUNE_EVERY`] (captures coming or not).
pub(super) async fn write(
    pool: PgPool,
    capturing: Weak<Capturing>,
    mut captures: mpsc::Receiver<Capture>,
    pruning: Pruning,
) {
    let Some(handler) = capturing.upgrade().map(|c| c.handler().to_owned()) else { return };
    let mut prune_tick = tokio::time::interval(PRUNE_EVERY);
    loop {
        let capture = tokio::select! {
            capture = captures.recv() => capture,
            _ = prune_tick.tick() => {
                if let Err(e) = prune(&pool, &handler, pruning).await {
                    tracing::warn!(%handler, "old captures were not pruned: {e}");
                }
                continue;
            }
        };
        let Some(capture) = capture else { return };
        let Some(capturing) = capturing.upgrade() else { return };
        let (event_id, version) = (capture.event.id, capture.version);
        // Redaction walks every string of the capture: off the runtime's
        // threads.
        let redacting = capturing.clone();
        let stored = match tokio::task::spawn_blocking(move || redacting.redaction.apply(capture)).await {
            Ok(Some(stored)) => stored,
            Ok(None) | Err(_) => {
                capturing.too_large();
                continue;
            }
        };
        let written = sqlx::query(
            "INSERT INTO idem.capture (handler, event_id, version, capture) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (handler, event_id) DO UPDATE SET version = EXCLUDED.version, \
             captured_at = now(), capture = EXCLUDED.capture",
        )
        .bind(&handler)
        .bind(event_id)
        .bind(version)
        .bind(&stored)
        .execute(&pool)
        .await;
        if let Err(e) = written {
            tracing::warn!(%handler, "a captured event was not stored: {e}");
        }
    }
}

/// Deletes `handler`'s captures older than the retention, then all but
/// the newest `max_events` (also at start-up, for a handler that no longer
/// captures: `Capturing::start`).
pub(super) async fn prune(pool: &PgPool, handler: &str, pruning: Pruning) -> Result<(), sqlx::Error> {
    let age = i64::try_from(pruning.retention.as_millis()).unwrap_or(i64::MAX);
    sqlx::query(
        "DELETE FROM idem.capture WHERE handler = $1 AND captured_at < now() - make_interval(secs => $2 / 1000.0)",
    )
    .bind(handler)
    .bind(age)
    .execute(pool)
    .await?;
    sqlx::query(
        "DELETE FROM idem.capture WHERE handler = $1 AND event_id IN (SELECT event_id FROM idem.capture \
         WHERE handler = $1 ORDER BY captured_at DESC OFFSET $2)",
    )
    .bind(handler)
    .bind(i64::from(pruning.max_events))
    .execute(pool)
    .await?;
    Ok(())
}

/// `handler`'s newest `limit` captures, oldest first, in their stored
/// (redacted) form.
pub async fn latest(pool: &PgPool, handler: &str, limit: i64) -> Result<Vec<serde_json::Value>, sqlx::Error> {
    let rows: Vec<(serde_json::Value,)> = sqlx::query_as(
        "SELECT capture FROM (SELECT capture, captured_at, event_id FROM idem.capture WHERE handler = $1 \
         ORDER BY captured_at DESC, event_id DESC LIMIT $2) newest ORDER BY captured_at, event_id",
    )
    .bind(handler)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(c,)| c).collect())
}
