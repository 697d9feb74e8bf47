//! The schema registry the registry formats' tests use: the one
//! scripts/test starts (`IDEM_TEST_REGISTRY`, Apicurio Registry's
//! Confluent-compatible API: scripts/registry/registry), subjects made per
//! test, and records framed as producers' serializers frame them.

use idem::formats::{avro, frame};

/// The billing example's order as an Avro record (version 1): `occurredAt`
/// a `timestamp-millis`, an optional `note`.
pub const ORDER_V1: &str = r#"{"type":"record","name":"OrderConfirmed","namespace":"shop","fields":[
    {"name":"eventId","type":{"type":"string","logicalType":"uuid"}},
    {"name":"eventType","type":"string"},
    {"name":"occurredAt","type":{"type":"long","logicalType":"timestamp-millis"}},
    {"name":"aggregateType","type":"string"},
    {"name":"orderId","type":"long"},
    {"name":"customerId","type":"long"},
    {"name":"totalAmount","type":"double"},
    {"name":"currency","type":"string"},
    {"name":"note","type":["null","string"],"default":null}]}"#;

/// The billing example's order as a Protobuf message.
pub const ORDER_PROTO: &str = r#"syntax = "proto3";
package shop;
// int32 ids: the canonical JSON mapping writes 64-bit integers as strings,
// and the billing example reads numbers.
message OrderConfirmed {
  string event_id = 1;
  string event_type = 2;
  string occurred_at = 3;
  string aggregate_type = 4;
  int32 order_id = 5;
  int32 customer_id = 6;
  double total_amount = 7;
  string currency = 8;
}
"#;

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

/// A folder holding `name` with `text`: a handler's reader schema.
pub fn schema_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(crate::unique_name("idem_schema"));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("{name}: {e}"));
    dir.join(name)
}

/// Frames an order's JSON as a record of one registry format.
pub type Framer = Box<dyn Fn(&serde_json::Value) -> Vec<u8> + Send + Sync>;

/// The order schema of `format` (`avro` or `protobuf`) registered under
/// `subject` at `base`: the reader schema's file, and what frames an
/// order's JSON as a producer's serializer would.
pub async fn order_format(base: &str, format: &str, subject: &str) -> (std::path::PathBuf, Framer) {
    match format {
        "avro" => {
            let id = register(base, subject, "AVRO", ORDER_V1).await;
            let schema = avro::Schema::parse(ORDER_V1).unwrap_or_else(|e| panic!("the order's Avro schema: {e}"));
            (schema_file("order.avsc", ORDER_V1), Box::new(move |value| avro_record(&schema, id, value)))
        }
        "protobuf" => {
            let id = register(base, subject, "PROTOBUF", ORDER_PROTO).await;
            let file = schema_file("order.proto", ORDER_PROTO);
            let reader = idem::formats::protobuf::ProtoReader::load(&file, None)
                .unwrap_or_else(|e| panic!("the order's .proto: {e:#}"));
            let framer: Framer = Box::new(move |value| {
                let body = reader.encode(value).unwrap_or_else(|e| panic!("{value} as Protobuf: {e}"));
                frame::frame(id, Some(&[0]), &body)
            });
            (file, framer)
        }
        other => panic!("no order schema for format {other}"),
    }
}
