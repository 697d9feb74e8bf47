//! A page of a handler's dead-letter topic for the console: the newest
//! records first, each described for a person (failure, original position,
//! headers, the payload pretty-printed), read with bounded work.
//!
//! A page reads at most [`SCAN`] records, spread over the partitions, from
//! the end of each (or from where the previous page stopped) backwards in
//! steps; whatever matches the filters is shown, newest failure first. A
//! page never holds more than [`PAYLOAD_SHOWN`] bytes of any record, so its
//! memory is bounded whatever producers wrote to the topic.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::{Headers as _, Message as _, OwnedMessage};
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use super::read::{Polled, authenticity, failed_at, header, poll_one, small_consumer};
use crate::config::{Config, HandlerConfig};
use crate::pipeline::dlq::headers;
use crate::pipeline::dlq::seal::{Authenticity, Keys};

/// Records one page reads at most, over all partitions.
pub const SCAN: i64 = 1000;
/// Records one page shows at most.
pub const MAX_SHOWN: usize = 100;
/// Bytes of a payload shown (the rest is counted, not held).
const PAYLOAD_SHOWN: usize = 16 * 1024;
/// Source headers shown per record, and characters of each value (a
/// control character shows as an escape of up to 8 bytes).
const HEADERS_SHOWN: usize = 16;
const HEADER_SHOWN: usize = 256;

/// What page to read.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PageQuery {
    /// Per partition, read only offsets below this (the previous page's
    /// `older`); absent: from the end.
    #[serde(default)]
    pub before: BTreeMap<i32, i64>,
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// Only this failure class.
    pub class: Option<String>,
    /// Records shown (at most [`MAX_SHOWN`]).
    pub limit: Option<usize>,
}

/// One page.
#[derive(Debug, Serialize)]
pub struct Page {
    pub topic: String,
    pub records: Vec<DeadLetterView>,
    /// Records read to make it (matching or not).
    pub scanned: usize,
    /// Where the next, older page starts (`before`); `None`: nothing older.
    pub older: Option<BTreeMap<i32, i64>>,
    /// Why the page is empty when that is not the filters' doing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Page {
    /// A page of a DLQ topic that holds nothing, saying why.
    pub fn empty(topic: String, note: String) -> Self {
        Self { topic, records: Vec::new(), scanned: 0, older: None, note: Some(note) }
    }
}

/// One DLQ record as the console shows it; all of it text the browser
/// renders as text.
#[derive(Debug, Serialize)]
pub struct DeadLetterView {
    /// Its position in the DLQ topic (what a replay selects).
    pub partition: i32,
    pub offset: i64,
    /// `sealed`, `unsealed` (written before seals, or not by idem) or
    /// `forged` (its seal does not verify). Only a sealed record's failure
    /// and origin are shown: anyone who can produce to the topic can write
    /// the others' headers.
    pub authenticity: &'static str,
    pub failed_at: Option<String>,
    pub class: Option<String>,
    pub reason: Option<String>,
    pub attempts: Option<String>,
    pub replays: u32,
    pub envelope: bool,
    pub original_topic: Option<String>,
    pub original_partition: Option<String>,
    pub original_offset: Option<String>,
    pub key: Option<String>,
    /// The source record's headers (idem's own left out).
    pub headers: Vec<(String, String)>,
    /// Pretty-printed when it is JSON, else the text with invalid UTF-8 replaced.
    pub payload: String,
    pub payload_bytes: usize,
    pub payload_cut: bool,
}

