//! `idem dlq list` and `idem dlq replay`: what a handler's dead-letter topic
//! holds, and re-running it through that handler only.
//!
//! Replay never writes into the source topic, which other consumer groups
//! (some without dedup) also read: this process reads the DLQ and runs each
//! record through the handler's own executor, claim and all. An event that
//! was processed meanwhile is a duplicate and skipped; one that fails again
//! goes back to the DLQ with `idem.replay.count` one higher (the older copy
//! stays: Kafka topics are append-only; the next replay runs only the
//! latest copy of each original record). An infrastructure failure stops the replay with
//! what it did so far. A record whose event is older than the handler's
//! dedup retention is left in the DLQ unless `--force`: its dedup row may be
//! gone, so "not a duplicate" would not mean "not processed".

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::{Headers as _, Message as _, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

use super::dlq::{DeadLetters, Failure, headers};
use crate::config::{Config, HandlerConfig};
use crate::error::ErrorClass;
use crate::executor::Outcome;
use crate::startup::PreparedHandler;
use crate::validate::Record;

/// Header counting how often a record was replayed and failed again.
pub const REPLAY_COUNT: &str = "idem.replay.count";

/// Which DLQ records a command looks at.
#[derive(Debug, Clone, Default)]
pub struct Window {
    /// Failed at or after this time.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Failed before this time.
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    pub limit: Option<usize>,
}

/// What `idem dlq list` prints.
#[derive(Debug, Serialize)]
pub struct Listing {
    pub topic: String,
    pub records: usize,
    /// Records per `class: reason` (reasons cut at 120 characters).
    pub by_reason: BTreeMap<String, usize>,
    pub oldest: Option<String>,
    pub newest: Option<String>,
}

/// What `idem dlq replay` did.
#[derive(Debug, Default, Serialize)]
pub struct ReplayReport {
    pub read: usize,
    pub applied: usize,
    pub duplicates: usize,
    pub failed_again: usize,
    /// Records left alone: another handler's, or without idem's headers.
    pub foreign: usize,
    /// Older copies of a record that failed again in an earlier replay:
    /// only the latest copy runs.
    pub superseded: usize,
    /// Records left alone because their event is older than the handler's
    /// dedup_retention (its dedup row may be gone): `--force` runs them.
    pub stale: usize,
    /// `--dry-run`: nothing executed; `applied` counts the records that
    /// would be, `duplicates` those already processed.
    pub dry_run: bool,
}

/// A header's value as text (the first header of that name).
pub fn header(message: &OwnedMessage, name: &str) -> Option<String> {
    let hs = message.headers()?;
    hs.iter().find(|h| h.key == name).and_then(|h| h.value).map(|v| String::from_utf8_lossy(v).into_owned())
}

fn failed_at(message: &OwnedMessage) -> Option<chrono::DateTime<chrono::Utc>> {
    header(message, headers::FAILED_AT)
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok())
        .map(|t| t.with_timezone(&chrono::Utc))
}

/// The handler's DLQ records inside `window`, oldest offset first per partition.
pub fn read(config: &Config, handler: &HandlerConfig, window: &Window) -> anyhow::Result<Vec<OwnedMessage>> {
    let topic = handler.dlq_topic();
    let topic = topic.as_str();
    let mut client =
        crate::kafka_client::client_config(config, Some(handler), crate::kafka_client::ClientKind::Consumer)?;
    client.set("group.id", format!("idem-dlq-reader-{}", uuid::Uuid::now_v7())).set("enable.auto.commit", "false");
    let consumer: BaseConsumer<crate::kafka_client::ProbeContext> =
        crate::kafka_client::create(&client, Default::default(), "a DLQ reader")?;
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .with_context(|| format!("failed to look up the DLQ topic {topic}"))?;
    let Some(t) = metadata.topics().first().filter(|t| t.error().is_none()) else {
        bail!("the DLQ topic {topic} does not exist");
    };
    let mut out = Vec::new();
    for p in t.partitions() {
        let (low, high) = consumer.fetch_watermarks(topic, p.id(), Duration::from_secs(10))?;
        if high <= low {
            continue;
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, p.id(), Offset::Offset(low))?;
        consumer.assign(&tpl)?;
        let mut next = low;
        // Stuck means no record for a minute, however long the partition.
        let mut deadline = std::time::Instant::now() + Duration::from_secs(60);
        while next < high {
            if std::time::Instant::now() > deadline {
                bail!("reading {topic}/{}: stuck at offset {next} of {high}", p.id());
            }
            let Some(message) = consumer.poll(Duration::from_millis(200)) else { continue };
            let message = message.with_context(|| format!("failed to read {topic}"))?.detach();
            next = message.offset() + 1;
            deadline = std::time::Instant::now() + Duration::from_secs(60);
            let at = failed_at(&message);
            let inside = window.since.is_none_or(|s| at.is_some_and(|a| a >= s))
                && window.until.is_none_or(|u| at.is_some_and(|a| a < u));
            if inside {
                out.push(message);
                // `--limit`: no need to read (and hold) more than that.
                if window.limit.is_some_and(|limit| out.len() >= limit) {
                    return Ok(out);
                }
            }
        }
    }
    Ok(out)
}

