//! The events file of `idem test`: JSON lines, each an event's payload as
//! a producer would publish it (with `eventId`, `eventType`, `occurredAt`),
//! or `base64:` and a record's bytes as they are on the topic (a registry
//! format's framed record, taken from the topic as it is).
//! A line starting with `#` is a comment; `# expect: invalid` (or
//! `failed`, `duplicate`, `processed`) says what the next event should
//! come to, so a sample of a bad event is a passing test, not a failure.

use std::path::Path;

use anyhow::{Context as _, bail};

use crate::validate::Record;

/// The largest events file read: a test's, not a topic's.
const MAX_FILE_BYTES: u64 = 64 << 20;

/// One line of the file as the record it becomes.
pub struct Line {
    pub number: usize,
    pub record: Record,
    /// The `eventId` the file gave, when it was replaced (see [`read`]).
    pub was: Option<String>,
    /// What the file says this event comes to (`# expect: …` before it).
    pub expect: Option<Outcome>,
    /// The line is a record's bytes as on the topic (`base64:…`), not JSON
    /// to encode: a registry format's framed record, say.
    pub raw: bool,
}

/// What one event came to under `idem test`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Processed,
    Duplicate,
    /// Refused before the handler ran (idem run would dead-letter it).
    Invalid,
    /// The handler failed (an error, a trap, a timeout).
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Processed => "processed",
            Self::Duplicate => "duplicate",
            Self::Invalid => "invalid",
            Self::Failed => "failed",
        }
    }

    fn named(word: &str) -> Option<Self> {
        [Self::Processed, Self::Duplicate, Self::Invalid, Self::Failed].into_iter().find(|o| o.as_str() == word)
    }
}

/// Each non-blank line of `path` as a record of `topic` (partition 0, the
/// line's number as its offset), or the first malformed line named.
///
/// A test file outlives the dedup retention, but an id older than it would
/// run without a dedup row (or be refused as stale): such an id is replaced
/// by a fresh UUID v7, the same one wherever it repeats in the file, so a
/// repeated event is still a duplicate.
pub fn read(path: &Path, topic: &str, retention: std::time::Duration) -> anyhow::Result<Vec<Line>> {
    let bytes = crate::files::read_bounded(path, MAX_FILE_BYTES)
        .with_context(|| format!("failed to read the events file {}", path.display()))?;
    let text = String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8 text", path.display()))?;
    let mut records = Vec::new();
    let mut fresh = std::collections::HashMap::new();
    let mut expect = None;
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            if let Some(word) = comment.trim().strip_prefix("expect:").map(str::trim) {
                let Some(outcome) = Outcome::named(word) else {
                    bail!(
                        "{} line {number}: `expect: {word}`: say processed, duplicate, invalid or failed",
                        path.display()
                    );
                };
                expect = Some(outcome);
            }
            continue;
        }
        let (payload, was, raw) = match line.strip_prefix("base64:") {
            Some(encoded) => {
                use base64::Engine as _;
                let payload = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).with_context(|| {
                    format!("{} line {number}: `base64:` is not followed by base64", path.display())
                })?;
                (payload, None, true)
            }
            None => {
                let (payload, was) = json_payload(line, path, number, retention, &mut fresh)?;
                (payload, was, false)
            }
        };
        let record = Record {
            topic: topic.to_owned(),
            partition: 0,
            offset: i64::try_from(number).unwrap_or(i64::MAX),
            key: None,
            payload: Some(payload),
            headers: Vec::new(),
            timestamp: None,
        };
        records.push(Line { number, record, was, expect: expect.take(), raw });
    }
    if records.is_empty() {
        bail!("{} holds no event (one JSON object per line)", path.display());
    }
    Ok(records)
}

/// A JSON line's payload, its `eventId` replaced by a fresh one (the same
/// wherever it repeats: `fresh`) when older than `retention`, and the id it had.
fn json_payload(
    line: &str,
    path: &Path,
    number: usize,
    retention: std::time::Duration,
    fresh: &mut std::collections::HashMap<String, String>,
) -> anyhow::Result<(Vec<u8>, Option<String>)> {
    let value = match serde_json::from_str::<serde_json::Value>(line) {
        Ok(value) if value.is_object() => value,
        Ok(_) => bail!("{} line {number}: not a JSON object (one event's payload per line)", path.display()),
        Err(e) => bail!("{} line {number}: not JSON: {e}", path.display()),
    };
    if let Some(id) = value["eventId"].as_str().map(str::to_owned)
        && is_older_than(&id, retention)
    {
        // In the text, as it is: the rest of the line stays byte for byte
        // (a reference to the same id elsewhere in it follows it).
        let new = fresh.entry(id.clone()).or_insert_with(|| uuid::Uuid::now_v7().to_string()).clone();
        return Ok((line.replace(&id, &new).into_bytes(), Some(id)));
    }
    Ok((line.as_bytes().to_vec(), None))
}

/// Whether `id` is a UUID v7 created longer than `retention` ago.
fn is_older_than(id: &str, retention: std::time::Duration) -> bool {
    let Ok(uuid) = uuid::Uuid::parse_str(id) else { return false };
    let Some((secs, _)) = uuid.get_timestamp().map(|t| t.to_unix()) else { return false };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    uuid.get_version_num() == 7 && now.as_secs().saturating_sub(secs) > retention.as_secs()
}