impl DeadLetterView {
    fn of(keys: &Keys, m: &OwnedMessage) -> Self {
        let authenticity = match authenticity(keys, m) {
            Authenticity::Sealed => "sealed",
            Authenticity::Unsealed => "unsealed",
            Authenticity::Forged => "forged",
        };
        let sealed = authenticity == "sealed";
        let idems = |name: &str| if sealed { header(m, name).map(|v| crate::text::shown(&v, 1000)) } else { None };
        let source_headers = m
            .headers()
            .map(|hs| {
                hs.iter()
                    .filter(|h| !headers::is_idems(h.key))
                    .take(HEADERS_SHOWN)
                    .map(|h| {
                        let value = h.value.map(String::from_utf8_lossy).unwrap_or_default();
                        (crate::text::shown(headers::unescaped(h.key), 200), crate::text::shown(&value, HEADER_SHOWN))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let payload = m.payload().unwrap_or_default();
        Self {
            partition: m.partition(),
            offset: m.offset(),
            authenticity,
            failed_at: if sealed { failed_at(m).map(|t| t.to_rfc3339()) } else { None },
            class: idems(headers::CLASS),
            reason: idems(headers::REASON),
            attempts: idems(headers::ATTEMPTS),
            replays: idems(headers::REPLAY_COUNT).and_then(|c| c.parse().ok()).unwrap_or(0),
            envelope: sealed && header(m, headers::ENVELOPE).is_some(),
            original_topic: idems(headers::TOPIC),
            original_partition: idems(headers::PARTITION),
            original_offset: idems(headers::OFFSET),
            key: m.key().map(|k| crate::text::shown(&String::from_utf8_lossy(k), 500)),
            headers: source_headers,
            payload: pretty(payload),
            payload_bytes: payload.len(),
            payload_cut: payload.len() > PAYLOAD_SHOWN,
        }
    }
}

/// JSON indented; anything else as text; at most [`PAYLOAD_SHOWN`] bytes of it.
fn pretty(payload: &[u8]) -> String {
    if payload.len() <= PAYLOAD_SHOWN
        && let Ok(value) = serde_json::from_slice::<serde_json::Value>(payload)
        && let Ok(text) = serde_json::to_string_pretty(&value)
        && text.len() <= PAYLOAD_SHOWN * 2
    {
        // Indenting deep JSON multiplies it (a space per level per line):
        // past twice the bytes shown, the text as it came.
        return text;
    }
    String::from_utf8_lossy(&payload[..payload.len().min(PAYLOAD_SHOWN)]).into_owned()
}

/// Reads one page of `handler`'s DLQ (blocking: run it off the runtime).
///
/// Each partition's matching records are a suffix of what was read of it
/// (its newest), merged over partitions newest failure first, so that
/// `older` can name, per partition, exactly where the next page goes on:
/// below the oldest record shown; past the newest one cut when none was
/// shown; below what was read when everything read was shown. A partition
/// missing from a continuation's `before` is finished.
pub fn read_page(config: &Config, handler: &HandlerConfig, keys: &Keys, query: &PageQuery) -> anyhow::Result<Page> {
    let topic = handler.dlq_topic();
    let consumer = small_consumer(config, handler)?;
    let metadata = consumer
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .with_context(|| format!("failed to look up the DLQ topic {topic}"))?;
    let Some(t) = metadata.topics().first().filter(|t| t.error().is_none()) else {
        let note = format!("{topic} does not exist yet: nothing was dead-lettered (idem creates it at the first)");
        return Ok(Page::empty(topic, note));
    };
    let limit = query.limit.unwrap_or(MAX_SHOWN).clamp(1, MAX_SHOWN);
    let per_partition = (SCAN / (t.partitions().len().max(1) as i64)).max(1);
    let continuing = !query.before.is_empty();
    let (mut lists, mut scanned, mut below, mut held) = (Vec::new(), 0, BTreeMap::new(), 0);
    for p in t.partitions() {
        let given = query.before.get(&p.id()).copied();
        if continuing && given.is_none() {
            continue;
        }
        let (low, high) = consumer.fetch_watermarks(&topic, p.id(), Duration::from_secs(10))?;
        held += high - low;
        let end = given.unwrap_or(high).min(high);
        let start = end.saturating_sub(per_partition).max(low);
        let (matches, read, dropped) = read_range(&consumer, &topic, p.id(), (start, end), keys, query, limit)?;
        scanned += read;
        // Where this partition goes on if all its matches kept are shown:
        // below the oldest kept when older matches were let go, else below
        // what was read (nothing: the partition is read to its start).
        let first_kept = matches.first().map(|v: &DeadLetterView| v.offset);
        below.insert(p.id(), if dropped { first_kept } else { (start > low).then_some(start) });
        lists.push((p.id(), matches));
    }
    if held == 0 {
        let note = format!("{topic} holds no record: nothing was dead-lettered (or retention removed it)");
        return Ok(Page::empty(topic, note));
    }
    let (shown, older) = merge(lists, &below, limit);
    Ok(Page { topic, records: shown, scanned, older: (!older.is_empty()).then_some(older), note: None })
}

/// The newest `limit` records over the partitions' lists (each newest
/// last), and where each partition's next page starts.
fn merge(
    mut lists: Vec<(i32, Vec<DeadLetterView>)>,
    below: &BTreeMap<i32, Option<i64>>,
    limit: usize,
) -> (Vec<DeadLetterView>, BTreeMap<i32, i64>) {
    let mut shown = Vec::new();
    while shown.len() < limit {
        let newest = lists
            .iter()
            .enumerate()
            .filter_map(|(i, (_, l))| l.last().map(|v| (i, v.failed_at.clone(), v.offset)))
            .max_by(|a, b| a.1.cmp(&b.1).then(a.2.cmp(&b.2)));
        let Some((i, _, _)) = newest else { break };
        shown.extend(lists[i].1.pop());
    }
    let mut older = BTreeMap::new();
    for (partition, rest) in lists {
        let lowest_shown = shown.iter().filter(|v| v.partition == partition).map(|v| v.offset).min();
        let next = match (rest.last(), lowest_shown) {
            (Some(_), Some(lowest)) => Some(lowest),
            (Some(cut), None) => Some(cut.offset + 1),
            (None, _) => below.get(&partition).copied().flatten(),
        };
        older.extend(next.map(|n| (partition, n)));
    }
    (shown, older)
}

/// The records of `topic`/`partition` in `range` (start, end) that match
/// `query`, the newest `keep` of them (oldest first), how many were read,
/// and whether older matches were let go.
fn read_range(
    consumer: &BaseConsumer<crate::kafka_client::ProbeContext>,
    topic: &str,
    partition: i32,
    (start, end): (i64, i64),
    keys: &Keys,
    query: &PageQuery,
    keep: usize,
) -> anyhow::Result<(Vec<DeadLetterView>, usize, bool)> {
    let (mut out, mut read, mut dropped) = (std::collections::VecDeque::new(), 0, false);
    if start >= end {
        return Ok((Vec::new(), 0, false));
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(start))?;
    consumer.assign(&tpl)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut next = start;
    while next < end {
        if std::time::Instant::now() > deadline {
            bail!("reading {topic}/{partition}: no record at offset {next} within 30 s");
        }
        let message = match poll_one(consumer, topic)? {
            Polled::Record(message) => message,
            Polled::Nothing => continue,
            // What was read is the page.
            Polled::End => break,
        };
        next = message.offset() + 1;
        if message.offset() >= end {
            break;
        }
        read += 1;
        let sealed = authenticity(keys, &message) == Authenticity::Sealed;
        if matches(&message, sealed, query) {
            out.push_back(DeadLetterView::of(keys, &message));
            if out.len() > keep {
                out.pop_front();
                dropped = true;
            }
        }
    }
    Ok((out.into(), read, dropped))
}

/// Whether a record passes the page's filters (on what it was checked, so
/// that no view is made of a record not shown). An unsealed record has no
/// trusted failure time or class: a time or class filter leaves it out.
fn matches(message: &OwnedMessage, sealed: bool, query: &PageQuery) -> bool {
    let at = if sealed { failed_at(message) } else { None };
    let class = if sealed { header(message, headers::CLASS) } else { None };
    query.since.is_none_or(|s| at.is_some_and(|a| a >= s))
        && query.until.is_none_or(|u| at.is_some_and(|a| a < u))
        && query.class.as_ref().is_none_or(|c| class.as_ref() == Some(c))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{DeadLetterView, merge, pretty};

    fn view(partition: i32, offset: i64, second: u32) -> DeadLetterView {
        DeadLetterView {
            partition,
            offset,
            authenticity: "sealed",
            failed_at: Some(format!("2026-12-02T10:00:{second:02}+00:00")),
            class: None,
            reason: None,
            attempts: None,
            replays: 0,
            envelope: false,
            original_topic: None,
            original_partition: None,
            original_offset: None,
            key: None,
            headers: Vec::new(),
            payload: String::new(),
            payload_bytes: 0,
            payload_cut: false,
        }
    }

    /// Pages over two partitions, each newest failure first: every record
    /// is shown once, whichever partition's failures are newer.
    #[test]
    fn pages_show_every_record_once() {
        // p0's 6 records failed after all of p1's 4; pages of 3.
        let p0: Vec<_> = (0..6).map(|o| view(0, o, 30 + o as u32)).collect();
        let p1: Vec<_> = (0..4).map(|o| view(1, o, o as u32)).collect();
        let all = [p0, p1];
        let mut before: BTreeMap<i32, i64> = BTreeMap::new();
        let mut seen = Vec::new();
        for _ in 0..10 {
            let continuing = !before.is_empty();
            let lists: Vec<(i32, Vec<DeadLetterView>)> = all
                .iter()
                .enumerate()
                .filter(|(p, _)| !continuing || before.contains_key(&(*p as i32)))
                .map(|(p, records)| {
                    let end = before.get(&(p as i32)).copied().unwrap_or(i64::MAX);
                    let copy = |v: &DeadLetterView| DeadLetterView {
                        failed_at: v.failed_at.clone(),
                        ..view(v.partition, v.offset, 0)
                    };
                    (p as i32, records.iter().filter(|v| v.offset < end).map(copy).collect())
                })
                .collect();
            // Everything below was read: nothing older on either partition.
            let below: BTreeMap<i32, Option<i64>> = lists.iter().map(|(p, _)| (*p, None)).collect();
            let (shown, older) = merge(lists, &below, 3);
            seen.extend(shown.iter().map(|v| (v.partition, v.offset)));
            if older.is_empty() {
                break;
            }
            before = older;
        }
        let mut expected: Vec<(i32, i64)> = (0..6).rev().map(|o| (0, o)).chain((0..4).rev().map(|o| (1, o))).collect();
        assert_eq!(seen, expected, "newest failure first, each once");
        expected.sort();
        seen.sort();
        assert_eq!(seen, expected);
    }

    #[test]
    fn payloads_are_indented_json_or_text_and_bounded() {
        assert_eq!(pretty(br#"{"a":"<script>x</script>"}"#), "{\n  \"a\": \"<script>x</script>\"\n}");
        assert_eq!(pretty(b"not json \xff"), "not json \u{fffd}");
        let big = vec![b'x'; super::PAYLOAD_SHOWN * 3];
        assert_eq!(pretty(&big).len(), super::PAYLOAD_SHOWN);
    }
}
