//! The host's view of one event: what validation extracted from a Kafka
//! record, and what the guest receives.

use uuid::Uuid;

use crate::runtime::bindings::types;

/// A validated event: its payload is JSON and carries these fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The payload's `eventId`, a UUID v7: the dedup key.
    pub id: Uuid,
    pub event_type: String,
    pub occurred_at: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// The whole payload, JSON text.
    pub payload: String,
}

impl Event {
    pub(crate) fn to_wit(&self, attempt: u32) -> types::Event {
        types::Event {
            id: self.id.hyphenated().to_string(),
            event_type: self.event_type.clone(),
            occurred_at: self.occurred_at.clone(),
            topic: self.topic.clone(),
            partition: self.partition,
            offset: self.offset,
            key: self.key.clone(),
            headers: self
                .headers
                .iter()
                .map(|(name, value)| types::Header { name: name.clone(), value: value.clone() })
                .collect(),
            payload: self.payload.clone(),
            attempt,
        }
    }
}
