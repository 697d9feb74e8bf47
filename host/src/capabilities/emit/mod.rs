//! The `emit` import: events a handler publishes through the outbox.
//!
//! The capability only checks and collects: an accepted event is kept in
//! the invocation's state until the executor writes every event the
//! transaction's invocations emitted into `idem.outbox`, just before
//! COMMIT (`capabilities::emit::write`). An invocation that fails takes its events with
//! it; a batch that rolls back, all of them.
//!
//! What a guest decides: the topic and event type (among those configured
//! for its handler), the key, the payload (a JSON object, checked against
//! the topic's schema with the envelope the host adds) and its own headers.
//! What it cannot: the `eventId` (a fresh UUID v7 minted here), the
//! `eventType`/`occurredAt` fields, and the provenance headers
//! (`idem.causation-id`, `idem.correlation-id`, `idem.producer`,
//! `traceparent`) — nor anything a reader could take for them:
//! - a top-level payload key whose [`folded`] form is an envelope field's
//!   (`EventId`, `"eventId "`, `event_id`, `eventid`, `еventId` with a
//!   Cyrillic `е`) is refused ([`EmitError::Invalid`]);
//! - a header whose [`folded`] name starts with `idem` or is `traceparent`
//!   or `tracestate` (`Idem.Correlation-Id`, `idem_correlation_id`,
//!   `traceparent ` with a space, `іdem.x` with a Cyrillic `і`) is refused,
//!   and so is any header name that is not made of visible ASCII token
//!   characters (HTTP's `tchar`: letters, digits, ``!#$%&'*+-.^_`|~``), so
//!   no look-alike letter, space or control character can make one name
//!   look like another ([`EmitError::Refused`]).
//!
//! `idem_api.emit_events` checks the same names again in the database
//! (migration `20261203000001_outbox_rules.sql`), all but the look-alike
//! letters of payload keys; the topic's schema is checked here only.

mod capability;
pub(crate) mod write;

pub use capability::EmitSettings;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use uuid::Uuid;

use crate::capabilities::allowance::Allowance;
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

impl EmitPolicy {
    /// Whether any topic is configured: a handler with none emits nothing.
    pub(crate) fn any(&self) -> bool {
        !self.topics.is_empty()
    }
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

    /// `message` checked: the accepted event, or why not.
    fn accept(&self, message: Message) -> Result<Emitted, EmitError> {
        let Message { topic, key, event_type, payload, headers } = message;
        let shown = |s: &str| crate::text::shown(s, 200);
        let Some(rules) = self.policy.topics.get(&topic) else {
            return Err(EmitError::Refused(format!("topic `{}` is not configured for this handler", shown(&topic))));
        };
        if !rules.event_types.contains(&event_type) {
            return Err(EmitError::Refused(format!(
                "event type `{}` is not configured for topic `{topic}`",
                shown(&event_type)
            )));
        }
        let Some(provenance) = &self.provenance else {
            return Err(EmitError::Refused(
                "this event runs without a dedup row (older than the dedup retention, run anyway): it may not emit, \
                 as nothing could say it was processed once"
                    .into(),
            ));
        };
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
        if let Some((key, field)) = envelope_like(&payload) {
            return Err(EmitError::Invalid(format!(
                "`{}` is the host's `{field}` or looks like it (top-level keys are compared ignoring case, spaces, \
                 punctuation and look-alike letters): leave it out of the payload",
                shown(key)
            )));
        }
        let event_id = Uuid::now_v7();
        // As the outbox writes it (the transaction's time, microseconds, Z).
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let envelope = [event_id.hyphenated().to_string(), event_type.clone(), now];
        let mut payload = payload;
        // Errors are collected only for an event that fails: building them
        // costs more than the check.
        let errors = as_sent(&mut payload, envelope, |event| {
            (!rules.schema.is_valid(event)).then(|| {
                let errors = rules.schema.iter_errors(event).take(5);
                errors.map(|e| format!("at `{}`: {e}", e.instance_path())).collect::<Vec<_>>()
            })
        });
        if let Some(errors) = errors {
            // Not valid, whatever the errors say (none would be the
            // validator's inconsistency, never a pass), as for records.
            let reason = if errors.is_empty() { "does not match the schema".to_owned() } else { errors.join("; ") };
            return Err(EmitError::Invalid(format!("the event violates topic `{topic}`'s schema: {}", shown(&reason))));
        }
        Ok(Emitted { event_id, topic, key, event_type, payload, headers })
    }
}

