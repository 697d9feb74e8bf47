//! Publish events from a handler, exactly once per commit of the event
//! that emits them (the transactional outbox).
//!
//! An emitted event is written to the host's outbox in the same transaction
//! as everything else the handler does: if the handler fails, nothing is
//! published; once the transaction commits, the host publishes it to Kafka
//! (at least once, with the same `eventId`, so consumers deduplicate it), a
//! key's events in the order their transactions committed.
//!
//! ```no_run
//! # fn handle(event: &idem_guest::Event, order_id: i64) -> idem_guest::Result {
//! use idem_guest::emit;
//!
//! let id = emit::event("payments.requested", "payment.requested.v1")
//!     .key(order_id.to_string())
//!     .json(&serde_json::json!({ "orderId": order_id, "amount": 42.5 }))?
//!     .send()?;
//! # let _ = id; Ok(())
//! # }
//! ```
//!
//! The topic and event type must be configured for the handler
//! (`[[handler.emit]]`), and the payload must pass the topic's JSON Schema;
//! the host adds `eventId` (a fresh UUID v7), `eventType` and `occurredAt`
//! to it, and the headers `idem.causation-id` (this event's id),
//! `idem.correlation-id` and `traceparent`.

use std::fmt;

use crate::bindings::idem::handler::emit as wit;
use crate::error::Error;

/// An event being built; nothing is written until [`Emit::send`].
#[derive(Debug, Clone)]
pub struct Emit {
    message: wit::Message,
}

/// Starts an event of `event_type` on `topic`.
pub fn event(topic: impl Into<String>, event_type: impl Into<String>) -> Emit {
    Emit {
        message: wit::Message {
            topic: topic.into(),
            key: String::new(),
            event_type: event_type.into(),
            payload: "{}".into(),
            headers: Vec::new(),
        },
    }
}

impl Emit {
    /// The record's key: the id of the aggregate the event is about.
    #[must_use]
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.message.key = key.into();
        self
    }

    /// The payload, a JSON object (serialised here).
    pub fn json<T: serde::Serialize + ?Sized>(mut self, payload: &T) -> Result<Self, Error> {
        self.message.payload = serde_json::to_string(payload)?;
        Ok(self)
    }

    /// A header of the record.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.message.headers.push((name.into(), value.into()));
        self
    }

    /// Accepts the event for publishing once this event's transaction
    /// commits; returns the `eventId` it will carry.
    pub fn send(self) -> Result<String, EmitError> {
        wit::send(&self.message).map_err(EmitError::from)
    }
}

/// Why an event was not accepted. Both are permanent through `?`: the
/// handler's configuration or code must change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmitError {
    /// Not allowed: the topic, the event type, a header, or a cap.
    Refused(String),
    /// The payload is not a JSON object, or fails the topic's schema.
    Invalid(String),
}

impl From<wit::EmitError> for EmitError {
    fn from(e: wit::EmitError) -> Self {
        match e {
            wit::EmitError::Refused(m) => Self::Refused(m),
            wit::EmitError::Invalid(m) => Self::Invalid(m),
        }
    }
}

impl fmt::Display for EmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused(m) => write!(f, "emit refused: {m}"),
            Self::Invalid(m) => write!(f, "emit invalid: {m}"),
        }
    }
}

impl std::error::Error for EmitError {}

impl From<EmitError> for Error {
    fn from(e: EmitError) -> Self {
        Error::permanent(e.to_string())
    }
}
