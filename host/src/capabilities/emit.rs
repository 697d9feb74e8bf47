//! The `emit` import: events a handler publishes through the outbox.
//!
//! The capability only checks and collects: an accepted event is kept in
//! the invocation's state until the executor writes every event the
//! transaction's invocations emitted into `idem.outbox`, just before
//! COMMIT (`outbox::write`). An invocation that fails takes its events with
//! it; a batch that rolls back, all of them.
//!
//! What a guest decides: the topic and event type (among those configured
//! for its handler), the key, the payload (a JSON object, checked against
//! the topic's schema with the envelope the host adds) and its own headers.
//! What it cannot: the `eventId` (a fresh UUID v7 minted here), the
//! `eventType`/`occurredAt` fields, and the provenance headers
//! (`idem.causation-id`, `idem.correlation-id`, `idem.producer`,
//! `traceparent`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use uuid::Uuid;

use super::allowance::Allowance;
use crate::wit::emit::{self, EmitError, Message};

/// The most headers one emitted event may carry.
const MAX_HEADERS: usize = 32;
/// The longest key.
const MAX_KEY_BYTES: usize = 4 << 10;

/// What a handler may emit: its `[[handler.emit]]` tables, schemas
/// compiled.
#[derive(Default)]
pub struct EmitPolicy {
    topics: HashMap<String, EmitTopic>,
}

struct EmitTopic {
    event_types: HashSet<String>,
    schema: jsonschema::Validator,
}

impl std::fmt::Debug for EmitPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmitPolicy").field("topics", &self.topics.keys().collect::<Vec<_>>()).finish()
    }
}

impl EmitPolicy {
    /// Compiles each topic's schema (`schema` is its JSON).
    pub fn new<'a>(
        topics: impl IntoIterator<Item = (&'a str, &'a [String], &'a serde_json::Value)>,
    ) -> anyhow::Result<Self> {
        let mut compiled = HashMap::new();
        for (topic, event_types, schema) in topics {
            let schema = jsonschema::draft202012::new(schema)
                .map_err(|e| anyhow::anyhow!("emit topic `{topic}`: the schema does not compile: {e}"))?;
            compiled.insert(topic.to_owned(), EmitTopic { event_types: event_types.iter().cloned().collect(), schema });
        }
        Ok(Self { topics: compiled })
    }

    /// Reads and compiles the schemas of `[[handler.emit]]`.
    pub fn load(emits: &[crate::config::HandlerEmit]) -> anyhow::Result<Self> {
        let mut schemas = Vec::new();
        for e in emits {
            let text = crate::files::read_text(&e.schema)
                .map_err(|err| anyhow::anyhow!("emit topic `{}`: schema {}: {err}", e.topic, e.schema.display()))?;
            let schema: serde_json::Value = serde_json::from_str(&text).map_err(|err| {
                anyhow::anyhow!("emit topic `{}`: schema {} is not JSON: {err}", e.topic, e.schema.display())
            })?;
            schemas.push(schema);
        }
        Self::new(emits.iter().zip(&schemas).map(|(e, s)| (e.topic.as_str(), e.event_types.as_slice(), s)))
    }

    pub fn is_empty(&self) -> bool {
        self.topics.is_empty()
    }
}

/// An event accepted from a guest, to be written when its transaction
/// commits.
#[derive(Debug, Clone, PartialEq)]
pub struct Emitted {
    pub event_id: Uuid,
    pub topic: String,
    pub key: String,
    pub event_type: String,
    /// The guest's payload, a JSON object without the envelope's fields.
    pub payload: serde_json::Map<String, serde_json::Value>,
    /// The guest's headers and the host's provenance (all but
    /// `idem.causation-id` and `idem.producer`, which the database sets).
    pub headers: serde_json::Map<String, serde_json::Value>,
}

/// One invocation's emits.
pub(crate) struct EmitCapability {
    policy: Arc<EmitPolicy>,
    allowance: Allowance,
    max_bytes: usize,
    /// The host's headers every emitted event carries (correlation, trace);
    /// `None` when its event runs without a dedup row: it may emit nothing.
    provenance: Option<Vec<(String, String)>>,
    emitted: Vec<Emitted>,
}

impl EmitCapability {
    pub(crate) fn new(
        policy: Arc<EmitPolicy>,
        max_emits: u32,
        max_bytes: usize,
        provenance: Option<Vec<(String, String)>>,
    ) -> Self {
        Self { policy, allowance: Allowance::new(max_emits, "max_emits"), max_bytes, provenance, emitted: Vec::new() }
    }

