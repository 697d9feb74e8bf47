//! Running a parked key's events under a lease: one runner at a time per
//! key, on any host. A lease is a token of its own (the host's name and a
//! fresh id) with an expiry; every write the runner makes is fenced by it
//! (`leased_by = token AND lease_until > now()`), so a runner whose lease
//! ran out — a long wait, a stalled host — changes nothing once another
//! has the key: its writes match no row, and it stops. Each write that
//! touches both tables locks the key's row first, as parking and an
//! operator's release do, so none of them waits on another in a circle.

use sqlx::Row as _;

use super::store::headers_from;
use crate::validate::Record;

/// A key leased to run its events.
#[derive(Debug, Clone)]
pub struct Lease {
    pub key: Vec<u8>,
    pub topic: String,
    pub partition: i32,
    /// This lease's own token (`host/uuid`).
    pub token: String,
}

/// One parked event, as the runner reads it back.
pub struct ParkedEvent {
    pub seq: i64,
    pub attempts: i32,
    pub record: Record,
}

/// A fresh token for `host`.
pub fn token(host: &str) -> String {
    format!("{host}/{}", uuid::Uuid::now_v7())
}

/// The fence every runner write carries: this lease still holds the key.
const FENCE: &str = "leased_by = $3 AND lease_until > now()";

/// Leases a key that is due (not held, its time come, no live lease) with
/// `token` for `secs`.
pub async fn due(pool: &sqlx::PgPool, handler: &str, token: &str, secs: f64) -> sqlx::Result<Option<Lease>> {
    let row = sqlx::query(
        "UPDATE idem.parked_key k SET leased_by = $2, lease_until = now() + make_interval(secs => $3) \
         FROM (SELECT handler, key FROM idem.parked_key WHERE handler = $1 AND state <> 'held' AND due_at <= now() \
               AND (lease_until IS NULL OR lease_until < now()) ORDER BY due_at LIMIT 1 FOR UPDATE SKIP LOCKED) due \
         WHERE k.handler = due.handler AND k.key = due.key RETURNING k.key, k.topic, k.\"partition\"",
    )
    .bind(handler)
    .bind(token)
    .bind(secs)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| Lease { key: r.get(0), topic: r.get(1), partition: r.get(2), token: token.to_owned() }))
}

/// Leases `key` whatever its state, unless a lease on it is live.
pub async fn key(pool: &sqlx::PgPool, handler: &str, key: &[u8], token: &str, secs: f64) -> sqlx::Result<Option<Lease>> {
    let row = sqlx::query(
        "UPDATE idem.parked_key SET leased_by = $3, lease_until = now() + make_interval(secs => $4) \
         WHERE handler = $1 AND key = $2 AND (lease_until IS NULL OR lease_until < now()) RETURNING topic, \"partition\"",
    )
    .bind(handler)
    .bind(key)
    .bind(token)
    .bind(secs)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| Lease { key: key.to_vec(), topic: r.get(0), partition: r.get(1), token: token.to_owned() }))
}

/// Extends the lease by `secs`: `false` when it is no longer this runner's.
pub async fn renew(pool: &sqlx::PgPool, handler: &str, lease: &Lease, secs: f64) -> sqlx::Result<bool> {
    renewed(pool, handler, lease, secs).await
}

/// [`renew`] on `on` (a pool, or a transaction that goes on with the key's
/// row locked).
async fn renewed<'c>(on: impl sqlx::PgExecutor<'c>, handler: &str, lease: &Lease, secs: f64) -> sqlx::Result<bool> {
    let renewed = sqlx::query(&format!(
        "UPDATE idem.parked_key SET lease_until = now() + make_interval(secs => $4) \
         WHERE handler = $1 AND key = $2 AND {FENCE}"
    ))
    .bind(handler)
    .bind(&lease.key)
    .bind(&lease.token)
    .bind(secs)
    .execute(on)
    .await?;
    Ok(renewed.rows_affected() == 1)
}

/// Keeps the lease renewed from now until the returned guard is dropped:
/// while the runner waits for a turn, a permit or the dead-letter topic,
/// and while an event runs (in a task of its own, so a slow renewal never
/// holds the execution up).
pub fn keep_renewed(pool: &sqlx::PgPool, handler: &str, lease: &Lease, secs: f64) -> Renewing {
    let (pool, handler, lease) = (pool.clone(), handler.to_owned(), lease.clone());
    Renewing(tokio::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs_f64(secs / 3.0)).await;
            if !matches!(renew(&pool, &handler, &lease, secs).await, Ok(true) | Err(_)) {
                return;
            }
        }
    }))
}

/// The renewing task of [`keep_renewed`], stopped when dropped.
pub struct Renewing(tokio::task::JoinHandle<()>);

