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
//! Batches (`[handler.batch]`): a crash rolls back the whole batch, so the
//! killer may sit deep in it, after records that are not duplicates when
//! they come back. Each batch's offset range is therefore written to
//! `idem.batch_in_flight` before it starts (the lane's row, replaced by its
//! next batch's, deleted when the lane runs out of records or stops); a
//! host assigned the partition runs the records of a range that survived a
//! crash one at a time, counted, until past it. A range left behind by a
//! batch that committed costs only that: its records are duplicates, or
//! behind the committed offset.
//!
//! The marks are written with `synchronous_commit = off` ([`marks_pool`]):
//! one round trip and no WAL flush of their own. That is enough because
//! what they guard against is the host dying, not PostgreSQL: a committed
//! mark is visible at once and survives the host. Should PostgreSQL itself
//! crash within the moment (the WAL writer's 200 ms) before a mark is
//! flushed, the batch after it lost its effects too (its own commit record
//! comes later in the WAL) and runs again as a batch. A record that kills
//! the host *and* PostgreSQL that quickly every time would therefore never
//! be counted; one that kills only the host (what counting is for) always
//! is.
//!
//! Each record is counted once per process (the in-process retries are
//! bounded by `max_attempts` already), and a handler runs one unproven
//! execution at a time, so that a crash is only ever blamed on the event
//! that was running.
//!
//! `[database] url`'s role needs INSERT, UPDATE and DELETE on
//! `idem.execution_attempt` (docs/security.md says so).

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

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

/// Ends this process's count of `record` once its execution here is over:
/// `resolved` (processed, a duplicate, dead-lettered), the row goes; else
/// (abandoned at a revocation) this process's start is taken back, a
/// decrement: another owner of the partition may be counting the same
/// record right now (a revocation does not wait for a long execution), and
/// its count must stay. Either way the execution did not kill the process,
/// so rebalances never add up to a crash count. A failure only leaves a
/// count behind (logged): a later redelivery of the same offset would start
/// from it, which errs on the side of the DLQ, never of a loop.
pub(crate) async fn forget(pool: &PgPool, handler: &str, record: &Record, resolved: bool) {
    let sql = if resolved {
        "DELETE FROM idem.execution_attempt \
         WHERE consumer = $1 AND topic = $2 AND \"partition\" = $3 AND \"offset\" = $4"
    } else {
        "WITH gone AS (DELETE FROM idem.execution_attempt \
           WHERE consumer = $1 AND topic = $2 AND \"partition\" = $3 AND \"offset\" = $4 AND attempts <= 1 \
           RETURNING 1) \
         UPDATE idem.execution_attempt SET attempts = attempts - 1, updated_at = now() \
         WHERE consumer = $1 AND topic = $2 AND \"partition\" = $3 AND \"offset\" = $4 AND attempts > 1 \
           AND NOT EXISTS (SELECT FROM gone)"
    };
    let ended = sqlx::query(sql)
        .bind(handler)
        .bind(&record.topic)
        .bind(record.partition)
        .bind(record.offset)
        .execute(pool)
        .await;
    if let Err(e) = ended {
        tracing::warn!(handler, topic = %record.topic, partition = record.partition, offset = record.offset, "failed to forget an execution count: {e}");
    }
}

/// A small pool of idem's own role for the batches' marks, committing
/// without waiting for the WAL flush (see above); connected when first used.
pub(crate) fn marks_pool(idem: &PgPool) -> PgPool {
    let options = (*idem.connect_options()).clone().options([("synchronous_commit", "off")]);
    // sqlx pings every connection on release already, as in the handlers' pools.
    PgPoolOptions::new().max_connections(2).test_before_acquire(false).connect_lazy_with(options)
}

/// Where a batch runs: a handler's partition, and the lane in it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchPlace<'a> {
    pub handler: &'a str,
    pub topic: &'a str,
    pub partition: i32,
    pub lane: usize,
}

impl BatchPlace<'_> {
    fn lane(&self) -> i32 {
        i32::try_from(self.lane).unwrap_or(i32::MAX)
    }
}

/// Records that the records `first..=last` of `at` are about to run in one
/// batch.
pub(crate) async fn batch_started(
    pool: &PgPool,
    at: BatchPlace<'_>,
    (first, last): (i64, i64),
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO idem.batch_in_flight (consumer, topic, \"partition\", lane, first_offset, last_offset) \
         VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (consumer, topic, \"partition\", lane) \
         DO UPDATE SET first_offset = $5, last_offset = $6, started_at = now()",
    )
    .bind(at.handler)
    .bind(at.topic)
    .bind(at.partition)
    .bind(at.lane())
    .bind(first)
    .bind(last)
    .execute(pool)
    .await?;
    Ok(())
}

/// The lane's last batch, the one starting at `first`, ended in this live
/// process and no other follows it for now. Only that mark goes: a later
/// one (this lane's next owner's) stays.
pub(crate) async fn batch_ended(pool: &PgPool, at: BatchPlace<'_>, first: i64) {
    let ended = sqlx::query(
        "DELETE FROM idem.batch_in_flight \
         WHERE consumer = $1 AND topic = $2 AND \"partition\" = $3 AND lane = $4 AND first_offset = $5",
    )
    .bind(at.handler)
    .bind(at.topic)
    .bind(at.partition)
    .bind(at.lane())
    .bind(first)
    .execute(pool)
    .await;
    if let Err(e) = ended {
        // A row left behind only makes the next assignment run that range
        // alone: slower, never wrong.
        let BatchPlace { handler, topic, partition, lane } = at;
        tracing::warn!(handler, topic, partition, lane, "failed to clear the batch in flight: {e}");
    }
}

/// Removes the marks of `at`'s partition (any lane) whose records are all
/// before `position`, resolved: none of them can be in flight.
pub(crate) async fn behind(pool: &PgPool, at: BatchPlace<'_>, position: i64) {
    let cleared = sqlx::query(
        "DELETE FROM idem.batch_in_flight \
         WHERE consumer = $1 AND topic = $2 AND \"partition\" = $3 AND last_offset < $4",
    )
    .bind(at.handler)
    .bind(at.topic)
    .bind(at.partition)
    .bind(position)
    .execute(pool)
    .await;
    if let Err(e) = cleared {
        let BatchPlace { handler, topic, partition, .. } = at;
        tracing::warn!(handler, topic, partition, "failed to clear a crashed batch's marks: {e}");
    }
}

/// The last offset of the batches of this partition (any lane) that a
/// crash interrupted, if any.
pub(crate) async fn crashed_batch(
    pool: &PgPool,
    handler: &str,
    topic: &str,
    partition: i32,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT max(last_offset) FROM idem.batch_in_flight WHERE consumer = $1 AND topic = $2 AND \"partition\" = $3",
    )
    .bind(handler)
    .bind(topic)
    .bind(partition)
    .fetch_one(pool)
    .await
}