/// The fields the host adds to every payload.
const ENVELOPE: [&str; 3] = ["eventId", "eventType", "occurredAt"];

/// `check` of the event as it will be sent: `payload` with the envelope's
/// fields (values in [`ENVELOPE`]'s order). The payload is lent, not
/// copied, and handed back as it was (it has none of those fields:
/// [`envelope_like`] refused them).
fn as_sent<T>(
    payload: &mut serde_json::Map<String, serde_json::Value>,
    envelope: [String; 3],
    check: impl FnOnce(&serde_json::Value) -> T,
) -> T {
    let mut event = std::mem::take(payload);
    for (name, value) in ENVELOPE.into_iter().zip(envelope) {
        event.insert(name.into(), value.into());
    }
    let event = serde_json::Value::Object(event);
    let checked = check(&event);
    let serde_json::Value::Object(mut event) = event else { unreachable!("made an object above") };
    for name in ENVELOPE {
        event.remove(name);
    }
    *payload = event;
    checked
}

/// `name` as compared with the host's names: look-alike letters mapped to
/// the Latin ones they imitate ([`latin`]), lower case, only letters and
/// digits kept (no spaces, punctuation, zero-width or control characters).
/// `Event_ID `, `event-id` and `еventId` all fold to `eventid`.
fn folded(name: &str) -> String {
    name.chars().map(latin).flat_map(char::to_lowercase).filter(|c| c.is_alphanumeric()).collect()
}

/// Cyrillic and Greek letters drawn like a Latin one, and the Latin one.
const LOOK_ALIKES: &[(char, char)] = &[
    // Cyrillic.
    ('а', 'a'),
    ('в', 'b'),
    ('с', 'c'),
    ('ԁ', 'd'),
    ('е', 'e'),
    ('һ', 'h'),
    ('і', 'i'),
    ('ј', 'j'),
    ('к', 'k'),
    ('ӏ', 'l'),
    ('м', 'm'),
    ('н', 'h'),
    ('о', 'o'),
    ('р', 'p'),
    ('ԛ', 'q'),
    ('г', 'r'),
    ('ѕ', 's'),
    ('т', 't'),
    ('ц', 'u'),
    ('ѵ', 'v'),
    ('ԝ', 'w'),
    ('х', 'x'),
    ('у', 'y'),
    ('ү', 'y'),
    ('А', 'A'),
    ('В', 'B'),
    ('С', 'C'),
    ('Ԁ', 'D'),
    ('Е', 'E'),
    ('Н', 'H'),
    ('І', 'I'),
    ('Ј', 'J'),
    ('К', 'K'),
    ('М', 'M'),
    ('О', 'O'),
    ('Р', 'P'),
    ('Ѕ', 'S'),
    ('Т', 'T'),
    ('Ѵ', 'V'),
    ('Х', 'X'),
    ('У', 'Y'),
    ('Ү', 'Y'),
    // Greek.
    ('α', 'a'),
    ('ε', 'e'),
    ('ι', 'i'),
    ('κ', 'k'),
    ('ν', 'v'),
    ('ο', 'o'),
    ('ρ', 'p'),
    ('τ', 't'),
    ('υ', 'u'),
    ('χ', 'x'),
    ('Α', 'A'),
    ('Β', 'B'),
    ('Ε', 'E'),
    ('Ζ', 'Z'),
    ('Η', 'H'),
    ('Ι', 'I'),
    ('Κ', 'K'),
    ('Μ', 'M'),
    ('Ν', 'N'),
    ('Ο', 'O'),
    ('Ρ', 'P'),
    ('Τ', 'T'),
    ('Υ', 'Y'),
    ('Χ', 'X'),
    // Latin letters that pass for others.
    ('ı', 'i'),
    ('ſ', 's'),
    ('ℓ', 'l'),
];

