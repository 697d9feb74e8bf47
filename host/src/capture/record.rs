//! One captured event as it is stored and exported: the event as the
//! handler received it, what each statement and request got, what it
//! emitted and what it came to. `idem test --replay` reads the same form.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::capabilities::tape::{Bytes, Recorded};
use crate::event::Event;

/// A captured event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capture {
    pub handler: String,
    /// The module version that ran it (`None`: the handler's file).
    pub version: Option<i32>,
    /// When it ran, RFC 3339.
    pub captured_at: String,
    pub event: CapturedEvent,
    #[serde(flatten)]
    pub recorded: Recorded,
    pub emits: Vec<CapturedEmit>,
    pub outcome: Outcome,
}

/// The event as the handler received it (redacted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapturedEvent {
    pub id: Uuid,
    pub event_type: String,
    pub occurred_at: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    /// The payload's JSON text.
    pub payload: String,
}

/// One event the handler emitted (its provenance headers aside: they name
/// the run, not the handler's decision).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapturedEmit {
    pub topic: String,
    pub key: String,
    pub event_type: String,
    pub payload: serde_json::Map<String, serde_json::Value>,
}

/// What the event came to: `ok`, or the failure's class with its words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub result: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Outcome {
    pub fn ok() -> Self {
        Self { result: "ok".into(), message: None }
    }

    pub fn failed(error: &crate::error::ExecError) -> Self {
        Self { result: error.class().as_str().into(), message: Some(error.to_string()) }
    }

    /// Whether `other` is the same outcome: the same result, and for a
    /// handler's own failure the same words (a trap's words name code
    /// addresses, which any rebuild moves).
    pub fn same_as(&self, other: &Self) -> bool {
        let own = |o: &Self| o.message.as_deref().is_some_and(|m| m.starts_with("handler failed"));
        self.result == other.result && (!own(self) && !own(other) || self.message == other.message)
    }

    pub fn shown(&self) -> String {
        match &self.message {
            Some(m) => format!("{} ({})", self.result, crate::text::shown(m, 300)),
            None => self.result.clone(),
        }
    }
}

impl CapturedEvent {
    pub fn of(event: &Event) -> Self {
        Self {
            id: event.id,
            event_type: event.event_type.clone(),
            occurred_at: event.occurred_at.clone(),
            topic: event.topic.clone(),
            partition: event.partition,
            offset: event.offset,
            key: event.key.as_deref().map(Bytes::of),
            headers: event.headers.iter().map(|(n, v)| (n.clone(), v.as_deref().map(Bytes::of))).collect(),
            payload: event.payload.clone(),
        }
    }

    /// The event again, as a replay hands it to the handler (with no
    /// record value: a registry format's framed bytes are not kept).
    pub fn event(&self) -> Event {
        let json = serde_json::from_str(&self.payload).unwrap_or(serde_json::Value::Null);
        Event {
            id: self.id,
            event_type: self.event_type.clone(),
            occurred_at: self.occurred_at.clone(),
            topic: self.topic.clone(),
            partition: self.partition,
            offset: self.offset,
            key: self.key.as_ref().map(Bytes::bytes),
            headers: self.headers.iter().map(|(n, v)| (n.clone(), v.as_ref().map(Bytes::bytes))).collect(),
            payload: self.payload.clone(),
            payload_sha256: crate::event::payload_hash(&json),
            origin: None,
        }
    }
}

impl CapturedEmit {
    pub fn of(emitted: &crate::capabilities::emit::Emitted) -> Self {
        Self {
            topic: emitted.topic.clone(),
            key: emitted.key.clone(),
            event_type: emitted.event_type.clone(),
            payload: emitted.payload.clone(),
        }
    }
}
