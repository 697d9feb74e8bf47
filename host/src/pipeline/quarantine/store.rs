//! The quarantine's rows (`idem.parked_key`, `idem.parked_event`): parking
//! a key or an event behind it, leasing a due key to run its events,
//! finishing it, and what operators see and ask.
//!
//! Two writers meet on a key: the partition's owner appending the key's
//! new events, and whoever runs its parked ones (any host, under a lease).
//! Both take the key's row lock for a moment, never across an execution:
//! an append finds the key either still parked (and the runner then sees
//! the new event before it lets the key go) or gone (and the event runs
//! the normal way). So no event of a parked key ever runs ahead of the
//! ones parked before it.

use base64::Engine as _;
use sqlx::Row as _;

use crate::validate::Record;

/// Where a key goes when it is parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Its first event retries when due (in this many milliseconds).
    Retrying(u64),
    /// Its first event's attempts are spent: an operator must act.
    Held,
}

/// What became of a record the worker parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parked {
    /// Stored (or stored already: a redelivery).
    Stored,
    /// Its key is no longer parked (its events ran meanwhile): the record
    /// runs the normal way.
    KeyGone,
    /// The handler's quarantine holds `max_parked` events already.
    Full,
}

/// One parked event, as the runner reads it back.
pub struct ParkedEvent {
    pub seq: i64,
    pub attempts: i32,
    pub record: Record,
}

/// A key leased to this host to run its events.
#[derive(Debug, Clone)]
pub struct Lease {
    pub key: Vec<u8>,
    pub topic: String,
    pub partition: i32,
}

/// Parks `record`: as its key's first event with `failure` (`head`, the
/// key then parked as `state` unless it is already), or behind the events
/// of a key parked already (`head` is `None`), with `attempts` spent.
pub async fn park(
    pool: &sqlx::PgPool,
    handler: &str,
    record: &Record,
    head: Option<(State, &str, &str)>,
    attempts: u32,
    max_parked: u64,
) -> sqlx::Result<Parked> {
    let Some(key) = record.key.as_deref() else { return Ok(Parked::KeyGone) };
    let mut tx = pool.begin().await?;
    let parked = sqlx::query("SELECT 1 FROM idem.parked_key WHERE handler = $1 AND key = $2 FOR UPDATE")
        .bind(handler)
        .bind(key)
        .fetch_optional(&mut *tx)
        .await?
        .is_some();
    let held: i64 = sqlx::query_scalar("SELECT count(*) FROM idem.parked_event WHERE handler = $1")
        .bind(handler)
        .fetch_one(&mut *tx)
        .await?;
    if held >= i64::try_from(max_parked).unwrap_or(i64::MAX) {
        return Ok(Parked::Full);
    }
    match (parked, head) {
        (false, None) => return Ok(Parked::KeyGone),
        (false, Some((state, reason, class))) => {
            let (state, due_ms) = match state {
                State::Retrying(ms) => ("retrying", Some(ms as f64 / 1000.0)),
                State::Held => ("held", None),
            };
            sqlx::query(
                "INSERT INTO idem.parked_key (handler, key, topic, \"partition\", state, due_at, first_failure, \
                 last_failure, last_class) VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6), $7, $7, $8)",
            )
            .bind(handler)
            .bind(key)
            .bind(&record.topic)
            .bind(record.partition)
            .bind(state)
            .bind(due_ms)
            .bind(reason)
            .bind(class)
            .execute(&mut *tx)
            .await?;
        }
        (true, _) => {}
    }
    sqlx::query(
        "INSERT INTO idem.parked_event (handler, key, topic, \"partition\", \"offset\", value, headers, \
         record_timestamp, attempts) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         ON CONFLICT (handler, topic, \"partition\", \"offset\") DO NOTHING",
    )
    .bind(handler)
    .bind(key)
    .bind(&record.topic)
    .bind(record.partition)
    .bind(record.offset)
    .bind(record.payload.as_deref())
    .bind(headers_json(&record.headers))
    .bind(record.timestamp)
    .bind(i32::try_from(attempts).unwrap_or(i32::MAX))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Parked::Stored)
}

