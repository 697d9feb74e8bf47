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
//! - **One holder.** A round first takes the producer's lease (`lease`),
//!   or renews it if the last renewal is [`RENEW_EVERY`] old; without it
//!   the relay only waits and tries again.
//! - **Failures.** A row the broker refuses for good (too large, the topic
//!   gone or not authorised) is marked failed with the reason (`idem outbox`
//!   shows and re-drives it) and holds nothing else back. An outage leaves
//!   the rows where they are and holds back the topics it hit, backing off
//!   up to 5 s between tries, while the producer's other topics go on. A
//!   producer librdkafka calls broken for good (a fatal error of the
//!   idempotent producer) is made anew.
//! - **Waking.** A commit that wrote rows NOTIFYs `idem_outbox` with the
//!   producer's name; the relay wakes on it, at most once per
//!   [`MIN_ROUND`] (any role may NOTIFY: wake-ups are coalesced, never
//!   queued), and polls every [`POLL`] without one.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::holds::{Holds, MIN_BACKOFF, next_backoff};
use super::lease;
use super::send::{Row, Sent, kafka_client, relay_producer, send};
use crate::config::Config;
pub use crate::stats::RelayStats;

/// Rows read and sent per round.
const ROUND_ROWS: i64 = 1_000;
/// The longest wait between two rounds without a wake-up.
const POLL: Duration = Duration::from_secs(1);
/// The shortest time between two rounds woken by NOTIFY.
const MIN_ROUND: Duration = Duration::from_millis(10);
/// How long a stopping relay goes on publishing what is committed.
const FINAL_ROUNDS: Duration = Duration::from_millis(700);
/// How often the lease holder deletes published rows past the retention.
const CLEAN_EVERY: Duration = Duration::from_secs(60);
/// How long one round may spend looking subjects up in the registry.
const LOOKUP_BUDGET: Duration = Duration::from_secs(2);
/// How often a relay without the lease tries to take it.
const LEASE_RETRY: Duration = Duration::from_secs(2);
/// How often the holder renews its lease: rounds in between trust the last
/// renewal (a round trip fewer per round). A renewal, then a round that
/// waits out its lookups and its deliveries (`send`, resends included),
/// still ends inside the lease, with two seconds left for its statements.
/// A round that overran it anyway publishes rows another holder may
/// publish too: at least once, as after a crash.
const RENEW_EVERY: Duration = Duration::from_secs(1);
const _: () = assert!(
    RENEW_EVERY.as_millis() + LOOKUP_BUDGET.as_millis() + super::send::DELIVERY_TIMEOUT.as_millis() + 2_000
        <= lease::TTL.as_millis()
);

/// One producer's relay on this host.
pub struct Relay {
    pool: PgPool,
    pub producer: String,
    holder: String,
    /// Made when rows are to be sent ([`crate::kafka_client::OnDemand`]):
    /// a relay without the lease holds none after a minute.
    kafka: crate::kafka_client::OnDemand,
    pub stats: Arc<RelayStats>,
    wake: Arc<Notify>,
    /// How long published rows are kept (`[outbox] retention`).
    retention: Duration,
    /// When the published rows past it were last deleted.
    cleaned: Option<Instant>,
    /// When the pending rows were last counted (`RelayStats::pending`).
    counted: Option<Instant>,
    /// When this relay last took or renewed the lease, while it holds it.
    renewed: Option<Instant>,
    /// Topics an outage held rows of back, each waiting its backoff.
    held: Holds,
    /// The topics written in a registry format (`[[handler.emit]] format`).
    emitting: crate::formats::Emitting,
}

/// What a round did.
enum Round {
    /// Sent rows (each published, failed, or held back): more may wait.
    Sent,
    Idle,
    /// Another host holds the lease.
    NotHolder,
}

impl Relay {
    /// `producer`'s relay, as `holder` (this host, unique among hosts).
    pub fn new(config: &Config, pool: PgPool, producer: &str, holder: &str, wake: Arc<Notify>) -> anyhow::Result<Self> {
        Ok(Self {
            kafka: crate::kafka_client::OnDemand::new(
                kafka_client(config, producer)?,
                relay_producer(producer),
                crate::kafka_client::IDLE,
            )?,
            pool,
            producer: producer.to_owned(),
            holder: holder.to_owned(),
            stats: Arc::default(),
            wake,
            retention: config.outbox.retention.0,
            cleaned: None,
            counted: None,
            renewed: None,
            held: Holds::default(),
            emitting: emitting(config, producer)?,
        })
    }

