//! A producer's relay: its committed outbox rows published to Kafka with
//! librdkafka's idempotent producer (`enable.idempotence`, `acks=all`),
//! each marked published only once the broker acknowledged it.
//!
//! - **Order.** Rows are read in id order, which is commit order for each
//!   key (see the migration: a transaction locks its keys' buckets before
//!   it inserts), never "above the last id read": every unpublished row is
//!   read again until it is published or failed, so a transaction that
//!   commits late is never skipped. A key's rows reach one partition in
//!   that order (the idempotent producer keeps a partition's order across
//!   its retries).
//! - **At least once.** A crash between the acknowledgement and the mark,
//!   or a takeover while the old holder still sends, publishes a row again
//!   with the same `eventId`; consumers deduplicate by it.
//! - **One holder.** Each round first takes or renews the producer's lease
//!   (`lease`); without it the relay only waits and tries again.
//! - **Failures.** A row the broker refuses for good (too large, the topic
//!   gone or not authorised) is marked failed with the reason (`idem outbox`
//!   shows and re-drives it) and holds nothing else back. An outage leaves
//!   the rows where they are and backs off, up to 5 s between tries.
//! - **Waking.** A commit that wrote rows NOTIFYs `idem_outbox` with the
//!   producer's name; the relay wakes on it, at most once per
//!   [`MIN_ROUND`] (any role may NOTIFY: wake-ups are coalesced, never
//!   queued), and polls every [`POLL`] without one.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use sqlx::PgPool;
use tokio::sync::{Notify, watch};

use super::lease;
use crate::config::Config;
use crate::pipeline::dlq::refusal;
pub use crate::stats::RelayStats;

/// Rows read and sent per round.
const ROUND_ROWS: i64 = 1_000;
/// The longest wait between two rounds without a wake-up.
const POLL: Duration = Duration::from_secs(1);
/// The shortest time between two rounds woken by NOTIFY.
const MIN_ROUND: Duration = Duration::from_millis(10);
/// Backoff after an outage: from this, doubling, up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long a stopping relay goes on publishing what is committed.
const FINAL_ROUNDS: Duration = Duration::from_millis(700);
/// How often the lease holder deletes published rows past the retention.
const CLEAN_EVERY: Duration = Duration::from_secs(60);
/// How often a relay without the lease tries to take it.
const LEASE_RETRY: Duration = Duration::from_secs(2);

/// The backoff to wait now; the next one doubles, up to [`MAX_BACKOFF`].
fn next_backoff(backoff: &mut Duration) -> Duration {
    let now = *backoff;
    *backoff = (now * 2).min(MAX_BACKOFF);
    now
}

/// The relay's Kafka producer: `[kafka]`'s properties, idempotent, every
/// replica's acknowledgement awaited.
pub(super) fn kafka_producer(config: &Config, producer: &str) -> anyhow::Result<FutureProducer> {
    let mut client = crate::kafka_client::client_config(config, None, crate::kafka_client::ClientKind::Producer)?;
    client
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("client.id", format!("idem-outbox-{producer}"))
        .set("message.timeout.ms", "30000")
        .set("linger.ms", "5");
    crate::kafka_client::create(
        &client,
        rdkafka::client::DefaultClientContext,
        &format!("the outbox relay of `{producer}`"),
    )
}

/// One producer's relay on this host.
pub struct Relay {
    pool: PgPool,
    pub producer: String,
    holder: String,
    kafka: FutureProducer,
    pub stats: Arc<RelayStats>,
    wake: Arc<Notify>,
    /// How long published rows are kept (`[outbox] retention`).
    retention: Duration,
    /// When the lease holder last deleted published rows past it.
    cleaned: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// When it last counted the pending rows (`RelayStats::pending`).
    counted: std::sync::Mutex<Option<tokio::time::Instant>>,
}

/// What a round did.
enum Round {
    /// Sent rows (each published or failed): more may wait.
    Sent,
    Idle,
    /// Another host holds the lease.
    NotHolder,
    /// The broker did not take some rows: they wait.
    Outage(String),
}

