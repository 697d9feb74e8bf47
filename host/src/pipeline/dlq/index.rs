//! The dead-letter index (`idem.dead_letter`): a row per DLQ record, made
//! from exactly what was written to the topic (or, rebuilding, read from
//! it), so that dead letters are searched and counted in PostgreSQL.
//!
//! The host writes the row after the broker acknowledged the record; a
//! row that could not be written is logged and costs nothing else: the
//! record is in the topic, and `idem dlq reindex` finds it. Only a sealed
//! record's own headers (failure, origin, time) are indexed.

use sqlx::PgPool;
use uuid::Uuid;

use super::headers;
use super::seal::Authenticity;

/// Bytes of a JSON payload kept for searches by path.
const PAYLOAD_KEPT: usize = 64 * 1024;
/// Characters of a key, a reason and a pattern kept.
const KEY_KEPT: usize = 500;
const REASON_KEPT: usize = 2_000;
const PATTERN_KEPT: usize = 200;

/// Where a record sits in the DLQ topic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Position {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// One DLQ record as the index keeps it.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub at: Position,
    pub handler: String,
    pub authenticity: Authenticity,
    pub failed_at: chrono::DateTime<chrono::Utc>,
    pub class: Option<String>,
    pub reason: Option<String>,
    pub attempts: Option<i32>,
    pub replays: i32,
    pub envelope: bool,
    pub source: Option<(String, i32, i64)>,
    pub key: Option<String>,
    pub event_id: Option<Uuid>,
    pub header_names: Vec<String>,
    pub payload_bytes: i32,
    pub payload_sha256: Option<Vec<u8>>,
    pub payload: Option<serde_json::Value>,
}

/// A DLQ record's parts, as written or as read back.
pub(crate) struct Parts<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<(&'a str, Option<&'a [u8]>)>,
}

impl Entry {
    /// The entry of the record `parts` at `at`, of `handler`'s DLQ.
    pub(crate) fn of(at: Position, handler: &str, parts: &Parts<'_>, authenticity: Authenticity) -> Self {
        let sealed = authenticity == Authenticity::Sealed;
        let idems = |name: &str| -> Option<String> {
            let value = parts.headers.iter().find(|(k, _)| *k == name).and_then(|(_, v)| *v)?;
            sealed.then(|| text(&String::from_utf8_lossy(value)))
        };
        let failed_at = idems(headers::FAILED_AT)
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok())
            .map_or_else(chrono::Utc::now, |t| t.with_timezone(&chrono::Utc));
        let source = match (idems(headers::TOPIC), idems(headers::PARTITION), idems(headers::OFFSET)) {
            (Some(t), Some(p), Some(o)) => p.parse().ok().zip(o.parse().ok()).map(|(p, o)| (t, p, o)),
            _ => None,
        };
        let reason = idems(headers::REASON).map(|r| r.chars().take(REASON_KEPT).collect::<String>());
        let value = parts.value.unwrap_or_default();
        let mut json = serde_json::from_slice::<serde_json::Value>(value).ok().filter(serde_json::Value::is_object);
        if let Some(json) = &mut json {
            json_text(json);
        }
        let event_id = json.as_ref().and_then(|v| v["eventId"].as_str()).and_then(|id| Uuid::parse_str(id).ok());
        Self {
            at,
            handler: handler.to_owned(),
            authenticity,
            failed_at,
            class: idems(headers::CLASS),
            reason,
            attempts: idems(headers::ATTEMPTS).and_then(|a| a.parse().ok()),
            replays: idems(headers::REPLAY_COUNT).and_then(|r| r.parse().ok()).unwrap_or(0),
            envelope: idems(headers::ENVELOPE).is_some(),
            source,
            key: parts.key.map(|k| text(&String::from_utf8_lossy(k)).chars().take(KEY_KEPT).collect()),
            event_id,
            header_names: parts
                .headers
                .iter()
                .filter(|(k, _)| !headers::is_idems(k))
                .map(|(k, _)| text(headers::unescaped(k)))
                .collect(),
            payload_bytes: i32::try_from(value.len()).unwrap_or(i32::MAX),
            payload_sha256: parts.value.map(|v| <sha2::Sha256 as sha2::Digest>::digest(v).to_vec()),
            payload: json.filter(|_| value.len() <= PAYLOAD_KEPT),
        }
    }

    /// What the totals group this entry's reason under.
    pub(crate) fn pattern(&self) -> Option<String> {
        self.reason.as_deref().map(pattern)
    }
}

