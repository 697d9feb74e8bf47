//! The host's view of one event: what validation extracted from a Kafka
//! record, and what the guest receives.

use uuid::Uuid;

use crate::wit::types;

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
    /// [`payload_hash`] of the payload: kept with the claim, it tells a
    /// duplicate from an event id reused for another payload.
    pub payload_sha256: [u8; 32],
    /// The record's value as it arrived, when the payload was decoded from
    /// it (a registry format); `None`: the payload is the value. What a
    /// handler reads through the `origin` import.
    pub origin: Option<Origin>,
}

/// A framed record's value, byte for byte, and its writer schema's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub value: std::sync::Arc<[u8]>,
    pub schema_id: u32,
}

/// SHA-256 of the payload's canonical JSON: object keys sorted, no
/// insignificant whitespace, numbers and strings as serde_json writes them.
/// A producer that re-serialises the same event (another key order,
/// another indentation) sends the same hash; any change of a value does not.
pub fn payload_hash(payload: &serde_json::Value) -> [u8; 32] {
    use sha2::Digest as _;
    let mut hasher = Hashing(sha2::Sha256::new());
    canonical(payload, &mut hasher);
    hasher.0.finalize().into()
}

/// The hasher as an `io::Write`, so that keys and scalars are serialised
/// into it as serde_json writes them, without a string each.
struct Hashing(sha2::Sha256);

impl std::io::Write for Hashing {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        sha2::Digest::update(&mut self.0, bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Hashing {
    fn update(&mut self, bytes: &[u8]) {
        sha2::Digest::update(&mut self.0, bytes);
    }

    /// `value` as `value.to_string()` would have it (writing into a hasher
    /// cannot fail, nor can serialising a JSON value or a string).
    fn serialised(&mut self, value: &(impl serde::Serialize + ?Sized)) {
        let _ = serde_json::to_writer(&mut *self, value);
    }
}

fn canonical(value: &serde_json::Value, out: &mut Hashing) {
    use serde_json::Value;
    match value {
        // serde_json's map is a BTreeMap here, its keys in order already;
        // sorted again only if a feature (`preserve_order`) changed that.
        Value::Object(map) if map.keys().is_sorted() => members(map.iter(), out),
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by_key(|(key, _)| *key);
            members(entries.into_iter(), out);
        }
        Value::Array(items) => {
            out.update(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.update(b",");
                }
                canonical(item, out);
            }
            out.update(b"]");
        }
        scalar => out.serialised(scalar),
    }
}

/// An object's `members`, in the order given, as `{"k":v,...}`.
fn members<'a>(members: impl Iterator<Item = (&'a String, &'a serde_json::Value)>, out: &mut Hashing) {
    out.update(b"{");
    for (i, (key, value)) in members.enumerate() {
        if i > 0 {
            out.update(b",");
        }
        out.serialised(key.as_str());
        out.update(b":");
        canonical(value, out);
    }
    out.update(b"}");
}

impl Event {
    /// When its id was created: the first 48 bits of a UUID v7 (which
    /// validation requires), in milliseconds since the epoch.
    pub fn created_at(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        created_at(&self.id)
    }

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

/// When a UUID v7 was created (`None` for another version).
pub fn created_at(id: &Uuid) -> Option<chrono::DateTime<chrono::Utc>> {
    if id.get_version_num() != 7 {
        return None;
    }
    let b = id.as_bytes();
    let ms = b[..6].iter().fold(0i64, |acc, byte| (acc << 8) | i64::from(*byte));
    chrono::DateTime::from_timestamp_millis(ms)
}

#[cfg(test)]
mod tests {
    use super::payload_hash;

    #[test]
    fn the_hash_ignores_key_order_and_whitespace_but_not_values() {
        let a: serde_json::Value = serde_json::from_str(r#"{"b": [1, {"y": 2, "x": 1}], "a": "s"}"#).expect("json");
        let b: serde_json::Value = serde_json::from_str(r#"{"a":"s","b":[1,{"x":1,"y":2}]}"#).expect("json");
        let c: serde_json::Value = serde_json::from_str(r#"{"a":"s","b":[1,{"x":1,"y":3}]}"#).expect("json");
        assert_eq!(payload_hash(&a), payload_hash(&b));
        assert_ne!(payload_hash(&a), payload_hash(&c));
    }

    /// The hash is kept in dedup rows: the same payload must hash to the
    /// same bytes across releases (pinned from the release before the
    /// hash stopped allocating per key and scalar, issue 46).
    #[test]
    fn the_hash_of_a_payload_is_what_earlier_releases_stored() {
        let payload: serde_json::Value = serde_json::from_str(
            r#"{"eventId":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","n":-1.5e300,"big":18446744073709551615,
                "s":"é\u0000\"\\\n\u001f/<>","t":true,"f":false,"z":null,"a":[[],{},[1,2.25]],
                "nested":{"k\"ey":{"\u00e9":1}}}"#,
        )
        .expect("json");
        let hex: String = payload_hash(&payload).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "5e56829b2971392d0ffac9be959b02638b7ea102cca7cd08e988617fb081b3de");
    }
}
