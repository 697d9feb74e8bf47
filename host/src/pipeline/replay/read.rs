//! Reading a handler's dead-letter topic: its records inside a window, what
//! each one's seal says, and `idem dlq list`.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::{Headers as _, Message as _, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

use super::Window;
use crate::config::{Config, HandlerConfig};
use crate::pipeline::dlq::headers;
use crate::pipeline::dlq::seal::{Authenticity, Keys};

/// What `idem dlq list` prints.
#[derive(Debug, Serialize)]
pub struct Listing {
    pub topic: String,
    pub records: usize,
    /// Sealed records per `class: reason pattern` (`dlq::index::pattern`:
    /// numbers, ids and quoted values masked; cut at 120 characters).
    pub by_reason: BTreeMap<String, usize>,
    /// Of them, envelopes: records the topic refused as they were.
    pub envelopes: usize,
    /// Records whose seal is missing or does not verify: not idem's, or
    /// written before seals; their headers are not shown (anyone who can
    /// produce to the topic could have written them).
    pub unauthenticated: usize,
    pub oldest: Option<String>,
    pub newest: Option<String>,
}

/// A header's value as text (the first header of that name).
pub fn header(message: &OwnedMessage, name: &str) -> Option<String> {
    let hs = message.headers()?;
    hs.iter().find(|h| h.key == name).and_then(|h| h.value).map(|v| String::from_utf8_lossy(v).into_owned())
}

/// What the record's seal says.
pub fn authenticity(keys: &Keys, message: &OwnedMessage) -> Authenticity {
    let all: Vec<(&str, Option<&[u8]>)> =
        message.headers().map(|hs| hs.iter().map(|h| (h.key, h.value)).collect()).unwrap_or_default();
    keys.verify(message.key(), message.payload(), &all)
}

pub(super) fn failed_at(message: &OwnedMessage) -> Option<chrono::DateTime<chrono::Utc>> {
    header(message, headers::FAILED_AT)
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok())
        .map(|t| t.with_timezone(&chrono::Utc))
}

/// A DLQ consumer of bounded appetite ([`small_reader`]) that reads every
/// record, not only those up to the last stable offset: a producer holding
/// a transaction open on the DLQ topic must not stall a reader or hide
/// what idem wrote after it (idem writes no transactions there; the seal
/// decides what is trusted).
pub(super) fn small_consumer(
    config: &Config,
    handler: &HandlerConfig,
) -> anyhow::Result<BaseConsumer<crate::kafka_client::ProbeContext>> {
    small_reader(config, handler, "read_uncommitted", "a DLQ reader")
}

/// A group-less reader of bounded appetite: it fetches and queues a few
/// MiB, not librdkafka's 64 MiB, and says when it reached a partition's
/// end. `isolation` is its `isolation.level`; `what` names it in errors.
pub(crate) fn small_reader(
    config: &Config,
    handler: &HandlerConfig,
    isolation: &str,
    what: &str,
) -> anyhow::Result<BaseConsumer<crate::kafka_client::ProbeContext>> {
    let client =
        crate::kafka_client::client_config(config, Some(handler), crate::kafka_client::ClientKind::Consumer)?;
    small_reader_with(client, isolation, what)
}

/// [`small_reader`] from a group-less client's properties already made.
pub(crate) fn small_reader_with(
    mut client: rdkafka::ClientConfig,
    isolation: &str,
    what: &str,
) -> anyhow::Result<BaseConsumer<crate::kafka_client::ProbeContext>> {
    client
        .set("group.id", format!("idem-reader-{}", uuid::Uuid::now_v7()))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        // An offset retention deleted is read from the earliest kept, not
        // skipped to the end.
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", isolation)
        .set("queued.max.messages.kbytes", "4096")
        .set("fetch.max.bytes", "4194304")
        .set("max.partition.fetch.bytes", "1048576");
    crate::kafka_client::create(&client, Default::default(), what)
}

/// What one poll of a DLQ reader brought.
pub(super) enum Polled {
    Record(OwnedMessage),
    /// Nothing within the poll's wait.
    Nothing,
    /// The assigned partition's end: below its high watermark when
    /// transaction markers or aborted batches hold the last offsets.
    End,
}

/// Polls `consumer` once (200 ms at most).
pub(super) fn poll_one(
    consumer: &BaseConsumer<crate::kafka_client::ProbeContext>,
    topic: &str,
) -> anyhow::Result<Polled> {
    match consumer.poll(Duration::from_millis(200)) {
        None => Ok(Polled::Nothing),
        Some(Ok(message)) => Ok(Polled::Record(message.detach())),
        Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => Ok(Polled::End),
        Some(Err(e)) => Err(e).with_context(|| format!("failed to read {topic}")),
    }
}

