//! Attempts that survive the process: an event whose execution kills the
//! host (a guest that brings it down, a host bug) would otherwise be
//! redelivered and run again forever, since its failure is never seen.
//!
//! Cost off the happy path: executions are counted in
//! `idem.execution_attempt` (idem's own pool, outside the event's
//! transaction) only while the partition has committed no event since it
//! was assigned. A crash loop replays exactly that: after a restart the
//! records before the killer are duplicates, and the killer is the first
//! one executed for real. Once one event of the assignment is processed,
//! counting stops: one insert and one delete per partition assignment in
//! the steady state, nothing per event.
//!
//! Each record is counted once per process (the in-process retries are
//! bounded by `max_attempts` already), and a handler runs one unproven
//! execution at a time, so that a crash is only ever blamed on the event
//! that was running.
//!
//! `[database] url`'s role needs INSERT, UPDATE and DELETE on
//! `idem.execution_attempt` (the README's provisioning section says so).

use sqlx::PgPool;

use crate::validate::Record;

/// Counts one more execution of `record` by `handler`; answers the count.
pub(crate) async fn count(pool: &PgPool, handler: &str, record: &Record) -> Result<u32, sqlx::Error> {
    let attempts: i32 = sqlx::query_scalar(
        "INSERT INTO idem.execution_attempt (consumer, topic, \"partition\", \"offset\", attempts) \
         VALUES ($1, $2, $3, $4, 1) \
         ON CONFLICT (consumer, topic, \"partition\", \"offset\") \
         DO UPDATE SET attempts = idem.execution_attempt.attempts + 1, updated_at = now() \
         RETURNING attempts",
    )
    .bind(handler)
    .bind(&record.topic)
    .bind(record.partition)
    .bind(record.offset)
    .fetch_one(pool)
    .await?;
    Ok(u32::try_from(attempts).unwrap_or(0))
}

/// Forgets `record`'s count once its execution in this process is over
/// (resolved, or abandoned at a revocation: either way it did not kill the
/// process, so rebalances never add up to a crash count). A failure only
/// leaves a row behind (logged): a later redelivery of the same offset
/// would start from it, which errs on the side of the DLQ, never of a loop.
pub(crate) async fn forget(pool: &PgPool, handler: &str, record: &Record) {
    let deleted = sqlx::query(
        "DELETE FROM idem.execution_attempt WHERE consumer = $1 AND topic = $2 AND \"partition\" = $3 AND \"offset\" = $4",
    )
    .bind(handler)
    .bind(&record.topic)
    .bind(record.partition)
    .bind(record.offset)
    .execute(pool)
    .await;
    if let Err(e) = deleted {
        tracing::warn!(handler, topic = %record.topic, partition = record.partition, offset = record.offset, "failed to forget an execution count: {e}");
    }
}