/// The Latin letter `c` looks like, if it is a fullwidth form or one of the
/// Cyrillic and Greek letters drawn like a Latin one; else `c`.
fn latin(c: char) -> char {
    match u32::from(c) {
        // Fullwidth ASCII (`ｅｖｅｎｔＩｄ`).
        0xFF01..=0xFF5E => char::from_u32(u32::from(c) - 0xFEE0).unwrap_or(c),
        _ => LOOK_ALIKES.iter().find(|(from, _)| *from == c).map_or(c, |(_, to)| *to),
    }
}

/// The first top-level key of `payload` that is, or looks like, an
/// envelope field, with that field.
fn envelope_like(payload: &serde_json::Map<String, serde_json::Value>) -> Option<(&str, &'static str)> {
    static FOLDED: std::sync::LazyLock<[String; 3]> = std::sync::LazyLock::new(|| ENVELOPE.map(folded));
    payload.keys().find_map(|key| {
        let key_folded = folded(key);
        let at = FOLDED.iter().position(|field| *field == key_folded)?;
        Some((key.as_str(), ENVELOPE[at]))
    })
}

/// Why a guest may not name a header `name`, if it may not.
fn refused_header(name: &str) -> Option<String> {
    let shown = crate::text::shown(name, 200);
    let name_folded = folded(name);
    if name_folded.starts_with("idem") || name_folded == "traceparent" || name_folded == "tracestate" {
        return Some(format!(
            "header `{shown}` is the host's or looks like it (idem*, traceparent, tracestate, compared ignoring case, \
             spaces, punctuation and look-alike letters)"
        ));
    }
    if name.is_empty() {
        return Some("a header name is empty".to_owned());
    }
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if !name.bytes().all(token) {
        return Some(format!(
            "header `{shown}`: a header name is visible ASCII letters, digits and !#$%&'*+-.^_`|~ only (no spaces, \
             controls or look-alike letters)"
        ));
    }
    None
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
        if let Some(why) = refused_header(&name) {
            return Err(EmitError::Refused(why));
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{EmitCapability, EmitPolicy, as_sent, envelope_like, refused_header};
    use crate::wit::emit::{EmitError, Message};

    fn capability() -> EmitCapability {
        let schema = serde_json::json!({ "type": "object" });
        let types = ["t.v1".to_owned()];
        let policy = EmitPolicy::new([("out", types.as_slice(), &schema)]).unwrap_or_default();
        let provenance = vec![("idem.correlation-id".to_owned(), uuid::Uuid::now_v7().to_string())];
        EmitCapability::new(Arc::new(policy), 16, 64 << 10, Some(provenance))
    }

    fn message(payload: &str, headers: &[(&str, &str)]) -> Message {
        Message {
            topic: "out".into(),
            key: "k".into(),
            event_type: "t.v1".into(),
            payload: payload.into(),
            headers: headers.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect(),
        }
    }

    fn payload(key: &str) -> serde_json::Map<String, serde_json::Value> {
        let mut map = serde_json::Map::new();
        map.insert("amount".into(), 1.into());
        map.insert(key.into(), "x".into());
        map
    }

    #[test]
    fn the_schema_sees_the_event_as_sent_and_the_payload_comes_back_as_it_was() {
        let mut sent = payload("note");
        let before = sent.clone();
        let envelope = ["id".to_owned(), "t.v1".to_owned(), "2026-12-07T00:00:00.000000Z".to_owned()];
        let seen = as_sent(&mut sent, envelope, serde_json::Value::clone);
        assert_eq!(
            seen,
            serde_json::json!({ "amount": 1, "note": "x", "eventId": "id", "eventType": "t.v1",
                                "occurredAt": "2026-12-07T00:00:00.000000Z" })
        );
        assert_eq!(sent, before);
        // A schema that needs the envelope's fields sees them.
        let schema = serde_json::json!({ "type": "object", "required": ["eventId", "occurredAt"] });
        let policy = EmitPolicy::new([("out", ["t.v1".to_owned()].as_slice(), &schema)]).unwrap_or_default();
        let provenance = vec![("idem.correlation-id".to_owned(), uuid::Uuid::now_v7().to_string())];
        let emits = EmitCapability::new(Arc::new(policy), 16, 64 << 10, Some(provenance));
        let accepted = emits.accept(message(r#"{"amount": 3}"#, &[])).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(serde_json::Value::Object(accepted.payload), serde_json::json!({ "amount": 3 }));
    }

    #[test]
    fn a_payload_key_that_is_or_looks_like_an_envelope_field_is_refused() {
        let near_misses = [
            ("eventId", "eventId"),
            ("EventId", "eventId"),
            ("eventId ", "eventId"),
            (" eventId", "eventId"),
            ("event_id", "eventId"),
            ("eventid", "eventId"),
            ("EVENT-ID", "eventId"),
            ("event.id", "eventId"),
            ("event\u{200b}Id", "eventId"),
            ("\u{435}ventId", "eventId"),
            ("\u{ff45}\u{ff56}\u{ff45}\u{ff4e}\u{ff54}\u{ff29}\u{ff44}", "eventId"),
            ("Event Type", "eventType"),
            ("event_type", "eventType"),
            ("occurred_at", "occurredAt"),
            ("OccurredAt\t", "occurredAt"),
            ("\u{3bf}ccurredAt", "occurredAt"),
        ];
        for (key, field) in near_misses {
            assert_eq!(envelope_like(&payload(key)), Some((key, field)), "{key:?}");
        }
        for fine in ["eventIds", "event", "id", "type", "sourceEventId", "occurred", "prénom", "orderId"] {
            assert_eq!(envelope_like(&payload(fine)), None, "{fine:?}");
        }
        // Only the top level is the envelope's.
        let nested = serde_json::json!({ "inner": { "eventId": "x" } });
        assert_eq!(envelope_like(nested.as_object().unwrap_or(&serde_json::Map::new())), None);
    }

    #[test]
    fn a_header_name_that_is_or_looks_like_the_hosts_is_refused() {
        let hosts = [
            "idem.correlation-id",
            "Idem.Correlation-Id",
            "IDEM.causation-id",
            "idem_correlation_id",
            "idem-producer",
            "idem",
            "idemx",
            "Idempotency-Key",
            " idem.x",
            "traceparent",
            "TraceParent",
            "traceparent ",
            "trace-parent",
            "trace_state",
            "tracestate",
            "\u{456}dem.correlation-id",
            "\u{ff49}dem.x",
            "trace\u{200b}parent",
        ];
        for name in hosts {
            let why = refused_header(name).unwrap_or_else(|| panic!("{name:?} is accepted"));
            assert!(why.contains("is the host's or looks like it"), "{name:?}: {why}");
        }
        for name in ["x tenant", "x-tenant\n", "x-t\u{e9}nant", "x\u{0430}", "x:y", "x\"y", "(x)"] {
            let why = refused_header(name).unwrap_or_else(|| panic!("{name:?} is accepted"));
            assert!(why.contains("visible ASCII"), "{name:?}: {why}");
        }
        assert!(refused_header("").is_some());
        for fine in ["x-tenant", "X-Tenant", "content-type", "trace-id", "tenant_id", "a!#$%&'*+-.^_`|~z", "ide"] {
            assert_eq!(refused_header(fine), None, "{fine:?}");
        }
    }

    #[test]
    fn emit_refuses_near_misses_with_their_names_and_accepts_the_rest() {
        let cap = capability();
        match cap.accept(message(r#"{"amount": 1, "EventId": "019a0000-0000-7000-8000-000000000001"}"#, &[])) {
            Err(EmitError::Invalid(why)) => assert!(why.starts_with("`EventId` is the host's `eventId`"), "{why}"),
            other => panic!("{other:?}"),
        }
        match cap.accept(message(r#"{"amount": 1}"#, &[("Idem.Correlation-Id", "x")])) {
            Err(EmitError::Refused(why)) => {
                assert!(why.starts_with("header `Idem.Correlation-Id` is the host's"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        match cap.accept(message(r#"{"amount": 1}"#, &[("traceparent ", "x")])) {
            Err(EmitError::Refused(why)) => assert!(why.starts_with("header `traceparent ` is the host's"), "{why}"),
            other => panic!("{other:?}"),
        }
        let accepted = cap.accept(message(r#"{"amount": 1, "eventIds": []}"#, &[("x-tenant", "eu")]));
        let accepted = accepted.unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(accepted.headers.get("x-tenant"), Some(&serde_json::Value::from("eu")));
        assert!(accepted.headers.contains_key("idem.correlation-id"), "the host's provenance added");
    }
}