/// `idem dlq list`.
pub fn list(config: &Config, handler: &HandlerConfig, window: &Window) -> anyhow::Result<Listing> {
    let records = read(config, handler, window)?;
    let mut by_reason = BTreeMap::new();
    for m in &records {
        let class = header(m, headers::CLASS).unwrap_or_else(|| "unknown".into());
        let reason: String = header(m, headers::REASON).unwrap_or_default().chars().take(120).collect();
        *by_reason.entry(format!("{class}: {reason}")).or_insert(0) += 1;
    }
    let times: Vec<_> = records.iter().filter_map(failed_at).collect();
    let show = |t: Option<&chrono::DateTime<chrono::Utc>>| t.map(|t| t.to_rfc3339());
    Ok(Listing {
        topic: handler.dlq_topic(),
        records: records.len(),
        by_reason,
        oldest: show(times.iter().min()),
        newest: show(times.iter().max()),
    })
}

/// The record as it was on the source topic: original position, key,
/// value and headers (idem's own headers removed, the source's names
/// unescaped).
fn original(message: &OwnedMessage) -> anyhow::Result<Record> {
    let field = |name: &str| header(message, name).with_context(|| format!("DLQ record without header {name}"));
    let added = [
        headers::CLASS,
        headers::REASON,
        headers::ATTEMPTS,
        headers::FAILED_AT,
        headers::TOPIC,
        headers::PARTITION,
        headers::OFFSET,
        headers::TIMESTAMP,
        headers::HANDLER,
        headers::MODULE,
        headers::GROUP,
        REPLAY_COUNT,
    ];
    let kept = message
        .headers()
        .map(|hs| {
            hs.iter()
                .filter(|h| !added.contains(&h.key))
                .map(|h| (super::dlq::unescaped(h.key).to_owned(), h.value.map(<[u8]>::to_vec)))
                .collect()
        })
        .unwrap_or_default();
    Ok(Record {
        topic: field(headers::TOPIC)?,
        partition: field(headers::PARTITION)?.parse().context("bad idem.original.partition")?,
        offset: field(headers::OFFSET)?.parse().context("bad idem.original.offset")?,
        key: message.key().map(<[u8]>::to_vec),
        payload: message.payload().map(<[u8]>::to_vec),
        headers: kept,
        timestamp: header(message, headers::TIMESTAMP).and_then(|t| t.parse().ok()),
    })
}

