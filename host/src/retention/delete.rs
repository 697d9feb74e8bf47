//! Delete mode, for a `idem.processed_event` that is not partitioned: rows
//! are deleted in chunks of `delete_chunk`, each chunk its own short
//! transaction that skips rows a claim holds (`FOR UPDATE SKIP LOCKED`),
//! so no lock is held for long and no claim waits on a chunk.
//!
//! A row goes once both its `processed_at` and its event id's own time are
//! older than its consumer's retention (plus [`MARGIN`]): the id's time is
//! what the stale-event guard of the claim measures, and `processed_at`
//! keeps a row claimed late (an old event processed yesterday) for its full
//! retention. Before deleting, the pass moves the consumer's
//! `deleted_before` mark forward (never back): the claim refuses ids before
//! it as stale, so raising a retention later never lets an event whose row
//! was deleted be claimed as new.

use sqlx::PgConnection;

use super::{Report, begin_bounded, lock_timed_out};
use crate::config::RetentionConfig;

/// Rows are kept this much longer than their retention: a claim that began
/// just before a row expired (its `now()` is its transaction's start)
/// still finds it, rather than waiting on a chunk that deletes it.
const MARGIN: &str = "1 hour";

/// Chunks per consumer per pass: a backlog larger than this is worked off
/// over the next passes rather than in one long one.
const MAX_CHUNKS: u64 = 10_000;

pub(super) async fn pass(
    conn: &mut PgConnection,
    settings: &RetentionConfig,
    report: &mut Report,
) -> anyhow::Result<()> {
    // Each recorded consumer, with the time before which its rows go: its
    // retention and MARGIN ago. (Rows of a consumer no host recorded stay.)
    let consumers: Vec<(String, i64)> = sqlx::query_as(
        "SELECT consumer, floor(extract(epoch FROM now() - retention - $1::interval) * 1000)::bigint \
         FROM idem.consumer_retention ORDER BY consumer",
    )
    .bind(MARGIN)
    .fetch_all(&mut *conn)
    .await?;
    for (consumer, before_ms) in consumers {
        // The mark first: from its commit on, a claim refuses ids before it
        // as stale, whatever retention is recorded later.
        sqlx::query(
            "UPDATE idem.consumer_retention SET deleted_before = greatest(deleted_before, $2) WHERE consumer = $1",
        )
        .bind(&consumer)
        .bind(before_ms)
        .execute(&mut *conn)
        .await?;
        let bound: uuid::Uuid = format!("{:012x}{}", before_ms.max(0), "0".repeat(20)).parse()?;
        for _ in 0..MAX_CHUNKS {
            let mut tx = begin_bounded(conn, settings.lock_timeout.0).await?;
            let deleted = sqlx::query(
                "DELETE FROM idem.processed_event pe USING ( \
                     SELECT event_id, consumer FROM idem.processed_event \
                     WHERE consumer = $1 AND event_id < $2 \
                       AND processed_at < to_timestamp($3::bigint / 1000.0) \
                     LIMIT $4 FOR UPDATE SKIP LOCKED) d \
                 WHERE pe.event_id = d.event_id AND pe.consumer = d.consumer",
            )
            .bind(&consumer)
            .bind(bound)
            .bind(before_ms)
            .bind(i64::from(settings.delete_chunk))
            .execute(&mut *tx)
            .await;
            let n = match deleted {
                Ok(done) => done.rows_affected(),
                Err(e) if lock_timed_out(&e) => {
                    report.deferred.push(format!("deleting rows of {consumer}"));
                    break;
                }
                Err(e) => return Err(anyhow::anyhow!("failed to delete expired rows: {e}")),
            };
            tx.commit().await?;
            if n == 0 {
                break;
            }
            report.deleted += n;
            report.chunks += 1;
            if n < u64::from(settings.delete_chunk) {
                break;
            }
        }
    }
    Ok(())
}
