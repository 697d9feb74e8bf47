//! The schema registry the registry formats' tests use: the one
//! scripts/test starts (`IDEM_TEST_REGISTRY`, Apicurio Registry's
//! Confluent-compatible API: scripts/registry/registry), subjects made per
//! test, and records framed as producers' serializers frame them.

use idem::formats::{avro, frame};

/// The registry's base URL (…/apis/ccompat/v7).
pub fn url() -> String {
    std::env::var("IDEM_TEST_REGISTRY").unwrap_or_else(|_| {
        panic!("IDEM_TEST_REGISTRY is not set: scripts/test starts a registry (scripts/registry/registry start DIR)")
    })
}

/// Registers `schema` (`AVRO`, `PROTOBUF` or `JSON`) under `subject`, with
/// the subject's compatibility check off (the tests register incompatible
/// versions on purpose); returns its id.
pub async fn register(base: &str, subject: &str, kind: &str, schema: &str) -> u32 {
    let client = reqwest::Client::new();
    let config = client
        .put(format!("{base}/config/{subject}"))
        .json(&serde_json::json!({"compatibility": "NONE"}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("the registry at {base}: {e}"));
    assert!(config.status().is_success(), "PUT /config/{subject}: {}", config.status());
    let answer = client
        .post(format!("{base}/subjects/{subject}/versions"))
        .json(&serde_json::json!({"schema": schema, "schemaType": kind}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("the registry at {base}: {e}"));
    let status = answer.status();
    let body: serde_json::Value = answer.json().await.unwrap_or_default();
    assert!(status.is_success(), "registering under {subject}: {status} {body}");
    body["id"].as_u64().and_then(|id| u32::try_from(id).ok()).unwrap_or_else(|| panic!("no id in {body}"))
}

/// `value` as an Avro record of `schema`, framed for schema `id`.
pub fn avro_record(schema: &avro::Schema, id: u32, value: &serde_json::Value) -> Vec<u8> {
    let body = avro::encode::encode(schema, value).unwrap_or_else(|e| panic!("{value} as Avro: {e}"));
    frame::frame(id, None, &body)
}

/// An order (as `host::order_payload` has it) with `fields` changed: the
/// JSON the registry formats' records are encoded from.
pub fn order(order_id: i64, fields: &[(&str, serde_json::Value)]) -> (uuid::Uuid, serde_json::Value) {
    let (id, payload) = crate::host::order_payload(order_id);
    let mut value: serde_json::Value = serde_json::from_slice(&payload).unwrap_or_default();
    for (name, v) in fields {
        value[*name] = v.clone();
    }
    (id, value)
}