/// `idem dlq replay`: runs every record of `window` through `handler`.
pub async fn replay(
    config: &Config,
    handler: &PreparedHandler,
    idem_pool: &sqlx::PgPool,
    window: &Window,
    dry_run: bool,
    force: bool,
) -> anyhow::Result<ReplayReport> {
    let h = &handler.config;
    let records = read(config, h, window)?;
    // The retention the database recorded for this handler, on its clock:
    // the one the claim's stale-event guard applies.
    let oldest_ms: i64 =
        sqlx::query_scalar("SELECT floor(extract(epoch FROM now() - idem.retention_of($1)) * 1000)::bigint")
            .bind(&h.name)
            .fetch_one(idem_pool)
            .await
            .context("failed to read the handler's dedup retention")?;
    let mut report = ReplayReport { read: records.len(), dry_run, ..ReplayReport::default() };
    let module = handler.slot.executor().handler().sha256().to_owned();
    let dead_letters = match (&handler.dead_letters, dry_run) {
        (Some(d), _) => Some(d),
        (None, true) => None,
        (None, false) => bail!("handler `{}` has on_failure = \"block\": it has no DLQ to replay into", h.name),
    };
    // A record that failed again in an earlier replay is in the DLQ twice
    // (or more): only its latest copy runs, so copies never multiply.
    let mut latest: std::collections::HashMap<(String, String, String), (u32, usize)> = Default::default();
    for (i, m) in records.iter().enumerate() {
        let position = (
            header(m, headers::TOPIC).unwrap_or_default(),
            header(m, headers::PARTITION).unwrap_or_default(),
            header(m, headers::OFFSET).unwrap_or_default(),
        );
        let replays: u32 = header(m, REPLAY_COUNT).and_then(|c| c.parse().ok()).unwrap_or(0);
        let best = latest.entry(position).or_insert((replays, i));
        if replays >= best.0 {
            *best = (replays, i);
        }
    }
    let chosen: std::collections::HashSet<usize> = latest.values().map(|(_, i)| *i).collect();
    for (i, message) in records.iter().enumerate() {
        if !chosen.contains(&i) {
            report.superseded += 1;
            continue;
        }
        // Only this handler's own dead letters; a record that is not one
        // (another handler's, or malformed) is counted and left alone.
        let record = match original(message) {
            Ok(record) if header(message, headers::HANDLER).as_deref() == Some(h.name.as_str()) => record,
            Ok(_) | Err(_) => {
                report.foreign += 1;
                continue;
            }
        };
        let replays: u32 = header(message, REPLAY_COUNT).and_then(|c| c.parse().ok()).unwrap_or(0);
        let event = match handler.validator.validate(&record) {
            Ok(event) => event,
            Err(invalid) => {
                let failure = Failure { class: ErrorClass::Invalid, reason: invalid.to_string(), attempts: 0 };
                again(dead_letters, &module, &record, &failure, replays, dry_run, &mut report).await?;
                continue;
            }
        };
        let created_ms = event.created_at().map_or(i64::MIN, |t| t.timestamp_millis());
        if created_ms < oldest_ms && !force {
            report.stale += 1;
            continue;
        }
        if dry_run {
            let done: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM idem.processed_event WHERE event_id = $1 AND consumer = $2)",
            )
            .bind(event.id)
            .bind(&h.name)
            .fetch_one(idem_pool)
            .await
            .context("failed to look up processed events")?;
            if done {
                report.duplicates += 1
            } else {
                report.applied += 1
            }
            continue;
        }
        let executor = if force { handler.slot.executor().forcing_stale() } else { handler.slot.executor() };
        match executor.execute(&event, 1).await {
            Ok(Outcome::Processed) => report.applied += 1,
            Ok(Outcome::Duplicate) => report.duplicates += 1,
            Ok(Outcome::Skipped) => report.stale += 1,
            Err(e) if matches!(e.class(), ErrorClass::Unavailable | ErrorClass::Fatal) => {
                bail!("replay stopped after {report:?}: {e}");
            }
            Err(e) => {
                let failure = Failure { class: e.class(), reason: e.to_string(), attempts: 1 };
                again(dead_letters, &module, &record, &failure, replays, dry_run, &mut report).await?;
            }
        }
    }
    Ok(report)
}

/// A record that failed again goes back to the DLQ, its replay count one up.
async fn again(
    dead_letters: Option<&DeadLetters>,
    module: &str,
    record: &Record,
    failure: &Failure,
    replays: u32,
    dry_run: bool,
    report: &mut ReplayReport,
) -> anyhow::Result<()> {
    report.failed_again += 1;
    if dry_run {
        return Ok(());
    }
    let Some(dead_letters) = dead_letters else { return Ok(()) };
    let mut record = record.clone();
    record.headers.push((REPLAY_COUNT.to_owned(), Some((replays + 1).to_string().into_bytes())));
    dead_letters.send(&record, failure, module).await.map_err(|e| anyhow::anyhow!("{e}"))
}