impl Drop for Renewing {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Lets the lease go, the key as it was (an operator's act that stopped).
pub async fn unlease(pool: &sqlx::PgPool, handler: &str, lease: &Lease) -> sqlx::Result<()> {
    sqlx::query(&format!(
        "UPDATE idem.parked_key SET leased_by = NULL, lease_until = NULL WHERE handler = $1 AND key = $2 AND {FENCE}"
    ))
    .bind(handler)
    .bind(&lease.key)
    .bind(&lease.token)
    .execute(pool)
    .await
    .map(drop)
}

/// Hands the key over as released (due at once, its first event's
/// attempts afresh) and lets the lease go: what is left of it after an
/// operator dead-lettered what they saw.
pub async fn hand_over(pool: &sqlx::PgPool, handler: &str, lease: &Lease) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    let held = sqlx::query(&format!(
        "UPDATE idem.parked_key SET state = 'released', due_at = now(), leased_by = NULL, lease_until = NULL \
         WHERE handler = $1 AND key = $2 AND {FENCE}"
    ))
    .bind(handler)
    .bind(&lease.key)
    .bind(&lease.token)
    .execute(&mut *tx)
    .await?;
    if held.rows_affected() == 1 {
        super::store::afresh(&mut tx, handler, &lease.key).await?;
    }
    tx.commit().await
}

/// The key's first parked event, if it has one (up to `last`, when given).
pub async fn first(pool: &sqlx::PgPool, handler: &str, lease: &Lease, last: Option<i64>) -> sqlx::Result<Option<ParkedEvent>> {
    let row = sqlx::query(
        "SELECT seq, attempts, topic, \"partition\", \"offset\", value, headers, record_timestamp FROM idem.parked_event \
         WHERE handler = $1 AND key = $2 AND ($3::bigint IS NULL OR seq <= $3) ORDER BY seq LIMIT 1",
    )
    .bind(handler)
    .bind(&lease.key)
    .bind(last)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| ParkedEvent {
        seq: r.get(0),
        attempts: r.get(1),
        record: Record {
            topic: r.get(2),
            partition: r.get(3),
            offset: r.get(4),
            key: Some(lease.key.clone()),
            payload: r.get(5),
            headers: headers_from(&r.get::<serde_json::Value, _>(6)),
            timestamp: r.get(7),
        },
    }))
}

/// Counts `by` more executions of the event (one before it runs, minus
/// one for one that spent none): the count, or `None` when the lease is
/// lost (or the event gone).
pub async fn spend(pool: &sqlx::PgPool, handler: &str, lease: &Lease, seq: i64, by: i32) -> sqlx::Result<Option<i32>> {
    sqlx::query_scalar(&format!(
        "UPDATE idem.parked_event SET attempts = greatest(attempts + $5, 0) \
         WHERE handler = $1 AND key = $2 AND seq = $4 AND EXISTS \
         (SELECT 1 FROM idem.parked_key WHERE handler = $1 AND key = $2 AND {FENCE}) RETURNING attempts"
    ))
    .bind(handler)
    .bind(&lease.key)
    .bind(&lease.token)
    .bind(seq)
    .bind(by)
    .fetch_optional(pool)
    .await
}

/// The event ran (or went to the dead-letter topic): it leaves the
/// quarantine and the lease is renewed. `false`: the lease was lost.
pub async fn done(pool: &sqlx::PgPool, handler: &str, lease: &Lease, seq: i64, secs: f64) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    if !renewed(&mut *tx, handler, lease, secs).await? {
        return Ok(false);
    }
    sqlx::query("DELETE FROM idem.parked_event WHERE handler = $1 AND key = $2 AND seq = $3")
        .bind(handler)
        .bind(&lease.key)
        .bind(seq)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}

/// The key's first event failed again, or the runner stops: the key waits
/// `due_ms` (`None`: held for an operator) and the lease is let go.
/// `released`: an operator's release whose events are still to run keeps
/// its state.
pub async fn wait(
    pool: &sqlx::PgPool,
    handler: &str,
    lease: &Lease,
    due_ms: Option<u64>,
    (reason, class): (&str, &str),
) -> sqlx::Result<()> {
    let state = if due_ms.is_some() { "CASE WHEN state = 'released' THEN 'released' ELSE 'retrying' END" } else { "'held'" };
    sqlx::query(&format!(
        "UPDATE idem.parked_key SET state = {state}, due_at = now() + make_interval(secs => $4), \
         last_failure = coalesce($5, last_failure), last_class = coalesce($6, last_class), \
         leased_by = NULL, lease_until = NULL WHERE handler = $1 AND key = $2 AND {FENCE}"
    ))
    .bind(handler)
    .bind(&lease.key)
    .bind(&lease.token)
    .bind(due_ms.map(|ms| ms as f64 / 1000.0))
    .bind((!reason.is_empty()).then_some(reason))
    .bind((!class.is_empty()).then_some(class))
    .execute(pool)
    .await
    .map(drop)
}

/// What [`finish`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// No event was left: the key is let go.
    LetGo,
    /// Events were parked meanwhile: run them.
    More,
    /// The lease is lost: another runner has the key.
    Lost,
}

/// Lets the key go if it has no event left. Under its row lock, so an
/// append either came first (and is seen) or finds the key gone.
pub async fn finish(pool: &sqlx::PgPool, handler: &str, lease: &Lease) -> sqlx::Result<Finished> {
    let mut tx = pool.begin().await?;
    let held = sqlx::query(&format!(
        "SELECT 1 FROM idem.parked_key WHERE handler = $1 AND key = $2 AND {FENCE} FOR UPDATE"
    ))
    .bind(handler)
    .bind(&lease.key)
    .bind(&lease.token)
    .fetch_optional(&mut *tx)
    .await?;
    if held.is_none() {
        return Ok(Finished::Lost);
    }
    let left: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM idem.parked_event WHERE handler = $1 AND key = $2)")
            .bind(handler)
            .bind(&lease.key)
            .fetch_one(&mut *tx)
            .await?;
    if !left {
        sqlx::query("DELETE FROM idem.parked_key WHERE handler = $1 AND key = $2")
            .bind(handler)
            .bind(&lease.key)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(if left { Finished::More } else { Finished::LetGo })
}
