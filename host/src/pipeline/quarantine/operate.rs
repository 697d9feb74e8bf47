//! What operators see of a handler's quarantine and do with it (the API,
//! the console and `idem quarantine` reach it through a running host), and
//! the count the metrics show.

use serde::Serialize;
use sqlx::Row as _;

use super::{LEASE_SECONDS, lease, store};
use crate::pipeline::dlq::Refusal;
use crate::pipeline::HandlerContext;
use crate::pipeline::dlq::Failure;
use crate::stats::Stats;
use crate::validate::Record;

/// One parked key, as an operator sees it.
#[derive(Debug, Serialize)]
pub struct ParkedKey {
    /// The key as text (bytes that are not UTF-8 replaced), and exactly.
    pub key: String,
    pub key_base64: String,
    pub topic: String,
    pub partition: i32,
    /// `retrying`, `held` or `released`.
    pub state: String,
    pub due_at: Option<chrono::DateTime<chrono::Utc>>,
    pub events: i64,
    pub first_offset: Option<i64>,
    pub first_failure: String,
    pub last_failure: String,
    pub last_class: String,
    pub parked_at: chrono::DateTime<chrono::Utc>,
    /// The host running its events now, if one is.
    pub running_on: Option<String>,
}

/// The handler's parked keys, oldest first (at most `limit`), and the
/// quarantine's totals.
pub async fn list(pool: &sqlx::PgPool, handler: &str, limit: i64) -> sqlx::Result<(Vec<ParkedKey>, Totals)> {
    use base64::Engine as _;
    let rows = sqlx::query(
        "SELECT k.key, k.topic, k.\"partition\", k.state, k.due_at, k.first_failure, k.last_failure, k.last_class, \
         k.parked_at, CASE WHEN k.lease_until > now() THEN split_part(k.leased_by, '/', 1) END, \
         (SELECT count(*) FROM idem.parked_event e WHERE e.handler = k.handler AND e.key = k.key), \
         (SELECT min(\"offset\") FROM idem.parked_event e WHERE e.handler = k.handler AND e.key = k.key) \
         FROM idem.parked_key k WHERE k.handler = $1 ORDER BY k.parked_at, k.key LIMIT $2",
    )
    .bind(handler)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    let keys = rows
        .into_iter()
        .map(|r| {
            let key: Vec<u8> = r.get(0);
            ParkedKey {
                key: String::from_utf8_lossy(&key).into_owned(),
                key_base64: base64::engine::general_purpose::STANDARD.encode(&key),
                topic: r.get(1),
                partition: r.get(2),
                state: r.get(3),
                due_at: r.get(4),
                first_failure: r.get(5),
                last_failure: r.get(6),
                last_class: r.get(7),
                parked_at: r.get(8),
                running_on: r.get(9),
                events: r.get(10),
                first_offset: r.get(11),
            }
        })
        .collect();
    Ok((keys, totals(pool, handler).await?))
}

/// The quarantine's size now.
#[derive(Debug, Default, Serialize)]
pub struct Totals {
    pub keys: i64,
    pub events: i64,
    pub oldest_parked_at: Option<chrono::DateTime<chrono::Utc>>,
}

async fn totals(pool: &sqlx::PgPool, handler: &str) -> sqlx::Result<Totals> {
    let row = sqlx::query(
        "SELECT (SELECT count(*) FROM idem.parked_key WHERE handler = $1), count(*), min(parked_at) \
         FROM idem.parked_event WHERE handler = $1",
    )
    .bind(handler)
    .fetch_one(pool)
    .await?;
    Ok(Totals { keys: row.get(0), events: row.get(1), oldest_parked_at: row.get(2) })
}

/// Counts the quarantine into the handler's gauges (kept as they were
/// when the database does not answer).
pub(crate) async fn count(shared: &HandlerContext) {
    use std::sync::atomic::Ordering::Relaxed;
    let Ok(t) = totals(&shared.idem_pool, &shared.name).await else { return };
    let stats = &shared.stats;
    stats.quarantine_keys.store(u64::try_from(t.keys).unwrap_or(0), Relaxed);
    stats.quarantine_events.store(u64::try_from(t.events).unwrap_or(0), Relaxed);
    let age = t.oldest_parked_at.map_or(0, |at| (chrono::Utc::now() - at).num_seconds().max(0));
    stats.quarantine_oldest_seconds.store(u64::try_from(age).unwrap_or(0), Relaxed);
}

/// An operator's release of `key`: its events are due at once. The
/// number of its events; with `expected`, refused unless the key holds
/// that many (what the operator saw).
pub async fn release(pool: &sqlx::PgPool, handler: &str, key: &[u8], expected: Option<i64>) -> Result<i64, Refused> {
    if let Some(expected) = expected {
        seen(pool, handler, key, Some(expected)).await?;
    }
    match store::release(pool, handler, key).await.map_err(failed)? {
        store::Released::Events(n) => Ok(n),
        store::Released::Busy => Err(Refused::Busy),
        store::Released::NotParked => Err(Refused::NotParked),
    }
}

/// Why an operator's act on a key was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("the key is not parked")]
    NotParked,
    #[error("a host is running the key's events right now; try again in a moment")]
    Busy,
    #[error("the key holds {now} event(s) now, not the {seen} shown: look again")]
    Changed { seen: i64, now: i64 },
    #[error("{sent} event(s) went to the dead-letter topic, then it stopped: {why}")]
    Stopped { sent: i64, why: String },
    #[error("{0}")]
    Failed(String),
}

fn failed(e: sqlx::Error) -> Refused {
    Refused::Failed(format!("the quarantine's tables did not answer: {e}"))
}

