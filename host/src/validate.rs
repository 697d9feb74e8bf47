//! Validation before dedup: a record becomes an [`Event`] only if its payload
//! is JSON (or a registry format's record, decoded into JSON: `formats`)
//! with a UUID v7 `eventId`, a configured `eventType`, an RFC 3339
//! `occurredAt` (where `[handler.envelope]` says they are), and satisfies
//! the handler's JSON Schema.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use uuid::Uuid;

use crate::config::{Envelope, Format, HandlerConfig};
use crate::event::{Event, Origin};
use crate::formats::{Decoded, Outage, Reading, Registry, Unreadable, Writer, frame};

/// A Kafka record as the host received it, owned.
#[derive(Debug, Clone)]
pub struct Record {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// The record's timestamp, milliseconds since the epoch, if it has one.
    pub timestamp: Option<i64>,
}

impl Record {
    /// What the record weighs in memory, roughly: payload, key and headers.
    pub fn weight(&self) -> usize {
        let headers: usize = self.headers.iter().map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len)).sum();
        self.payload.as_ref().map_or(0, Vec::len) + self.key.as_ref().map_or(0, Vec::len) + headers
    }
}

/// Why a record is not a valid event: logged, counted and dead-lettered, never retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("the record has no payload")]
    NoPayload,
    #[error("the payload is not JSON: {0}")]
    NotJson(String),
    #[error("the payload is not a JSON object")]
    NotObject,
    #[error("`{0}` is missing or not a string")]
    MissingField(String),
    #[error("eventId `{0}` is not a UUID (36 characters, hex digits and hyphens)")]
    EventIdNotUuid(String),
    #[error("eventId `{0}` is a UUID, but not in canonical form: write it in lowercase")]
    EventIdNotCanonical(String),
    #[error("eventId `{0}` has variant bits other than RFC 9562's `10` (its 17th hex digit must be 8, 9, a or b)")]
    EventIdVariant(String),
    #[error("eventId `{id}` is a UUID v{version}, not v7")]
    EventIdNotV7 { id: String, version: usize },
    #[error("eventType `{0}` is not one this handler accepts")]
    UnknownEventType(String),
    #[error("occurredAt `{0}` is not an RFC 3339 timestamp")]
    BadOccurredAt(String),
    #[error("the payload violates the schema: {0}")]
    Schema(String),
    /// A registry format's record that cannot be read (`formats`).
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
}

/// One handler's validation rules.
pub struct Validator {
    event_types: HashSet<String>,
    envelope: Paths,
    /// The payload's JSON Schema (`json`, `json-schema`).
    schema: Option<jsonschema::Validator>,
    /// The registry formats' decoding (`avro`, `protobuf`, `json-schema`).
    reading: Option<Reading>,
}

/// The envelope's fields' paths, split once.
#[derive(Debug)]
struct Paths {
    event_id: Vec<String>,
    event_type: Vec<String>,
    occurred_at: Vec<String>,
}

impl From<&Envelope> for Paths {
    fn from(e: &Envelope) -> Self {
        let split = |p: &str| p.split('.').map(str::to_owned).collect();
        Self { event_id: split(&e.event_id), event_type: split(&e.event_type), occurred_at: split(&e.occurred_at) }
    }
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validator").field("event_types", &self.event_types).finish_non_exhaustive()
    }
}