    /// Publishes until `stop`, then gives the lease up.
    pub async fn serve(mut self, mut stop: watch::Receiver<bool>) {
        let mut backoff = MIN_BACKOFF;
        while !*stop.borrow() {
            // How long until the next round, and whether a NOTIFY ends the
            // wait early (only while idle: nothing spins on a dead broker or
            // a lease another host holds).
            let (pause, wakes) = match self.round().await {
                Ok(Round::Sent) => {
                    backoff = MIN_BACKOFF;
                    continue;
                }
                Ok(Round::Idle) => (self.held.next(Instant::now()).unwrap_or(POLL).min(POLL), true),
                Ok(Round::NotHolder) => (LEASE_RETRY, false),
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
        let deadline = Instant::now() + FINAL_ROUNDS;
        while self.stats.holding.load(Ordering::Relaxed) && Instant::now() < deadline {
            match tokio::time::timeout_at(deadline, self.round()).await {
                Ok(Ok(Round::Sent)) => {}
                _ => break,
            }
        }
        if self.stats.holding.load(Ordering::Relaxed) {
            lease::release(&self.pool, &self.producer, &self.holder).await;
        }
    }

    /// `rows` with their values in their topics' formats; the rows that do
    /// not fit (failed, with why); the topics whose subject the registry
    /// could not give now (their rows wait, as in a broker's outage).
    ///
    /// The registry lookups of one round share [`LOOKUP_BUDGET`], well
    /// inside the lease: a topic whose subject is not known by then waits
    /// for a later round, as in an outage.
    async fn encoded(&self, rows: Vec<Row>) -> (Vec<Row>, Vec<(i64, String)>, Vec<(String, String)>) {
        use crate::formats::NotWritten;
        let budget = tokio::time::Instant::now() + LOOKUP_BUDGET;
        let (mut out, mut refused) = (Vec::with_capacity(rows.len()), Vec::new());
        let mut waiting = Vec::<(String, String)>::new();
        for mut row in rows {
            if waiting.iter().any(|(topic, _)| *topic == row.topic) {
                continue;
            }
            let encoded = tokio::time::timeout_at(budget, self.emitting.encode(&row.topic, &row.value)).await;
            match encoded {
                Ok(Ok(encoded)) => {
                    row.encoded = encoded;
                    out.push(row);
                }
                Ok(Err(NotWritten::Refused(why))) => refused.push((row.id, why)),
                Ok(Err(NotWritten::Outage(outage))) => waiting.push((row.topic.clone(), outage.to_string())),
                Ok(Err(NotWritten::Unavailable(why))) => waiting.push((row.topic.clone(), why)),
                Err(_) => waiting.push((row.topic.clone(), "the schema registry is slow to answer".into())),
            }
        }
        (out, refused, waiting)
    }

    async fn round(&mut self) -> Result<Round, sqlx::Error> {
        if !self.hold().await? {
            return Ok(Round::NotHolder);
        }
        self.clean().await?;
        let now = Instant::now();
        let waiting = self.held.waiting(now);
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT id, topic, key, value::text AS value, headers FROM idem.outbox \
             WHERE producer = $1 AND published_at IS NULL AND failed_at IS NULL AND NOT (topic = ANY($3)) \
             ORDER BY id LIMIT $2",
        )
        .bind(&self.producer)
        .bind(ROUND_ROWS)
        .bind(&waiting)
        .fetch_all(&self.pool)
        .await?;
        if rows.is_empty() {
            self.held.forget_over(now);
            self.count_pending().await?;
            return Ok(Round::Idle);
        }
        let tried: HashSet<String> = rows.iter().map(|r| r.topic.clone()).collect();
        let (rows, misfits, waiting) = self.encoded(rows).await;
        let kafka = match self.kafka.get().await {
            Ok(kafka) => kafka,
            Err(e) => {
                // Made at start-up from the same properties: a file they
                // name that is gone since (a TLS certificate), say. The
                // rows wait, as in an outage.
                tracing::error!(producer = %self.producer, "outbox: {e:#}");
                return Ok(Round::Idle);
            }
        };
        let mut sent = send(&kafka, &rows).await;
        for (topic, why) in waiting {
            sent.outage.get_or_insert(why);
            sent.held.push(topic);
        }
        fault_after_publish();
        self.mark(&sent).await?;
        self.fail(&misfits, "an event does not fit its topic's schema").await?;
        self.hold_back(&tried, &sent, now);
        if sent.fatal {
            self.renew_producer(&kafka);
        }
        // While rows flow, counted at most once a second (it reads every
        // pending row); an idle round counts each time.
        if self.counted.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
            self.count_pending().await?;
        }
        // Rows went out: more may wait. Only held back: wait for them.
        let settled = !(sent.published.is_empty() && sent.failed.is_empty() && misfits.is_empty());
        Ok(if settled { Round::Sent } else { Round::Idle })
    }