/// The handler's parked keys (to know, at an assignment, which keys' new
/// events must be parked behind them).
pub async fn keys(pool: &sqlx::PgPool, handler: &str) -> sqlx::Result<Vec<Vec<u8>>> {
    sqlx::query_scalar("SELECT key FROM idem.parked_key WHERE handler = $1").bind(handler).fetch_all(pool).await
}

/// Leases a key that is due (not held, its time come, no live lease) to
/// `host` for `lease_secs`: its events run on this host meanwhile.
pub async fn lease_due(pool: &sqlx::PgPool, handler: &str, host: &str, lease_secs: f64) -> sqlx::Result<Option<Lease>> {
    let row = sqlx::query(
        "UPDATE idem.parked_key k SET leased_by = $2, lease_until = now() + make_interval(secs => $3) \
         FROM (SELECT handler, key FROM idem.parked_key WHERE handler = $1 AND state <> 'held' AND due_at <= now() \
               AND (lease_until IS NULL OR lease_until < now()) ORDER BY due_at LIMIT 1 FOR UPDATE SKIP LOCKED) due \
         WHERE k.handler = due.handler AND k.key = due.key RETURNING k.key, k.topic, k.\"partition\"",
    )
    .bind(handler)
    .bind(host)
    .bind(lease_secs)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| Lease { key: r.get(0), topic: r.get(1), partition: r.get(2) }))
}

/// Leases `key` whatever its state, unless another host's lease on it
/// is live: `false` then (or when the key is not parked).
pub async fn lease_key(pool: &sqlx::PgPool, handler: &str, key: &[u8], host: &str, lease_secs: f64) -> sqlx::Result<bool> {
    let leased = sqlx::query(
        "UPDATE idem.parked_key SET leased_by = $3, lease_until = now() + make_interval(secs => $4) \
         WHERE handler = $1 AND key = $2 AND (lease_until IS NULL OR lease_until < now() OR leased_by = $3)",
    )
    .bind(handler)
    .bind(key)
    .bind(host)
    .bind(lease_secs)
    .execute(pool)
    .await?;
    Ok(leased.rows_affected() == 1)
}

/// The key's first parked event, if it has one.
pub async fn first(pool: &sqlx::PgPool, handler: &str, lease: &Lease) -> sqlx::Result<Option<ParkedEvent>> {
    let row = sqlx::query(
        "SELECT seq, attempts, \"offset\", value, headers, record_timestamp FROM idem.parked_event \
         WHERE handler = $1 AND key = $2 ORDER BY seq LIMIT 1",
    )
    .bind(handler)
    .bind(&lease.key)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| ParkedEvent {
        seq: r.get(0),
        attempts: r.get(1),
        record: Record {
            topic: lease.topic.clone(),
            partition: lease.partition,
            offset: r.get(2),
            key: Some(lease.key.clone()),
            payload: r.get(3),
            headers: headers_from(&r.get::<serde_json::Value, _>(4)),
            timestamp: r.get(5),
        },
    }))
}

/// Counts one more execution of the event, before it runs: the count.
pub async fn spend(pool: &sqlx::PgPool, handler: &str, key: &[u8], seq: i64, by: i32) -> sqlx::Result<i32> {
    sqlx::query_scalar(
        "UPDATE idem.parked_event SET attempts = greatest(attempts + $4, 0) \
         WHERE handler = $1 AND key = $2 AND seq = $3 RETURNING attempts",
    )
    .bind(handler)
    .bind(key)
    .bind(seq)
    .bind(by)
    .fetch_optional(pool)
    .await
    .map(|n| n.unwrap_or(0))
}