impl Validator {
    /// Compiles the JSON Schema at `schema_path` (draft 2020-12).
    pub fn load(schema_path: &Path, event_types: &[String]) -> anyhow::Result<Self> {
        let text = crate::files::read_text(schema_path)
            .with_context(|| format!("failed to read schema {}", schema_path.display()))?;
        let schema: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("schema {} is not JSON", schema_path.display()))?;
        Self::new(&schema, event_types).with_context(|| format!("schema {} does not compile", schema_path.display()))
    }

    pub fn new(schema: &serde_json::Value, event_types: &[String]) -> anyhow::Result<Self> {
        let schema = jsonschema::draft202012::new(schema).map_err(|e| anyhow::anyhow!("{e}"))?;
        let envelope = Paths::from(&Envelope::default());
        Ok(Self { event_types: event_types.iter().cloned().collect(), envelope, schema: Some(schema), reading: None })
    }

    /// Handler `h`'s rules: its format's reader schema, its envelope's
    /// paths; `registry` for the registry formats (`config` checked there is one).
    pub fn for_handler(h: &HandlerConfig, registry: Option<&Arc<Registry>>) -> anyhow::Result<Self> {
        let mut validator = match h.format {
            Format::Json | Format::JsonSchema => Self::load(&h.schema, &h.event_types)?,
            Format::Avro | Format::Protobuf => Self {
                event_types: h.event_types.iter().cloned().collect(),
                envelope: Paths::from(&Envelope::default()),
                schema: None,
                reading: None,
            },
        };
        validator.envelope = Paths::from(&h.envelope);
        if h.format.uses_registry() {
            let registry = registry.context("this format needs a [registry]")?.clone();
            validator.reading = Some(Reading::load(h.format, &h.schema, h.message.as_deref(), registry)?);
        }
        Ok(validator)
    }

    /// Every handler's rules in `config`, in order (one registry client for them all).
    pub fn for_config(config: &crate::config::Config) -> anyhow::Result<Vec<Self>> {
        let registry = config.registry.as_ref().map(Registry::new).transpose()?.map(Arc::new);
        let for_one = |h: &HandlerConfig| {
            Self::for_handler(h, registry.as_ref()).with_context(|| format!("handler `{}`", h.name))
        };
        config.handlers.iter().map(for_one).collect()
    }

    /// The registry formats' reading, if the handler reads one.
    pub fn reading(&self) -> Option<&Reading> {
        self.reading.as_ref()
    }

    /// Whether a record may need the registry first (`check`).
    pub fn reads_registry(&self) -> bool {
        self.reading.is_some()
    }

    /// `record` validated, its writer schema fetched first if it is framed
    /// for one this handler has not met: `Err` when the registry cannot
    /// answer now (nothing is decided about the record).
    pub async fn check(&self, record: &Record) -> Result<Result<Event, Invalid>, Outage> {
        let Some(reading) = &self.reading else { return Ok(self.validate(record)) };
        let Some(Ok(framed)) = record.payload.as_deref().map(frame::split) else { return Ok(self.validate(record)) };
        let id = framed.schema_id;
        let writer = match reading.cached(id) {
            Some(writer) => writer,
            None => reading.fetch(id).await?,
        };
        Ok(self.decoded(record, reading, id, &writer, framed.body))
    }

    /// The `eventId` a JSON record carries where the envelope says, read
    /// without validating anything else (`None`: not JSON, no such field,
    /// not a UUID, or a registry format): what the ledger audit looks up
    /// for a record today's checks refuse but an earlier config took.
    pub fn raw_event_id(&self, record: &Record) -> Option<Uuid> {
        if self.reading.is_some() {
            return None;
        }
        let value: serde_json::Value = serde_json::from_slice(record.payload.as_deref()?).ok()?;
        let mut at = &value;
        for name in &self.envelope.event_id {
            at = at.get(name)?;
        }
        Uuid::try_parse(at.as_str()?).ok()
    }

    /// `record` validated. A registry format's record is decoded with the
    /// writer schemas this handler has met: one it has not is taken for
    /// an unknown id, so whoever may meet new ids (the pipeline, replays,
    /// `idem test`) calls [`Validator::check`], which fetches it first.
    pub fn validate(&self, record: &Record) -> Result<Event, Invalid> {
        let bytes = record.payload.as_deref().ok_or(Invalid::NoPayload)?;
        let Some(reading) = &self.reading else {
            let payload = crate::strict_json::from_slice(bytes).map_err(|e| Invalid::NotJson(shown(&e.to_string())))?;
            return self.event(record, payload, String::from_utf8_lossy(bytes).into_owned());
        };
        let framed = frame::split(bytes)?;
        let id = framed.schema_id;
        let writer = reading.cached(id).ok_or(Unreadable::UnknownSchema(id))?;
        self.decoded(record, reading, id, &writer, framed.body)
    }

    fn decoded(
        &self,
        record: &Record,
        reading: &Reading,
        id: u32,
        writer: &Writer,
        body: &[u8],
    ) -> Result<Event, Invalid> {
        let mut event = match reading.decode(id, writer, body)? {
            Decoded::Value(payload) => {
                let text = payload.to_string();
                self.event(record, payload, text)?
            }
            Decoded::Text(json) => {
                let payload =
                    crate::strict_json::from_slice(json).map_err(|e| Invalid::NotJson(shown(&e.to_string())))?;
                self.event(record, payload, String::from_utf8_lossy(json).into_owned())?
            }
        };
        // Kept only once the event is valid: the handler may ask for them.
        let value = record.payload.as_deref().unwrap_or_default();
        event.origin = Some(Origin { value: value.into(), schema_id: id });
        Ok(event)
    }

    /// The decoded `payload` (`text`: the JSON the guest reads) checked: the envelope, the schema.
    fn event(&self, record: &Record, payload: serde_json::Value, text: String) -> Result<Event, Invalid> {
        if !payload.is_object() {
            return Err(Invalid::NotObject);
        }
        let field = |path: &[String]| {
            let mut at = &payload;
            for name in path {
                at = at.get(name).ok_or_else(|| Invalid::MissingField(path.join(".")))?;
            }
            at.as_str().ok_or_else(|| Invalid::MissingField(path.join(".")))
        };
        let raw_id = field(&self.envelope.event_id)?;
        let id = parse_v7(raw_id)?;
        let event_type = field(&self.envelope.event_type)?;
        if !self.event_types.contains(event_type) {
            return Err(Invalid::UnknownEventType(shown(event_type)));
        }
        let occurred_at = field(&self.envelope.occurred_at)?;
        if chrono::DateTime::parse_from_rfc3339(occurred_at).is_err() {
            return Err(Invalid::BadOccurredAt(shown(occurred_at)));
        }
        // `is_valid` stops at the first failure and builds no error: the
        // errors are collected only for a payload that has some.
        if let Some(schema) = self.schema.as_ref().filter(|schema| !schema.is_valid(&payload)) {
            let errors: Vec<String> =
                schema.iter_errors(&payload).take(5).map(|e| format!("at `{}`: {e}", e.instance_path())).collect();
            // Not valid, whatever the errors say (none would be the
            // validator's inconsistency, never a pass).
            let reason = if errors.is_empty() { "does not match the schema".to_owned() } else { errors.join("; ") };
            return Err(Invalid::Schema(shown(&reason)));
        }
        Ok(Event {
            id,
            event_type: event_type.to_owned(),
            occurred_at: occurred_at.to_owned(),
            topic: record.topic.clone(),
            partition: record.partition,
            offset: record.offset,
            key: record.key.clone(),
            headers: record.headers.clone(),
            payload: text,
            payload_sha256: crate::event::payload_hash(&payload),
            origin: None,
        })
    }
}