    /// The events this invocation emitted, taken.
    pub(crate) fn take(&mut self) -> Vec<Emitted> {
        std::mem::take(&mut self.emitted)
    }

    /// `message` checked: the accepted event, or why not.
    fn accept(&self, message: Message) -> Result<Emitted, EmitError> {
        let Message { topic, key, event_type, payload, headers } = message;
        let shown = |s: &str| crate::text::shown(s, 200);
        let Some(provenance) = &self.provenance else {
            return Err(EmitError::Refused(
                "this event runs without a dedup row (older than the dedup retention, run anyway): it may not emit, \
                 as nothing could say it was processed once"
                    .into(),
            ));
        };
        let Some(rules) = self.policy.topics.get(&topic) else {
            return Err(EmitError::Refused(format!("topic `{}` is not configured for this handler", shown(&topic))));
        };
        if !rules.event_types.contains(&event_type) {
            return Err(EmitError::Refused(format!(
                "event type `{}` is not configured for topic `{topic}`",
                shown(&event_type)
            )));
        }
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(EmitError::Refused(format!("a key is 1 to {MAX_KEY_BYTES} bytes (the aggregate's id)")));
        }
        let size = payload.len() + key.len() + headers.iter().map(|(n, v)| n.len() + v.len()).sum::<usize>();
        if size > self.max_bytes {
            return Err(EmitError::Refused(format!(
                "{size} bytes of payload, key and headers: more than limits.max_emit_bytes ({})",
                self.max_bytes
            )));
        }
        let headers = headers_of(headers, provenance)?;
        let payload = match crate::strict_json::from_slice(payload.as_bytes()) {
            Ok(serde_json::Value::Object(object)) => object,
            Ok(_) => return Err(EmitError::Invalid("the payload is not a JSON object".into())),
            Err(e) => return Err(EmitError::Invalid(format!("the payload is not JSON: {}", shown(&e.to_string())))),
        };
        if let Some(field) = ["eventId", "eventType", "occurredAt"].into_iter().find(|f| payload.contains_key(*f)) {
            return Err(EmitError::Invalid(format!("`{field}` is the host's: leave it out of the payload")));
        }
        let event_id = Uuid::now_v7();
        let mut value = payload.clone();
        value.insert("eventId".into(), event_id.hyphenated().to_string().into());
        value.insert("eventType".into(), event_type.clone().into());
        // As the outbox writes it (the transaction's time, microseconds, Z).
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
        value.insert("occurredAt".into(), now.into());
        let value = serde_json::Value::Object(value);
        let errors: Vec<String> =
            rules.schema.iter_errors(&value).take(5).map(|e| format!("at `{}`: {e}", e.instance_path())).collect();
        if !errors.is_empty() {
            return Err(EmitError::Invalid(format!(
                "the event violates topic `{topic}`'s schema: {}",
                shown(&errors.join("; "))
            )));
        }
        Ok(Emitted { event_id, topic, key, event_type, payload, headers })
    }
}

/// The guest's headers (none of the host's names), then the host's.
fn headers_of(
    guest: Vec<(String, String)>,
    provenance: &[(String, String)],
) -> Result<serde_json::Map<String, serde_json::Value>, EmitError> {
    if guest.len() > MAX_HEADERS {
        return Err(EmitError::Refused(format!("more than {MAX_HEADERS} headers")));
    }
    let mut headers = serde_json::Map::new();
    for (name, value) in guest {
        let lower = name.to_ascii_lowercase();
        if name.is_empty() || lower.starts_with("idem.") || lower == "traceparent" || lower == "tracestate" {
            return Err(EmitError::Refused(format!(
                "header `{}` is the host's (idem.*, traceparent, tracestate) or empty",
                crate::text::shown(&name, 200)
            )));
        }
        if headers.insert(name.clone(), value.into()).is_some() {
            return Err(EmitError::Refused(format!("header `{}` is named twice", crate::text::shown(&name, 200))));
        }
    }
    for (name, value) in provenance {
        headers.insert(name.clone(), value.clone().into());
    }
    Ok(headers)
}

impl emit::Host for EmitCapability {
    async fn send(&mut self, message: Message) -> wasmtime::Result<Result<String, EmitError>> {
        if let Err(e) = self.allowance.spend("emitted events") {
            return Ok(Err(EmitError::Refused(e)));
        }
        Ok(self.accept(message).map(|emitted| {
            let id = emitted.event_id.hyphenated().to_string();
            self.emitted.push(emitted);
            id
        }))
    }
}
