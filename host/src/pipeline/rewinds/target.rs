//! Where a rewind sends a handler's partitions: the earliest record kept,
//! an offset, or the first record at or after a time; resolved, for each
//! partition, against the topic and the group's committed offset.

use std::fmt;
use std::time::Duration;

use anyhow::Context as _;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::{Offset, TopicPartitionList};

use crate::kafka_client::ProbeContext;

/// Where a rewind sends each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The earliest record the topic keeps.
    Earliest,
    /// This offset.
    Offset(i64),
    /// The first record whose timestamp is at or after this time.
    Time(chrono::DateTime<chrono::Utc>),
}

impl Target {
    /// `earliest`, an offset (`40`) or an RFC 3339 time
    /// (`2026-12-04T09:00:00Z`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text == "earliest" {
            return Ok(Self::Earliest);
        }
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            return text.parse().map(Self::Offset).map_err(|_| format!("offset {text} is out of range"));
        }
        chrono::DateTime::parse_from_rfc3339(text).map(|t| Self::Time(t.to_utc())).map_err(|_| {
            format!("`{text}` is not a target: `earliest`, an offset (40) or an RFC 3339 time (2026-12-04T09:00:00Z)")
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Earliest => f.write_str("the earliest record kept"),
            Self::Offset(n) => write!(f, "offset {n}"),
            Self::Time(t) => write!(f, "the first record at or after {}", t.to_rfc3339()),
        }
    }
}

/// One partition's window: its records from `to` up to `end` (the group's
/// committed offset), which a rewind runs again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Window {
    pub partition: i32,
    pub to: i64,
    pub end: i64,
}

/// Why a rewind is refused as asked.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("{topic} has no partition {partition}")]
    NoPartition { topic: String, partition: i32 },
    #[error("offset {offset} is before the earliest record {topic}/{partition} keeps ({low})")]
    BeforeEarliest { topic: String, partition: i32, offset: i64, low: i64 },
    #[error(
        "offset {offset} is after the group's committed offset on {topic}/{partition} ({end}): a rewind goes back, \
         never forward (forward would skip records unprocessed)"
    )]
    Forward { topic: String, partition: i32, offset: i64, end: i64 },
    #[error("{0:#}")]
    Kafka(anyhow::Error),
}

/// How long one broker request may take.
const WAIT: Duration = Duration::from_secs(10);

/// Each partition's window (of `only`, or every partition of `topic`) for
/// `target`, as `client` (a group-less client with the group's id, which
/// reads the group's committed offsets without joining it) sees the topic
/// now. A partition whose window is empty is left out.
pub fn resolve(
    client: &BaseConsumer<ProbeContext>,
    topic: &str,
    only: Option<i32>,
    target: Target,
) -> Result<Vec<Window>, Refused> {
    let partitions = partitions(client, topic).map_err(Refused::Kafka)?;
    let chosen: Vec<i32> = match only {
        Some(p) if !partitions.contains(&p) => return Err(Refused::NoPartition { topic: topic.into(), partition: p }),
        Some(p) => vec![p],
        None => partitions,
    };
    let committed = committed(client, topic, &chosen).map_err(Refused::Kafka)?;
    let by_time = match target {
        Target::Time(t) => Some(offsets_for_time(client, topic, &chosen, t).map_err(Refused::Kafka)?),
        _ => None,
    };
    let mut windows = Vec::new();
    for (i, &partition) in chosen.iter().enumerate() {
        let (low, high) = client
            .fetch_watermarks(topic, partition, WAIT)
            .with_context(|| format!("failed to read the offsets of {topic}/{partition}"))
            .map_err(Refused::Kafka)?;
        // No committed offset: the group consumed nothing there to rewind.
        let Some(end) = committed[i] else { continue };
        let to = match target {
            Target::Earliest => low,
            Target::Offset(offset) if offset < low => {
                return Err(Refused::BeforeEarliest { topic: topic.into(), partition, offset, low });
            }
            Target::Offset(offset) if offset > end => {
                return Err(Refused::Forward { topic: topic.into(), partition, offset, end });
            }
            Target::Offset(offset) => offset,
            // No record at or after the time: the window is empty.
            Target::Time(_) => by_time.as_ref().and_then(|found| found[i]).unwrap_or(high).min(end),
        };
        if to < end {
            windows.push(Window { partition, to, end });
        }
    }
    Ok(windows)
}

fn partitions(client: &BaseConsumer<ProbeContext>, topic: &str) -> anyhow::Result<Vec<i32>> {
    let metadata = client.fetch_metadata(Some(topic), WAIT).with_context(|| format!("failed to look up {topic}"))?;
    let found = metadata.topics().first().filter(|t| t.error().is_none());
    let found = found.with_context(|| format!("{topic} is not in the brokers' metadata"))?;
    Ok(found.partitions().iter().map(|p| p.id()).collect())
}

/// The group's committed offset of each partition (`None`: none).
fn committed(client: &BaseConsumer<ProbeContext>, topic: &str, partitions: &[i32]) -> anyhow::Result<Vec<Option<i64>>> {
    let mut tpl = TopicPartitionList::new();
    for &p in partitions {
        tpl.add_partition(topic, p);
    }
    let found = client.committed_offsets(tpl, WAIT).context("failed to read the group's committed offsets")?;
    Ok(offsets_of(&found, topic, partitions))
}

/// Each partition's offset in `found` (`None`: no offset there).
fn offsets_of(found: &TopicPartitionList, topic: &str, partitions: &[i32]) -> Vec<Option<i64>> {
    partitions
        .iter()
        .map(|&p| match found.find_partition(topic, p).map(|e| e.offset()) {
            Some(Offset::Offset(n)) => Some(n),
            _ => None,
        })
        .collect()
}

/// Each partition's first offset whose timestamp is at or after `at`
/// (`None`: no such record).
fn offsets_for_time(
    client: &BaseConsumer<ProbeContext>,
    topic: &str,
    partitions: &[i32],
    at: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<Vec<Option<i64>>> {
    // Before the epoch no record was written: the earliest is the first.
    let at = at.timestamp_millis().max(0);
    let mut tpl = TopicPartitionList::new();
    for &p in partitions {
        tpl.add_partition_offset(topic, p, Offset::Offset(at))?;
    }
    let found =
        client.offsets_for_times(tpl, WAIT).with_context(|| format!("failed to look up {topic}'s offsets by time"))?;
    Ok(offsets_of(&found, topic, partitions))
}

#[cfg(test)]
mod tests {
    use super::Target;

    #[test]
    fn a_target_is_earliest_an_offset_or_a_time() {
        assert_eq!(Target::parse("earliest"), Ok(Target::Earliest));
        assert_eq!(Target::parse(" 40 "), Ok(Target::Offset(40)));
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-04T09:00:00+01:00").map(|t| t.to_utc());
        assert_eq!(Target::parse("2026-12-04T09:00:00+01:00").ok(), at.ok().map(Target::Time));
        assert_eq!(Target::parse("2026-12-04T08:00:00Z").map(|t| t.to_string()).as_deref(),
            Ok("the first record at or after 2026-12-04T08:00:00+00:00"));
        for bad in ["", "-1", "latest", "99999999999999999999", "2026-12-04"] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }
}