/// R-KFK-IDEM-1: the event id is a UUID v7 (RFC 9562: version 7, variant
/// `10`), in its canonical form: 36 lowercase characters. One id has one
/// spelling, so an uppercase copy of a processed id is named for what it
/// is, not taken for the id reused with another payload.
fn parse_v7(raw: &str) -> Result<Uuid, Invalid> {
    let id =
        Uuid::try_parse(raw).ok().filter(|_| raw.len() == 36).ok_or_else(|| Invalid::EventIdNotUuid(shown(raw)))?;
    if id.hyphenated().to_string() != raw {
        return Err(Invalid::EventIdNotCanonical(shown(raw)));
    }
    if id.get_variant() != uuid::Variant::RFC4122 {
        return Err(Invalid::EventIdVariant(shown(raw)));
    }
    match id.get_version_num() {
        7 => Ok(id),
        version => Err(Invalid::EventIdNotV7 { id: shown(raw), version }),
    }
}

/// The longest piece of a record quoted in a reason: reasons are logged,
/// counted and written into DLQ headers, and a record's field may be a
/// megabyte long.
const MAX_QUOTED_CHARS: usize = 200;

/// `text` for a reason: control characters escaped, at most
/// [`MAX_QUOTED_CHARS`], and how much was left out.
fn shown(text: &str) -> String {
    crate::text::shown(text, MAX_QUOTED_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn validator() -> Validator {
        let schema = json!({
            "type": "object",
            "required": ["orderId"],
            "properties": { "orderId": { "type": "integer", "minimum": 1 } }
        });
        Validator::new(&schema, &["order.confirmed.v1".to_owned()]).expect("schema compiles")
    }

    fn record(payload: &[u8]) -> Record {
        Record {
            topic: "t".into(),
            partition: 2,
            offset: 9,
            key: None,
            payload: Some(payload.to_vec()),
            headers: vec![],
            timestamp: None,
        }
    }

    fn payload(id: &str, event_type: &str, occurred_at: &str, order_id: serde_json::Value) -> Vec<u8> {
        json!({"eventId": id, "eventType": event_type, "occurredAt": occurred_at, "orderId": order_id})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn a_valid_payload_becomes_an_event_keyed_by_its_event_id() {
        let id = Uuid::now_v7().to_string();
        let event = validator()
            .validate(&record(&payload(&id, "order.confirmed.v1", "2026-11-30T10:00:00+01:00", json!(5))))
            .expect("valid");
        assert_eq!(event.id.to_string(), id);
        assert_eq!((event.partition, event.offset), (2, 9));
    }

    #[test]
    fn each_kind_of_invalid_payload_is_named() {
        let v = validator();
        let v7 = Uuid::now_v7().to_string();
        let v4 = "0b7f1d2e-8f9a-4c3b-9d2e-1f0a2b3c4d5e";
        let check = |bytes: &[u8]| v.validate(&record(bytes)).expect_err("invalid");
        assert!(matches!(check(b"not json"), Invalid::NotJson(_)));
        assert_eq!(check(b"[1]"), Invalid::NotObject);
        assert_eq!(check(br#"{"eventType":"order.confirmed.v1"}"#), Invalid::MissingField("eventId".into()));
        assert!(matches!(
            check(&payload(v4, "order.confirmed.v1", "2026-11-30T10:00:00Z", json!(5))),
            Invalid::EventIdNotV7 { version: 4, .. }
        ));
        assert!(matches!(
            check(&payload("42", "order.confirmed.v1", "2026-11-30T10:00:00Z", json!(5))),
            Invalid::EventIdNotUuid(_)
        ));
        assert!(matches!(
            check(&payload(&v7, "order.cancelled.v1", "2026-11-30T10:00:00Z", json!(5))),
            Invalid::UnknownEventType(_)
        ));
        assert!(matches!(check(&payload(&v7, "order.confirmed.v1", "yesterday", json!(5))), Invalid::BadOccurredAt(_)));
        let schema = check(&payload(&v7, "order.confirmed.v1", "2026-11-30T10:00:00Z", json!(0)));
        assert!(matches!(schema, Invalid::Schema(ref m) if m.contains("orderId")), "{schema}");
        let upper = v7.to_uppercase();
        assert!(matches!(
            check(&payload(&upper, "order.confirmed.v1", "2026-11-30T10:00:00Z", json!(5))),
            Invalid::EventIdNotCanonical(_)
        ));
        // Version 7 with variant `11` (17th hex digit c) and `00` (digit 4).
        for digit in ['c', '4'] {
            let mut bad: Vec<char> = v7.chars().collect();
            bad[19] = digit;
            let bad: String = bad.into_iter().collect();
            let e = check(&payload(&bad, "order.confirmed.v1", "2026-11-30T10:00:00Z", json!(5)));
            assert!(matches!(e, Invalid::EventIdVariant(_)), "{bad}: {e}");
        }
        let twice = format!(
            r#"{{"eventId":"{v7}","eventType":"order.cancelled.v1","eventType":"order.confirmed.v1","occurredAt":"2026-11-30T10:00:00Z","orderId":5}}"#
        );
        let e = check(twice.as_bytes());
        assert!(e.to_string().contains("`eventType` appears twice"), "{e}");
        let long = "x".repeat(900_000);
        let e = check(&payload(&v7, &long, "2026-11-30T10:00:00Z", json!(5)));
        assert!(e.to_string().len() < 400 && e.to_string().contains("(900000 bytes)"), "capped");
        let none = Record { payload: None, ..record(b"") };
        assert_eq!(v.validate(&none).expect_err("tombstone"), Invalid::NoPayload);
    }
}