/// `s` as the index keeps text: PostgreSQL's `text` and `jsonb` hold no
/// NUL, and a record's key, headers, payload and a guest's reason may, so
/// each is written as `␀` (U+2400). A search reads its text the same way,
/// so it finds them.
pub(crate) fn text(s: &str) -> String {
    s.replace('\0', "\u{2400}")
}

/// Every string and name in `value` as [`text`] keeps it.
fn json_text(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(s) if s.contains('\0') => *s = text(s),
        serde_json::Value::Array(items) => items.iter_mut().for_each(json_text),
        serde_json::Value::Object(fields) if fields.keys().any(|k| k.contains('\0')) => {
            let taken = std::mem::take(fields);
            fields.extend(taken.into_iter().map(|(k, mut v)| {
                json_text(&mut v);
                (text(&k), v)
            }));
        }
        serde_json::Value::Object(fields) => fields.values_mut().for_each(json_text),
        _ => {}
    }
}

/// `reason` with what differs between records failing for one cause
/// masked: quoted values as `'…'`, UUIDs as `<id>`, long hex as `<hex>`,
/// numbers as `#`.
pub(crate) fn pattern(reason: &str) -> String {
    let mut out = String::with_capacity(reason.len().min(PATTERN_KEPT));
    let mut rest = reason;
    while let Some(c) = rest.chars().next() {
        if out.chars().count() >= PATTERN_KEPT {
            break;
        }
        if let Some(close) = matches!(c, '\'' | '"' | '`').then(|| rest[1..].find(c)).flatten() {
            out.push_str(if c == '`' { "`…`" } else if c == '"' { "\"…\"" } else { "'…'" });
            rest = &rest[close + 2..];
            continue;
        }
        let word_len = rest.find(|c: char| !(c.is_ascii_hexdigit() || c == '-')).unwrap_or(rest.len());
        let word = &rest[..word_len];
        if word_len == 36 && Uuid::parse_str(word).is_ok() {
            out.push_str("<id>");
            rest = &rest[word_len..];
            continue;
        }
        let hex = word_len >= 16 && word.chars().all(|c| c.is_ascii_hexdigit());
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if hex && word_len > digits {
            out.push_str("<hex>");
            rest = &rest[word_len..];
            continue;
        }
        if c.is_ascii_digit() {
            out.push('#');
            rest = &rest[digits..];
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Writes `entry` (a row already there for its position is replaced: a
/// rebuild reads the record again).
pub(crate) async fn write(pool: &PgPool, entry: &Entry) -> Result<(), sqlx::Error> {
    let (source_topic, source_partition, source_offset) = match &entry.source {
        Some((t, p, o)) => (Some(t.as_str()), Some(*p), Some(*o)),
        None => (None, None, None),
    };
    sqlx::query(
        "INSERT INTO idem.dead_letter (topic, \"partition\", \"offset\", handler, authenticity, failed_at, class, \
         reason, pattern, attempts, replays, envelope, source_topic, source_partition, source_offset, record_key, \
         event_id, header_names, payload_bytes, payload_sha256, payload) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21) \
         ON CONFLICT (topic, \"partition\", \"offset\") DO UPDATE SET handler = EXCLUDED.handler, \
         authenticity = EXCLUDED.authenticity, failed_at = EXCLUDED.failed_at, class = EXCLUDED.class, \
         reason = EXCLUDED.reason, pattern = EXCLUDED.pattern, attempts = EXCLUDED.attempts, \
         replays = EXCLUDED.replays, envelope = EXCLUDED.envelope, source_topic = EXCLUDED.source_topic, \
         source_partition = EXCLUDED.source_partition, source_offset = EXCLUDED.source_offset, \
         record_key = EXCLUDED.record_key, event_id = EXCLUDED.event_id, header_names = EXCLUDED.header_names, \
         payload_bytes = EXCLUDED.payload_bytes, payload_sha256 = EXCLUDED.payload_sha256, \
         payload = EXCLUDED.payload",
    )
    .bind(&entry.at.topic)
    .bind(entry.at.partition)
    .bind(entry.at.offset)
    .bind(&entry.handler)
    .bind(authenticity(entry.authenticity))
    .bind(entry.failed_at)
    .bind(&entry.class)
    .bind(&entry.reason)
    .bind(entry.pattern())
    .bind(entry.attempts)
    .bind(entry.replays)
    .bind(entry.envelope)
    .bind(source_topic)
    .bind(source_partition)
    .bind(source_offset)
    .bind(&entry.key)
    .bind(entry.event_id)
    .bind(&entry.header_names)
    .bind(entry.payload_bytes)
    .bind(&entry.payload_sha256)
    .bind(&entry.payload)
    .execute(pool)
    .await?;
    Ok(())
}

/// What became of replayed records of `topic` (partition, offset,
/// outcome), on their rows.
pub(crate) async fn mark_outcomes(
    pool: &PgPool,
    topic: &str,
    marks: &[(i32, i64, &'static str)],
) -> Result<(), sqlx::Error> {
    for chunk in marks.chunks(10_000) {
        let partitions: Vec<i32> = chunk.iter().map(|m| m.0).collect();
        let offsets: Vec<i64> = chunk.iter().map(|m| m.1).collect();
        let outcomes: Vec<&str> = chunk.iter().map(|m| m.2).collect();
        sqlx::query(
            "UPDATE idem.dead_letter d SET outcome = m.outcome, outcome_at = now() \
             FROM unnest($2::integer[], $3::bigint[], $4::text[]) AS m(p, o, outcome) \
             WHERE d.topic = $1 AND d.\"partition\" = m.p AND d.\"offset\" = m.o",
        )
        .bind(topic)
        .bind(&partitions)
        .bind(&offsets)
        .bind(&outcomes)
        .execute(pool)
        .await?;
    }
    Ok(())
}

/// The outcome the index keeps for a discarded dead letter.
pub(crate) const DISCARDED: &str = "discarded";

/// Which of `positions` (partition, offset) of `topic` an operator
/// discarded (`super::discard`): a replay leaves those alone.
pub(crate) async fn discarded(
    pool: &PgPool,
    topic: &str,
    positions: &[(i32, i64)],
) -> Result<std::collections::HashSet<(i32, i64)>, sqlx::Error> {
    let (partitions, offsets): (Vec<i32>, Vec<i64>) = positions.iter().copied().unzip();
    let rows: Vec<(i32, i64)> = sqlx::query_as(
        "SELECT \"partition\", \"offset\" FROM idem.dead_letter WHERE topic = $1 AND outcome = $4 \
         AND (\"partition\", \"offset\") IN (SELECT * FROM unnest($2::integer[], $3::bigint[]))",
    )
    .bind(topic)
    .bind(&partitions)
    .bind(&offsets)
    .bind(DISCARDED)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().collect())
}

/// The index's word for a seal's verdict.
pub(crate) fn authenticity(a: Authenticity) -> &'static str {
    match a {
        Authenticity::Sealed => "sealed",
        Authenticity::Unsealed => "unsealed",
        Authenticity::Forged => "forged",
    }
}

#[cfg(test)]
mod tests {
    use super::{json_text, pattern, text};

    #[test]
    fn nul_is_kept_as_a_visible_character_everywhere_in_a_payload() {
        assert_eq!(text("a\0b"), "a\u{2400}b");
        let mut v = serde_json::json!({"k\u{0}": ["x\u{0}", {"y": "\u{0}"}], "n": 1});
        json_text(&mut v);
        assert_eq!(v, serde_json::json!({"k\u{2400}": ["x\u{2400}", {"y": "\u{2400}"}], "n": 1}));
    }

    #[test]
    fn reasons_of_one_cause_share_a_pattern() {
        let a = pattern("handler failed (permanent): order 1234 for 'alice' declined: card 4f1c2d3e4f5a6b7c8d9e");
        let b = pattern("handler failed (permanent): order 98 for 'bob' declined: card 0000000000000000aaaa");
        assert_eq!(a, b);
        assert_eq!(a, "handler failed (permanent): order # for '…' declined: card <hex>");
        assert_eq!(
            pattern("event 0190c3a2-7b1c-7d2e-8f00-123456789abc: invalid: missing field `customerId` at line 1"),
            "event <id>: invalid: missing field `…` at line #"
        );
        assert_eq!(pattern("took 1.5 s"), "took # s");
        assert_eq!(pattern("order 12345678901234567890"), "order #");
        assert_eq!(pattern("an unclosed 'quote"), "an unclosed 'quote");
        assert_eq!(pattern(&"x".repeat(1000)).chars().count(), 200);
        assert_eq!(pattern("décliné: 3 fois"), "décliné: # fois");
    }
}