/// The key's events now — how many, and the last one's place — refused
/// unless they are `expected` in number (what the operator was shown).
async fn seen(pool: &sqlx::PgPool, handler: &str, key: &[u8], expected: Option<i64>) -> Result<Option<i64>, Refused> {
    let parked: Option<(i64, Option<i64>)> = sqlx::query_as(
        "SELECT (SELECT count(*) FROM idem.parked_event e WHERE e.handler = k.handler AND e.key = k.key), \
         (SELECT max(seq) FROM idem.parked_event e WHERE e.handler = k.handler AND e.key = k.key) \
         FROM idem.parked_key k WHERE k.handler = $1 AND k.key = $2",
    )
    .bind(handler)
    .bind(key)
    .fetch_optional(pool)
    .await
    .map_err(failed)?;
    match (parked, expected) {
        (None, _) => Err(Refused::NotParked),
        (Some((now, _)), Some(seen)) if now != seen => Err(Refused::Changed { seen, now }),
        (Some((_, last)), _) => Ok(last),
    }
}

/// An operator sends the parked events of `key` to the dead-letter topic,
/// in order — those parked when asked (`expected` of them, if given: what
/// the operator was shown) — and lets the key go, or, when more were
/// parked meanwhile, hands it over as released for those. How many went.
/// Leased first, so no runner runs them meanwhile (and counted under the
/// lease, so the count and the last one shown are one reading).
pub(crate) async fn dead_letter_key(
    shared: &HandlerContext,
    key: &[u8],
    expected: Option<i64>,
    actor: &str,
) -> Result<i64, Refused> {
    let (pool, name) = (&shared.idem_pool, &shared.name);
    let token = lease::token(&shared.quarantine.host);
    let Some(lease) = lease::key(pool, name, key, &token, LEASE_SECONDS).await.map_err(failed)? else {
        return Err(match seen(pool, name, key, None).await {
            Ok(_) => Refused::Busy,
            Err(e) => e,
        });
    };
    let _renewing = lease::keep_renewed(pool, name, &lease, LEASE_SECONDS);
    let outcome = dead_letter_leased(shared, &lease, expected, actor).await;
    if outcome.is_err() {
        let _ = lease::unlease(pool, name, &lease).await;
    }
    outcome
}

/// [`dead_letter_key`] once the key is leased.
async fn dead_letter_leased(shared: &HandlerContext, lease: &lease::Lease, expected: Option<i64>, actor: &str) -> Result<i64, Refused> {
    let (pool, name, key) = (&shared.idem_pool, &shared.name, lease.key.as_slice());
    let last = seen(pool, name, key, expected).await?.unwrap_or(0);
    let reason = format!("dead-lettered from the quarantine by {actor}: {}", last_failure(pool, name, key).await);
    let mut sent = 0;
    let stopped = |sent: i64, why: String| Refused::Stopped { sent, why };
    while let Some(event) = lease::first(pool, name, lease, Some(last)).await.map_err(failed)? {
        let attempts = u32::try_from(event.attempts).unwrap_or(0);
        let failure = Failure::first(crate::error::ErrorClass::Retryable, reason.clone(), attempts);
        send_to_dlq(shared, &event.record, &failure).await.map_err(|why| stopped(sent, why))?;
        match lease::done(pool, name, lease, event.seq, LEASE_SECONDS).await {
            Ok(true) => {}
            Ok(false) => return Err(stopped(sent + 1, "another host took the key".into())),
            Err(e) => return Err(stopped(sent + 1, e.to_string())),
        }
        Stats::add(&shared.stats.unparked);
        sent += 1;
    }
    let stamp = shared.quarantine.stamp();
    match lease::finish(pool, name, lease).await.map_err(|e| stopped(sent, e.to_string()))? {
        lease::Finished::LetGo => shared.quarantine.forget(key, stamp),
        // Parked after the operator asked: they run, as after a release.
        lease::Finished::More => lease::hand_over(pool, name, lease).await.map_err(|e| stopped(sent, e.to_string()))?,
        lease::Finished::Lost => return Err(stopped(sent, "another host took the key".into())),
    }
    Ok(sent)
}

async fn last_failure(pool: &sqlx::PgPool, handler: &str, key: &[u8]) -> String {
    sqlx::query_scalar("SELECT last_failure FROM idem.parked_key WHERE handler = $1 AND key = $2")
        .bind(handler)
        .bind(key)
        .fetch_optional(pool)
        .await
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// One try at writing `record` to the handler's dead-letter topic (as its
/// envelope when the topic refuses the record itself), indexed and counted.
pub(crate) async fn send_to_dlq(shared: &HandlerContext, record: &Record, failure: &Failure) -> Result<(), String> {
    let Some(dead_letters) = &shared.dead_letters else {
        return Err("the handler has no dead-letter topic".into());
    };
    let module = shared.slot.executor().handler().sha256().to_owned();
    let entry = match dead_letters.send(record, failure, &module).await {
        Ok(entry) => entry,
        Err(Refusal::Record(why)) => {
            let entry = dead_letters.send_envelope(record, failure, &module, &why).await;
            let entry = entry.map_err(|e| format!("the dead-letter topic refused the record and its envelope: {e}"))?;
            Stats::add(&shared.stats.enveloped);
            entry
        }
        Err(e) => return Err(format!("the dead-letter topic did not take the record: {e}")),
    };
    if let Err(e) = crate::pipeline::dlq::index::write(&shared.idem_pool, &entry).await {
        tracing::warn!(handler = %shared.name, "the dead letter is not in idem.dead_letter ({e}): `idem dlq reindex` adds it");
    }
    Stats::add(&shared.stats.dead_lettered);
    Ok(())
}
