use serde::de::DeserializeOwned;

use crate::bindings::idem::handler::types;
use crate::db::{ToValue, Value};
use crate::error::Error;

/// The event being handled. Its payload has already been validated by the
/// host against the handler's JSON Schema.
#[derive(Debug, Clone)]
pub struct Event {
    raw: types::Event,
}

/// An event's id: a UUID v7 in text form. Binds as a `uuid` parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventId<'a>(&'a str);

impl EventId<'_> {
    pub fn as_str(&self) -> &str {
        self.0
    }
}

impl std::fmt::Display for EventId<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl ToValue for EventId<'_> {
    fn to_value(&self) -> Value {
        Value::Uuid(self.0.to_owned())
    }
}

impl From<types::Event> for Event {
    fn from(raw: types::Event) -> Self {
        Self { raw }
    }
}

impl Event {
    /// The payload's `eventId`, the key the host deduplicates on.
    pub fn id(&self) -> EventId<'_> {
        EventId(&self.raw.id)
    }

    /// Deserializes the payload. A payload that does not fit `T` is a
    /// permanent error: retrying would not change it.
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_str(&self.raw.payload)
            .map_err(|e| Error::permanent(format!("payload does not fit the handler's type: {e}")))
    }

    /// The payload as JSON text.
    pub fn payload_text(&self) -> &str {
        &self.raw.payload
    }

    /// The record's value as its producer wrote it: on an Avro, Protobuf
    /// or JSON Schema topic the registry's frame (magic byte, schema id,
    /// body) the payload was decoded from; on a JSON topic the payload's
    /// bytes, which are the value. Asked of the host on each call.
    pub fn value_bytes(&self) -> Vec<u8> {
        crate::origin::value().unwrap_or_else(|| self.raw.payload.as_bytes().to_vec())
    }

    /// The registry's id of the schema the record was written with
    /// (`None` on a JSON topic).
    pub fn schema_id(&self) -> Option<u32> {
        crate::origin::schema_id()
    }

    pub fn event_type(&self) -> &str {
        &self.raw.event_type
    }

    /// The payload's `occurredAt`, RFC 3339.
    pub fn occurred_at(&self) -> &str {
        &self.raw.occurred_at
    }

    pub fn topic(&self) -> &str {
        &self.raw.topic
    }

    pub fn partition(&self) -> i32 {
        self.raw.partition
    }

    pub fn offset(&self) -> i64 {
        self.raw.offset
    }

    pub fn key(&self) -> Option<&[u8]> {
        self.raw.key.as_deref()
    }

    /// The first header called `name`, if any.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.raw.headers.iter().find(|h| h.name == name).and_then(|h| h.value.as_deref())
    }

    /// 1 on the first execution, then 2, 3, … Never part of an idempotency key.
    pub fn attempt(&self) -> u32 {
        self.raw.attempt
    }
}