    /// Takes or renews the lease ([`RENEW_EVERY`] at most while held);
    /// whether this relay holds it.
    async fn hold(&mut self) -> Result<bool, sqlx::Error> {
        if self.renewed.is_some_and(|at| at.elapsed() < RENEW_EVERY) {
            return Ok(true);
        }
        // The lease runs from the statement's start, not its answer.
        let asked = Instant::now();
        let holding = lease::hold(&self.pool, &self.producer, &self.holder).await?;
        self.renewed = holding.then_some(asked);
        self.stats.holding.store(holding, Ordering::Relaxed);
        Ok(holding)
    }

    /// Marks what the broker acknowledged, and what it refused for good.
    async fn mark(&self, sent: &Sent) -> Result<(), sqlx::Error> {
        if !sent.published.is_empty() {
            sqlx::query("UPDATE idem.outbox SET published_at = now() WHERE id = ANY($1)")
                .bind(&sent.published)
                .execute(&self.pool)
                .await?;
            self.stats.published.fetch_add(sent.published.len() as u64, Ordering::Relaxed);
        }
        self.fail(&sent.failed, "the broker refused a row for good").await
    }

    /// Fails `rows` for good, each with its reason, logged as `what`.
    async fn fail(&self, rows: &[(i64, String)], what: &str) -> Result<(), sqlx::Error> {
        for (id, reason) in rows {
            tracing::error!(producer = %self.producer, id, "outbox: {what}: {reason}");
            sqlx::query("UPDATE idem.outbox SET failed_at = now(), failure = $2 WHERE id = $1")
                .bind(id)
                .bind(reason)
                .execute(&self.pool)
                .await?;
        }
        self.stats.failed.fetch_add(rows.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Holds the topics an outage hit back (their rows wait, the producer's
    /// other topics go on), each with its own backoff ([`Holds::hold_back`]).
    fn hold_back(&mut self, tried: &HashSet<String>, sent: &Sent, read: Instant) {
        let held = if sent.outage.is_some() { &sent.held[..] } else { &[] };
        for (topic, wait) in self.held.hold_back(tried, held, read, Instant::now()) {
            let why = sent.outage.as_deref().unwrap_or_default();
            tracing::warn!(producer = %self.producer, topic, "outbox: {why}; its rows wait, retrying in {wait:?}");
        }
    }

    /// A fatal error of the idempotent producer ends it for good: the next
    /// round makes another.
    fn renew_producer(&mut self, failed: &crate::kafka_client::Shared) {
        if self.kafka.renew(failed) {
            tracing::error!(producer = %self.producer, "outbox: the Kafka producer failed for good; making another");
        }
    }

    /// Deletes published rows older than the retention, at most once a
    /// minute, in chunks (the lease holder's work, like the publishing).
    async fn clean(&mut self) -> Result<(), sqlx::Error> {
        if self.cleaned.is_some_and(|at| at.elapsed() < CLEAN_EVERY) {
            return Ok(());
        }
        self.cleaned = Some(Instant::now());
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

    async fn count_pending(&mut self) -> Result<(), sqlx::Error> {
        self.counted = Some(Instant::now());
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

/// The crash tests' fault point between the broker's acknowledgement and
/// the mark (`IDEM_TEST_OUTBOX_ABORT_AFTER_PUBLISH`; only with the
/// `test-hooks` feature, as the pipeline's in `pipeline/faults.rs`).
fn fault_after_publish() {
    #[cfg(feature = "test-hooks")]
    if crate::env::get("IDEM_TEST_OUTBOX_ABORT_AFTER_PUBLISH").is_some() {
        eprintln!("idem: IDEM_TEST_OUTBOX_ABORT_AFTER_PUBLISH: aborting between the acknowledgement and the mark");
        std::process::abort();
    }
}

/// The crash tests' host whose relays never start
/// (`IDEM_TEST_OUTBOX_NO_RELAY`; only with the `test-hooks` feature): what
/// its handlers commit stays unpublished until it dies, as a host that
/// dies right after a commit leaves it, without racing its own relay.
pub(super) fn fault_no_relay() -> bool {
    #[cfg(feature = "test-hooks")]
    if crate::env::get("IDEM_TEST_OUTBOX_NO_RELAY").is_some() {
        return true;
    }
    false
}

/// `producer`'s emit topics written in a registry format (a handler's own
/// `[[handler.emit]]`; another application's rows are written as they
/// are), with the config's registry.
fn emitting(config: &Config, producer: &str) -> anyhow::Result<crate::formats::Emitting> {
    let emits: Vec<&crate::config::HandlerEmit> =
        config.handlers.iter().filter(|h| h.name == producer).flat_map(|h| &h.emit).collect();
    let registry = match (&config.registry, emits.iter().any(|e| e.format.uses_registry())) {
        (Some(registry), true) => Some(std::sync::Arc::new(crate::formats::Registry::new(registry)?)),
        _ => None,
    };
    crate::formats::Emitting::new(emits, registry)
}
