//! The quarantine's rows (`idem.parked_key`, `idem.parked_event`): parking
//! a key or an event behind it, the parked keys, an operator's release.
//! Running a key's events under a lease is `lease`'s.
//!
//! Two writers meet on a key: the partition's owner appending the key's
//! new events, and whoever runs its parked ones (any host, under a lease).
//! Both take the key's row lock for a moment, never across an execution:
//! an append finds the key either still parked (and the runner then sees
//! the new event before it lets the key go) or gone (and the event runs
//! the normal way). So no event of a parked key ever runs ahead of the
//! ones parked before it.

use base64::Engine as _;

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
    if !parked && head.is_none() {
        return Ok(Parked::KeyGone);
    }
    // A redelivery of a record parked already (its offset not committed
    // before a crash): stored once, whatever the cap.
    let stored: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM idem.parked_event WHERE handler = $1 AND topic = $2 AND \"partition\" = $3 \
         AND \"offset\" = $4)",
    )
    .bind(handler)
    .bind(&record.topic)
    .bind(record.partition)
    .bind(record.offset)
    .fetch_one(&mut *tx)
    .await?;
    if stored {
        return Ok(Parked::Stored);
    }
    let held: i64 = sqlx::query_scalar("SELECT count(*) FROM idem.parked_event WHERE handler = $1")
        .bind(handler)
        .fetch_one(&mut *tx)
        .await?;
    if held >= i64::try_from(max_parked).unwrap_or(i64::MAX) {
        return Ok(Parked::Full);
    }
    if let (false, Some(first)) = (parked, head) {
        park_key(&mut tx, handler, record, key, first).await?;
    }
    sqlx::query(
        "INSERT INTO idem.parked_event (handler, key, topic, \"partition\", \"offset\", value, headers, \
         record_timestamp, attempts) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
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

/// The key's row, as `record`'s failure parks it.
async fn park_key(
    tx: &mut sqlx::PgConnection,
    handler: &str,
    record: &Record,
    key: &[u8],
    (state, reason, class): (State, &str, &str),
) -> sqlx::Result<()> {
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
    .execute(tx)
    .await
    .map(drop)
}

/// The handler's parked keys (to know, at an assignment, which keys' new
/// events must be parked behind them).
pub async fn keys(pool: &sqlx::PgPool, handler: &str) -> sqlx::Result<Vec<Vec<u8>>> {
    sqlx::query_scalar("SELECT key FROM idem.parked_key WHERE handler = $1").bind(handler).fetch_all(pool).await
}

/// What an operator's release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// Released: the number of its events.
    Events(i64),
    /// A runner holds the key right now (its outcome would undo the release).
    Busy,
    NotParked,
}

/// An operator's release: the key is due at once, its first event's
/// attempts start again; refused while a runner holds it.
pub async fn release(pool: &sqlx::PgPool, handler: &str, key: &[u8]) -> sqlx::Result<Released> {
    let mut tx = pool.begin().await?;
    let lease: Option<bool> = sqlx::query_scalar(
        "SELECT coalesce(lease_until > now(), false) FROM idem.parked_key WHERE handler = $1 AND key = $2 FOR UPDATE",
    )
    .bind(handler)
    .bind(key)
    .fetch_optional(&mut *tx)
    .await?;
    match lease {
        None => return Ok(Released::NotParked),
        Some(true) => return Ok(Released::Busy),
        Some(false) => {}
    }
    sqlx::query("UPDATE idem.parked_key SET state = 'released', due_at = now() WHERE handler = $1 AND key = $2")
        .bind(handler)
        .bind(key)
        .execute(&mut *tx)
        .await?;
    afresh(&mut tx, handler, key).await?;
    let events = sqlx::query_scalar("SELECT count(*) FROM idem.parked_event WHERE handler = $1 AND key = $2")
        .bind(handler)
        .bind(key)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Released::Events(events))
}

/// The key's first event's attempts start again (in `tx`, which holds the
/// key's row).
pub(super) async fn afresh(tx: &mut sqlx::PgConnection, handler: &str, key: &[u8]) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE idem.parked_event SET attempts = 0 WHERE handler = $1 AND key = $2 AND seq = \
         (SELECT min(seq) FROM idem.parked_event WHERE handler = $1 AND key = $2)",
    )
    .bind(handler)
    .bind(key)
    .execute(tx)
    .await
    .map(drop)
}

/// A record's headers as stored: `[[name, base64 value or null], …]`.
pub(super) fn headers_json(headers: &[(String, Option<Vec<u8>>)]) -> serde_json::Value {
    let b64 = base64::engine::general_purpose::STANDARD;
    headers.iter().map(|(name, value)| serde_json::json!([name, value.as_ref().map(|v| b64.encode(v))])).collect()
}

pub(super) fn headers_from(stored: &serde_json::Value) -> Vec<(String, Option<Vec<u8>>)> {
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