/// The handler's DLQ records inside `window`, oldest offset first per partition.
pub fn read(config: &Config, handler: &HandlerConfig, window: &Window) -> anyhow::Result<Vec<OwnedMessage>> {
    read_sealed(config, handler, window, None)
}

/// [`read`]; with `sealed`, only the records whose seal verifies under
/// those keys are kept (and counted toward `window.limit`).
pub(crate) fn read_sealed(
    config: &Config,
    handler: &HandlerConfig,
    window: &Window,
    sealed: Option<&Keys>,
) -> anyhow::Result<Vec<OwnedMessage>> {
    let topic = handler.dlq_topic();
    let topic = topic.as_str();
    let consumer = small_consumer(config, handler)?;
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
            let message = match poll_one(&consumer, topic)? {
                Polled::Record(message) => message,
                Polled::Nothing => continue,
                Polled::End => break,
            };
            next = message.offset() + 1;
            deadline = std::time::Instant::now() + Duration::from_secs(60);
            if sealed.is_some_and(|keys| authenticity(keys, &message) != Authenticity::Sealed) {
                continue;
            }
            let at = failed_at(&message);
            let inside = window.since.is_none_or(|s| at.is_some_and(|a| a >= s))
                && window.until.is_none_or(|u| at.is_some_and(|a| a < u))
                && window.class.as_ref().is_none_or(|c| header(&message, headers::CLASS).as_ref() == Some(c));
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

/// The records of `handler`'s DLQ at `positions` (partition, offset), in
/// that order; a position past the partition's end or below its start
/// (deleted by retention) is an error naming it.
pub(crate) fn read_at(
    config: &Config,
    handler: &HandlerConfig,
    positions: &[(i32, i64)],
) -> anyhow::Result<Vec<OwnedMessage>> {
    let topic = handler.dlq_topic();
    let consumer = small_consumer(config, handler)?;
    let mut out = Vec::with_capacity(positions.len());
    for &(partition, offset) in positions {
        let (low, high) = consumer
            .fetch_watermarks(&topic, partition, Duration::from_secs(10))
            .with_context(|| format!("failed to look up {topic}/{partition}"))?;
        if offset < low || offset >= high {
            bail!(
                "{topic} has no record at partition {partition} offset {offset} (it holds offsets {low} to {})",
                high - 1
            );
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, partition, Offset::Offset(offset))?;
        consumer.assign(&tpl)?;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if std::time::Instant::now() > deadline {
                bail!("reading {topic}/{partition}: no record at offset {offset} within 30 s");
            }
            let message = match poll_one(&consumer, &topic)? {
                Polled::Record(message) => message,
                Polled::Nothing => continue,
                Polled::End => {
                    bail!("{topic} has no record at partition {partition} offset {offset} (a transaction marker)")
                }
            };
            if message.offset() == offset {
                out.push(message);
                break;
            }
            if message.offset() > offset {
                bail!("{topic} has no record at partition {partition} offset {offset} (compacted away)");
            }
        }
    }
    Ok(out)
}

/// `idem dlq list`.
pub fn list(config: &Config, handler: &HandlerConfig, window: &Window) -> anyhow::Result<Listing> {
    let keys = Keys::load(&config.dlq)?;
    let records = read(config, handler, window)?;
    let (mut by_reason, mut envelopes, mut unauthenticated) = (BTreeMap::new(), 0, 0);
    let mut times = Vec::new();
    for m in &records {
        if authenticity(&keys, m) != Authenticity::Sealed {
            unauthenticated += 1;
            continue;
        }
        envelopes += usize::from(header(m, headers::ENVELOPE).is_some());
        let class = header(m, headers::CLASS).unwrap_or_else(|| "unknown".into());
        // By pattern: 10,000 records failing for one cause, with 10,000
        // different ids in their reasons, are one line.
        let reason = crate::pipeline::dlq::index::pattern(&header(m, headers::REASON).unwrap_or_default());
        *by_reason.entry(format!("{class}: {}", crate::text::shown(&reason, 120))).or_insert(0) += 1;
        times.extend(failed_at(m));
    }
    let show = |t: Option<&chrono::DateTime<chrono::Utc>>| t.map(|t| t.to_rfc3339());
    Ok(Listing {
        topic: handler.dlq_topic(),
        records: records.len(),
        by_reason,
        envelopes,
        unauthenticated,
        oldest: show(times.iter().min()),
        newest: show(times.iter().max()),
    })
}
