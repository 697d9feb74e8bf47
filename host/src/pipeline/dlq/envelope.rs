//! What the DLQ holds for a record the topic refused as it is (too large,
//! say): a bounded description, under 1.4 KiB (about 2 KiB with idem's
//! headers), so that even a topic with a small `max.message.bytes`
//! takes it. The record itself may still be on the source topic at the
//! offset named (until that topic's retention deletes it).

use sha2::{Digest as _, Sha256};

use crate::validate::Record;

/// Bytes of the value (and of the key) quoted, in hex.
const VALUE_PREFIX: usize = 256;
const KEY_PREFIX: usize = 64;

/// The envelope's value: JSON naming the record and why it was refused.
pub fn value(record: &Record, refusal: &str) -> Vec<u8> {
    let part = |bytes: Option<&Vec<u8>>, prefix: usize| match bytes {
        None => serde_json::Value::Null,
        Some(b) => serde_json::json!({
            "bytes": b.len(),
            "sha256": hex::encode(Sha256::digest(b)),
            "prefix_hex": hex::encode(&b[..b.len().min(prefix)]),
        }),
    };
    let header_bytes: usize = record.headers.iter().map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len)).sum();
    let refusal: String = refusal.chars().take(300).collect();
    let envelope = serde_json::json!({
        "idem_envelope": 1,
        "refused": refusal,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": part(record.key.as_ref(), KEY_PREFIX),
        "value": part(record.payload.as_ref(), VALUE_PREFIX),
        "headers": { "count": record.headers.len(), "bytes": header_bytes },
    });
    envelope.to_string().into_bytes()
}

#[cfg(test)]
mod tests {
    use crate::validate::Record;

    #[test]
    fn an_envelope_is_bounded_whatever_the_record_and_names_it() {
        let record = Record {
            topic: "orders".into(),
            partition: 3,
            offset: 42,
            key: Some(vec![b'k'; 100_000]),
            payload: Some(vec![b'{'; 5_000_000]),
            headers: vec![("h".repeat(10_000), Some(vec![0; 10_000])); 50],
            timestamp: Some(1),
        };
        let value = super::value(&record, &"why ".repeat(10_000));
        assert!(value.len() < 1_400, "{} bytes", value.len());
        let json: serde_json::Value = serde_json::from_slice(&value).expect("json");
        assert_eq!(
            (json["topic"].as_str(), json["partition"].as_i64(), json["offset"].as_i64()),
            (Some("orders"), Some(3), Some(42))
        );
        assert_eq!(json["value"]["bytes"], 5_000_000);
        assert_eq!(json["headers"]["count"], 50);
    }
}