/// One row as the relay reads it.
#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    topic: String,
    key: String,
    value: String,
    headers: sqlx::types::Json<serde_json::Map<String, serde_json::Value>>,
}

impl Relay {
    /// `producer`'s relay, as `holder` (this host, unique among hosts).
    pub fn new(config: &Config, pool: PgPool, producer: &str, holder: &str, wake: Arc<Notify>) -> anyhow::Result<Self> {
        let kafka = kafka_producer(config, producer)?;
        Ok(Self {
            pool,
            producer: producer.to_owned(),
            holder: holder.to_owned(),
            kafka,
            stats: Arc::default(),
            wake,
            retention: config.outbox.retention.0,
            cleaned: std::sync::Mutex::new(None),
            counted: std::sync::Mutex::new(None),
        })
    }

    /// Publishes until `stop`, then gives the lease up.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut backoff = MIN_BACKOFF;
        while !*stop.borrow() {
            // How long until the next round, and whether a NOTIFY ends the
            // wait (not an outage's backoff: nothing spins on a dead broker).
            let (pause, wakes) = match self.round().await {
                Ok(Round::Sent) => {
                    backoff = MIN_BACKOFF;
                    continue;
                }
                Ok(Round::Idle) => {
                    backoff = MIN_BACKOFF;
                    (POLL, true)
                }
                Ok(Round::NotHolder) => (LEASE_RETRY, true),
                Ok(Round::Outage(why)) => {
                    tracing::warn!(producer = %self.producer, "outbox: {why}; the rows wait, retrying in {backoff:?}");
                    (next_backoff(&mut backoff), false)
                }
                Err(e) => {
                    tracing::warn!(producer = %self.producer, "outbox: the database failed ({e}); retrying in {backoff:?}");
                    (next_backoff(&mut backoff), false)
                }
            };
            tokio::select! {
                _ = stop.changed() => break,
                _ = self.wake.notified(), if wakes => tokio::time::sleep(MIN_ROUND).await,
                _ = tokio::time::sleep(pause) => {}
            }
        }
        // What committed before the stop goes out now, if it can quickly
        // (a drained host's last events); the rest is the next holder's.
        let deadline = tokio::time::Instant::now() + FINAL_ROUNDS;
        while self.stats.holding.load(Ordering::Relaxed) && tokio::time::Instant::now() < deadline {
            match tokio::time::timeout_at(deadline, self.round()).await {
                Ok(Ok(Round::Sent)) => {}
                _ => break,
            }
        }
        if self.stats.holding.load(Ordering::Relaxed) {
            lease::release(&self.pool, &self.producer, &self.holder).await;
        }
    }

    async fn round(&self) -> Result<Round, sqlx::Error> {
        let holding = lease::hold(&self.pool, &self.producer, &self.holder).await?;
        self.stats.holding.store(holding, Ordering::Relaxed);
        if !holding {
            return Ok(Round::NotHolder);
        }
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT id, topic, key, value::text AS value, headers FROM idem.outbox \
             WHERE producer = $1 AND published_at IS NULL AND failed_at IS NULL ORDER BY id LIMIT $2",
        )
        .bind(&self.producer)
        .bind(ROUND_ROWS)
        .fetch_all(&self.pool)
        .await?;
        if rows.is_empty() {
            self.count_pending().await?;
            self.clean().await?;
            return Ok(Round::Idle);
        }
        let (published, failed, outage) = self.send(&rows).await;
        crate::pipeline::outbox_published();
        if !published.is_empty() {
            sqlx::query("UPDATE idem.outbox SET published_at = now() WHERE id = ANY($1)")
                .bind(&published)
                .execute(&self.pool)
                .await?;
            self.stats.published.fetch_add(published.len() as u64, Ordering::Relaxed);
        }
        for (id, reason) in &failed {
            tracing::error!(producer = %self.producer, id, "outbox: the broker refused a row for good: {reason}");
            sqlx::query("UPDATE idem.outbox SET failed_at = now(), failure = $2 WHERE id = $1")
                .bind(id)
                .bind(reason)
                .execute(&self.pool)
                .await?;
        }
        self.stats.failed.fetch_add(failed.len() as u64, Ordering::Relaxed);
        // While rows flow, counted at most once a second (it reads every
        // pending row); an idle round counts each time.
        let counted = *self.counted.lock().unwrap_or_else(|e| e.into_inner());
        if counted.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
            self.count_pending().await?;
        }
        Ok(match outage {
            Some(why) => Round::Outage(why),
            None => Round::Sent,
        })
    }

    /// Produces `rows` in order and waits for every acknowledgement:
    /// the ids published, the ids refused for good with why, and an outage
    /// if one held any row back.
    async fn send(&self, rows: &[Row]) -> (Vec<i64>, Vec<(i64, String)>, Option<String>) {
        let mut deliveries = Vec::with_capacity(rows.len());
        for row in rows {
            let mut headers = OwnedHeaders::new();
            for (name, value) in row.headers.iter() {
                let value = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
                headers = headers.insert(Header { key: name, value: Some(value.as_bytes()) });
            }
            let record =
                FutureRecord::to(&row.topic).key(row.key.as_bytes()).payload(row.value.as_bytes()).headers(headers);
            deliveries.push(self.kafka.send_result(record).map_err(|(e, _)| e));
        }
        let (mut published, mut failed, mut outage) = (Vec::new(), Vec::new(), None);
        for (row, delivery) in rows.iter().zip(deliveries) {
            let result = match delivery {
                Ok(future) => match future.await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err((e, _))) => Err(e),
                    Err(_) => Err(rdkafka::error::KafkaError::Canceled),
                },
                Err(e) => Err(e),
            };
            match result {
                Ok(()) => published.push(row.id),
                Err(e) => match refusal::classify(&row.topic, &e) {
                    refusal::Refusal::Outage(_) => {
                        outage.get_or_insert_with(|| format!("the broker did not take a row for {}: {e}", row.topic));
                    }
                    refused => {
                        let scope = match refused {
                            refusal::Refusal::Topic(_) => " (the topic refuses every record)",
                            _ => "",
                        };
                        failed.push((row.id, format!("topic {}: {e}{scope}", row.topic)));
                    }
                },
            }
        }
        (published, failed, outage)
    }

    /// Deletes published rows older than the retention, at most once a
    /// minute, in chunks (the lease holder's work, like the publishing).
    async fn clean(&self) -> Result<(), sqlx::Error> {
        let now = tokio::time::Instant::now();
        {
            let mut cleaned = self.cleaned.lock().unwrap_or_else(|e| e.into_inner());
            if cleaned.is_some_and(|at| now.duration_since(at) < CLEAN_EVERY) {
                return Ok(());
            }
            *cleaned = Some(now);
        }
        loop {
            let deleted = sqlx::query(
                "DELETE FROM idem.outbox WHERE id IN (SELECT id FROM idem.outbox \
                 WHERE producer = $1 AND published_at < now() - make_interval(secs => $2) LIMIT 5000)",
            )
            .bind(&self.producer)
            .bind(self.retention.as_secs_f64())
            .execute(&self.pool)
            .await?
            .rows_affected();
            if deleted < 5_000 {
                return Ok(());
            }
        }
    }

    async fn count_pending(&self) -> Result<(), sqlx::Error> {
        *self.counted.lock().unwrap_or_else(|e| e.into_inner()) = Some(tokio::time::Instant::now());
        let (pending, oldest): (i64, f64) = sqlx::query_as(
            "SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at))::float8, 0) FROM idem.outbox \
             WHERE producer = $1 AND published_at IS NULL AND failed_at IS NULL",
        )
        .bind(&self.producer)
        .fetch_one(&self.pool)
        .await?;
        self.stats.pending.store(u64::try_from(pending).unwrap_or(0), Ordering::Relaxed);
        self.stats.oldest_ms.store((oldest * 1000.0) as u64, Ordering::Relaxed);
        Ok(())
    }
}