/// The event ran (or went to the dead-letter topic): it leaves the
/// quarantine, and the key's lease is renewed for the next.
pub async fn done(pool: &sqlx::PgPool, handler: &str, key: &[u8], seq: i64, lease_secs: f64) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("DELETE FROM idem.parked_event WHERE handler = $1 AND key = $2 AND seq = $3")
        .bind(handler)
        .bind(key)
        .bind(seq)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "UPDATE idem.parked_key SET lease_until = now() + make_interval(secs => $3) WHERE handler = $1 AND key = $2",
    )
    .bind(handler)
    .bind(key)
    .bind(lease_secs)
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// The key's first event failed again: it waits `due_ms` (`None`: held
/// for an operator), the lease let go.
pub async fn wait(
    pool: &sqlx::PgPool,
    handler: &str,
    key: &[u8],
    due_ms: Option<u64>,
    reason: &str,
    class: &str,
) -> sqlx::Result<()> {
    let state = if due_ms.is_some() { "CASE WHEN state = 'released' THEN 'released' ELSE 'retrying' END" } else { "'held'" };
    sqlx::query(&format!(
        "UPDATE idem.parked_key SET state = {state}, due_at = now() + make_interval(secs => $3), \
         last_failure = coalesce($4, last_failure), last_class = coalesce($5, last_class), \
         leased_by = NULL, lease_until = NULL WHERE handler = $1 AND key = $2"
    ))
    .bind(handler)
    .bind(key)
    .bind(due_ms.map(|ms| ms as f64 / 1000.0))
    .bind((!reason.is_empty()).then_some(reason))
    .bind((!class.is_empty()).then_some(class))
    .execute(pool)
    .await
    .map(drop)
}

/// Lets the key go if it has no event left: `true` then. Under its row
/// lock, so an append either came first (and is seen) or finds it gone.
pub async fn finish(pool: &sqlx::PgPool, handler: &str, key: &[u8]) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT 1 FROM idem.parked_key WHERE handler = $1 AND key = $2 FOR UPDATE")
        .bind(handler)
        .bind(key)
        .fetch_optional(&mut *tx)
        .await?;
    let left: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM idem.parked_event WHERE handler = $1 AND key = $2)")
            .bind(handler)
            .bind(key)
            .fetch_one(&mut *tx)
            .await?;
    if !left {
        sqlx::query("DELETE FROM idem.parked_key WHERE handler = $1 AND key = $2")
            .bind(handler)
            .bind(key)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(!left)
}

/// An operator's release: the key is due at once, its first event's
/// attempts start again. The number of its events (`None`: not parked).
pub async fn release(pool: &sqlx::PgPool, handler: &str, key: &[u8]) -> sqlx::Result<Option<i64>> {
    let mut tx = pool.begin().await?;
    let released = sqlx::query(
        "UPDATE idem.parked_key SET state = 'released', due_at = now() WHERE handler = $1 AND key = $2",
    )
    .bind(handler)
    .bind(key)
    .execute(&mut *tx)
    .await?;
    if released.rows_affected() == 0 {
        return Ok(None);
    }
    sqlx::query(
        "UPDATE idem.parked_event SET attempts = 0 WHERE handler = $1 AND key = $2 AND seq = \
         (SELECT min(seq) FROM idem.parked_event WHERE handler = $1 AND key = $2)",
    )
    .bind(handler)
    .bind(key)
    .execute(&mut *tx)
    .await?;
    let events = sqlx::query_scalar("SELECT count(*) FROM idem.parked_event WHERE handler = $1 AND key = $2")
        .bind(handler)
        .bind(key)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Some(events))
}

/// A record's headers as stored: `[[name, base64 value or null], …]`.
fn headers_json(headers: &[(String, Option<Vec<u8>>)]) -> serde_json::Value {
    let b64 = base64::engine::general_purpose::STANDARD;
    headers.iter().map(|(name, value)| serde_json::json!([name, value.as_ref().map(|v| b64.encode(v))])).collect()
}

fn headers_from(stored: &serde_json::Value) -> Vec<(String, Option<Vec<u8>>)> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let pairs = stored.as_array().map(Vec::as_slice).unwrap_or_default();
    pairs
        .iter()
        .filter_map(|pair| {
            let name = pair.get(0)?.as_str()?.to_owned();
            let value = pair.get(1).and_then(|v| v.as_str()).and_then(|v| b64.decode(v).ok());
            Some((name, value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn headers_keep_their_bytes_and_nulls_through_the_table() {
        let headers = vec![("a".to_owned(), Some(vec![0, 255, 10])), ("b".to_owned(), None), ("a".to_owned(), Some(vec![]))];
        assert_eq!(super::headers_from(&super::headers_json(&headers)), headers);
    }
}
