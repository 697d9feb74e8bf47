//! The registry formats (issue 43, docs/formats.md) on real Kafka,
//! PostgreSQL and a real schema registry (Apicurio Registry, started by
//! scripts/test): the billing example's own component, unchanged, charging
//! Avro and Protobuf orders once each through redeliveries and schema
//! evolution; a registry outage waited out while another handler runs on;
//! hostile bytes dead-lettered
//! with their reasons while the partition flows.

use std::path::{Path, PathBuf};
use std::time::Duration;

use idem::formats::avro;
use idem::pipeline::dlq_headers as h;
use idem_tests::host::HandlerSpec;
use idem_tests::registry::{self, ORDER_PROTO, ORDER_V1, avro_record, order, schema_file};
use idem_tests::{host, kafka};
use serde_json::json;

use super::{CHARGES, DISTINCT_ORDERS, Env};

/// v1 evolved compatibly: a field added with a default, the optional `note` removed.
const ORDER_V2: &str = r#"{"type":"record","name":"OrderConfirmed","namespace":"shop","fields":[
    {"name":"eventId","type":{"type":"string","logicalType":"uuid"}},
    {"name":"eventType","type":"string"},
    {"name":"occurredAt","type":{"type":"long","logicalType":"timestamp-millis"}},
    {"name":"aggregateType","type":"string"},
    {"name":"orderId","type":"long"},
    {"name":"customerId","type":"long"},
    {"name":"totalAmount","type":"double"},
    {"name":"currency","type":"string"},
    {"name":"channel","type":"string","default":"web"}]}"#;

/// The billing handler reading `format` with reader schema `schema`, and
/// the config file (with `[registry] url = registry`).
fn config(env: &Env, format: &str, schema: PathBuf, registry: &str) -> (host::HandlerSpec, PathBuf) {
    let mut spec = env.billing();
    spec.schema = schema;
    spec.extra.push_str(&format!("format = \"{format}\"\n"));
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    append_registry(&config, registry);
    (spec, config)
}

fn append_registry(config: &Path, url: &str) {
    let mut text = std::fs::read_to_string(config).expect("the config");
    text.push_str(&format!("\n[registry]\nurl = \"{url}\"\ntimeout_ms = 1000\n"));
    std::fs::write(config, text).expect("the config");
}

fn reason(m: &rdkafka::message::OwnedMessage) -> String {
    let headers = rdkafka::Message::headers(m).expect("headers");
    let found = rdkafka::message::Headers::iter(headers).find(|x| x.key == h::REASON);
    String::from_utf8_lossy(found.and_then(|x| x.value).unwrap_or_default()).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn avro_orders_across_a_schema_evolution_are_charged_once_each_and_an_incompatible_version_is_dead_lettered() {
    let env = Env::new(6).await;
    let base = registry::url();
    let subject = format!("{}-value", env.topic);
    let v1 = avro::Schema::parse(ORDER_V1).expect("v1");
    let v2 = avro::Schema::parse(ORDER_V2).expect("v2");
    let (id1, id2) = (
        registry::register(&base, &subject, "AVRO", ORDER_V1).await,
        registry::register(&base, &subject, "AVRO", ORDER_V2).await,
    );
    // v3 changes a type the reader reads: incompatible.
    let v3_text =
        ORDER_V2.replace(r#""name":"totalAmount","type":"double""#, r#""name":"totalAmount","type":"string""#);
    let v3 = avro::Schema::parse(&v3_text).expect("v3");
    let id3 = registry::register(&base, &subject, "AVRO", &v3_text).await;
    assert!(id1 != id2 && id2 != id3, "three schemas, three ids");

    // 3,000 orders: the first half written with v1, the rest with v2 (the
    // producer upgraded mid-stream), 30% of them redelivered; among them,
    // five written with v3.
    let mut records: Vec<(i32, Vec<u8>)> = Vec::new();
    for i in 0..3_000_i64 {
        let (_, mut value) = order(i + 1, &[("occurredAt", json!("2026-12-06T01:00:00.000Z"))]);
        let bytes = if i < 1_500 {
            value["note"] = json!("ring twice");
            avro_record(&v1, id1, &value)
        } else {
            avro_record(&v2, id2, &value)
        };
        let partition = (i % 6) as i32;
        records.push((partition, bytes.clone()));
        if i % 10 < 3 {
            records.push(((partition + 1) % 6, bytes));
        }
    }
    for i in 0..5_i64 {
        let (_, mut value) = order(10_000 + i, &[("occurredAt", json!("2026-12-06T01:00:00.000Z"))]);
        value["totalAmount"] = json!("12.50");
        records.push(((i % 6) as i32, avro_record(&v3, id3, &value)));
    }
    kafka::produce_all(&env.producer, &env.topic, &records).await;

    let (spec, config) = config(&env, "avro", schema_file("order.avsc", ORDER_V1), &base);
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.duplicates, r.invalid), (3_000, 900, 5), "{r:?}");
    assert_eq!(env.count(CHARGES).await, 3_000);
    assert_eq!(env.count(DISTINCT_ORDERS).await, 3_000, "no order charged twice");
    assert_eq!(env.provider.charges(), 3_000, "the provider saw each order's key once");
    let mut ids: Vec<Option<String>> =
        sqlx::query_scalar("SELECT event_id::text FROM idem.processed_event WHERE consumer = 'billing'")
            .fetch_all(&env.db.pool)
            .await
            .expect("processed");
    let mut keys = env.provider.keys();
    ids.sort();
    keys.sort();
    assert_eq!(keys, ids, "the provider's idempotency keys are the event ids, each once");
    let dead = kafka::read_all(&format!("{}.billing.dlq", env.topic));
    assert_eq!(dead.len(), 5, "the v3 records, and nothing else");
    for m in &dead {
        let why = reason(m);
        assert!(why.contains(&format!("schema id {id3}")) && why.contains("totalAmount"), "{why}");
        let original: Vec<u8> = rdkafka::Message::payload(m).expect("payload").to_vec();
        assert!(records.iter().any(|(_, bytes)| *bytes == original), "dead-lettered byte for byte");
    }
    let ends: Vec<Option<i64>> = kafka::high_watermarks(&env.topic, 6).into_iter().map(Some).collect();
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 6), ends);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn protobuf_orders_across_a_schema_evolution_are_charged_once_each_by_the_same_handler() {
    let env = Env::new(3).await;
    let base = registry::url();
    let subject = format!("{}-value", env.topic);
    let id = registry::register(&base, &subject, "PROTOBUF", ORDER_PROTO).await;
    let reader_file = schema_file("order.proto", ORDER_PROTO);
    let reader = idem::formats::protobuf::ProtoReader::load(&reader_file, None).expect("compiles");
    // v2, compatible: a field added, one removed (its number reserved).
    let v2_text = ORDER_PROTO
        .replace("string aggregate_type = 4;", "reserved 4;")
        .replace("string currency = 8;", "string currency = 8;\n  string channel = 9;");
    let id2 = registry::register(&base, &subject, "PROTOBUF", &v2_text).await;
    let v2 = idem::formats::protobuf::ProtoWriter::compile(&v2_text, &[]).expect("v2 compiles");
    let v3_text = ORDER_PROTO.replace("double total_amount = 7;", "string total_amount = 7;");
    let id3 = registry::register(&base, &subject, "PROTOBUF", &v3_text).await;

    // The first half written with v1, the rest with v2 (the producer
    // upgraded mid-stream), 30% of them redelivered.
    let mut records = Vec::new();
    for i in 0..3_000_i64 {
        let (_, mut value) = order(i + 1, &[]);
        let bytes = if i < 1_500 {
            idem::formats::frame::frame(id, Some(&[0]), &reader.encode(&value).expect("encodes"))
        } else {
            value.as_object_mut().expect("an object").remove("aggregateType");
            value["channel"] = json!("web");
            let (indexes, body) = v2.encode("OrderConfirmed", &value).expect("encodes with v2");
            idem::formats::frame::frame(id2, Some(&indexes), &body)
        };
        records.push(((i % 3) as i32, bytes.clone()));
        if i % 10 < 3 {
            records.push((((i + 1) % 3) as i32, bytes));
        }
    }
    let (_, value) = order(9_999, &[]);
    let v3_body = reader.encode(&value).expect("encodes");
    records.push((0, idem::formats::frame::frame(id3, Some(&[0]), &v3_body)));
    kafka::produce_all(&env.producer, &env.topic, &records).await;

    let (_, config) = config(&env, "protobuf", reader_file, &base);
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.duplicates, r.invalid), (3_000, 900, 1), "{r:?}");
    assert_eq!(env.count(DISTINCT_ORDERS).await, 3_000);
    assert_eq!(env.provider.charges(), 3_000);
    let dead = kafka::read_all(&format!("{}.billing.dlq", env.topic));
    let why = reason(&dead[0]);
    assert!(why.contains(&format!("schema id {id3}")) && why.contains("shop.OrderConfirmed.total_amount"), "{why}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_that_does_not_answer_holds_new_schemas_records_and_loses_nothing() {
    let env = Env::new(2).await;
    let base = registry::url();
    let subject = format!("{}-value", env.topic);
    let v1 = avro::Schema::parse(ORDER_V1).expect("v1");
    let v2 = avro::Schema::parse(ORDER_V2).expect("v2");
    let id1 = registry::register(&base, &subject, "AVRO", ORDER_V1).await;
    let id2 = registry::register(&base, &subject, "AVRO", ORDER_V2).await;
    // The host reaches the registry through a proxy the test cuts.
    let mut url = reqwest::Url::parse(&base).expect("url");
    let target = tokio::net::lookup_host((url.host_str().expect("host"), url.port().expect("port")))
        .await
        .ok()
        .and_then(|mut a| a.next())
        .expect("the registry's address");
    let proxy = idem_tests::proxy::Proxy::start(target).await;
    url.set_port(Some(proxy.addr.port())).expect("port");

    let stamp = [("occurredAt", json!("2026-12-06T01:00:00.000Z"))];
    let first: Vec<(i32, Vec<u8>)> =
        (0..200).map(|i| ((i % 2) as i32, avro_record(&v1, id1, &order(i + 1, &stamp).1))).collect();
    kafka::produce_all(&env.producer, &env.topic, &first).await;
    // Beside it, a JSON handler on a topic of its own, which the registry's
    // outage must not hold up.
    let notices = kafka::create_topic(1).await;
    let mut billing = env.billing();
    billing.schema = schema_file("order.avsc", ORDER_V1);
    billing.extra.push_str("format = \"avro\"\n");
    let config = host::write_config(&env.db.url, &[billing, HandlerSpec::notification(&notices)]);
    append_registry(&config, url.as_str());
    let admin = host::admin_url(&config);
    // Not `exit_when_drained`: the host would end once v1's records are
    // done. It runs until every order is charged.
    let outage = async {
        env.charged(200, Duration::from_secs(60)).await;
        // Cut: the producer's new schema (v2) cannot be fetched.
        proxy.cut();
        let second: Vec<(i32, Vec<u8>)> =
            (200..400).map(|i| ((i % 2) as i32, avro_record(&v2, id2, &order(i + 1, &stamp).1))).collect();
        kafka::produce_all(&env.producer, &env.topic, &second).await;
        let json_orders: Vec<(i32, Vec<u8>)> = (0..50).map(|i| (0, host::order_payload(5_000 + i).1)).collect();
        kafka::produce_all(&env.producer, &notices, &json_orders).await;
        let since = std::time::Instant::now();
        idem_tests::wait_until_async("the other handler runs through the registry's outage", || async {
            env.count("SELECT count(*) FROM notification.sent").await >= 50
        })
        .await;
        assert!(since.elapsed() < Duration::from_secs(20), "not held up: {:?}", since.elapsed());
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(env.count(CHARGES).await, 200, "nothing of v2 ran while the registry was away");
        let ready = reqwest::get(format!("{admin}/readyz")).await.expect("the admin listener");
        let status = ready.status().as_u16();
        let why = ready.text().await.unwrap_or_default();
        assert!(status == 503 && why.contains("schema registry does not answer"), "/readyz: {status} {why}");
        let metrics = reqwest::get(format!("{admin}/metrics")).await.expect("metrics").text().await.unwrap_or_default();
        assert!(metrics.lines().any(|l| l.starts_with("idem_registry_waiting{") && !l.ends_with(" 0")), "{metrics}");
        let dead = kafka::read_all(&format!("{}.billing.dlq", env.topic));
        assert!(dead.is_empty(), "nothing dead-lettered for the registry's outage");
        proxy.restore();
        env.charged(400, Duration::from_secs(60)).await;
    };
    let reports = host::run_in_process(&config, false, outage).await;
    let r = &reports[0];
    assert_eq!((r.processed, r.invalid, r.dead_lettered), (400, 0, 0), "{r:?}");
    assert_eq!(env.count(DISTINCT_ORDERS).await, 400);
    assert_eq!(env.provider.charges(), 400);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_avro_bytes_are_dead_lettered_with_their_reasons_and_the_partition_flows() {
    let env = Env::new(1).await;
    let base = registry::url();
    let v1 = avro::Schema::parse(ORDER_V1).expect("v1");
    let id = registry::register(&base, &format!("{}-value", env.topic), "AVRO", ORDER_V1).await;
    let stamp = [("occurredAt", json!("2026-12-06T01:00:00.000Z"))];
    let good = |n: i64| avro_record(&v1, id, &order(n, &stamp).1);
    let body = |n: i64| good(n)[5..].to_vec();
    let framed = |schema: i32, body: &[u8]| {
        let mut out = vec![0];
        out.extend_from_slice(&schema.to_be_bytes());
        out.extend_from_slice(body);
        out
    };
    let id = i32::try_from(id).expect("an id");
    // The eventId's length, then 36 bytes: one of them not UTF-8.
    let mut bad_utf8 = body(90);
    bad_utf8[5] = 0xff;
    let mut huge_length = vec![0xfe, 0xff, 0xff, 0xff, 0x0f]; // a string of 2^31-1 bytes
    huge_length.extend_from_slice(b"short");
    // A writer whose first field (which the reader lacks) is a tree of any
    // depth: a record 500,000 levels deep, refused at the bound while skipped.
    let tree = ORDER_V1.replacen(
        r#""fields":["#,
        r#""fields":[{"name":"tree","type":["null",{"type":"record","name":"Node","fields":[{"name":"child","type":["null","Node"]}]}]},"#,
        1,
    );
    let deep_id = registry::register(&base, &format!("{}-tree-value", env.topic), "AVRO", &tree).await;
    let deep_id = i32::try_from(deep_id).expect("an id");
    let hostile: Vec<(&str, Vec<u8>)> = vec![
        ("nest deeper than 128 levels", framed(deep_id, &vec![2u8; 500_000])),
        ("schema id 2147483000 is not in the schema registry", framed(2_147_483_000, &body(91))),
        ("schema id 0 is not a positive number", framed(0, &body(92))),
        ("schema id -5 is not a positive number", framed(-5, &body(93))),
        ("not the magic byte 0", [vec![1], body(94)].concat()),
        ("too short for a schema id", vec![0, 0, 1]),
        ("longer than 10 bytes", framed(id, &[0xff; 12])),
        ("bytes are needed where", framed(id, &huge_length)),
        ("not UTF-8", framed(id, &bad_utf8)),
        ("left after the record", [good(95), vec![0]].concat()),
        ("cut short", good(96)[..20].to_vec()),
    ];
    let mut records = Vec::new();
    for (i, (_, bytes)) in hostile.iter().enumerate() {
        records.push((0, good(i as i64 + 1)));
        records.push((0, bytes.clone()));
    }
    records.push((0, good(50)));
    kafka::produce_all(&env.producer, &env.topic, &records).await;
    let (_, config) = config(&env, "avro", schema_file("order.avsc", ORDER_V1), &base);
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.invalid, r.dead_lettered), (12, 11, 11), "{r:?}");
    let dead = kafka::read_all(&format!("{}.billing.dlq", env.topic));
    assert_eq!(dead.len(), hostile.len());
    for (m, (expected, bytes)) in dead.iter().zip(&hostile) {
        let why = reason(m);
        assert!(why.contains(expected), "expected `{expected}` in {why}");
        assert_eq!(rdkafka::Message::payload(m).unwrap_or_default(), bytes.as_slice(), "byte for byte");
    }
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn json_schema_framed_orders_are_checked_against_the_readers_json_schema() {
    let env = Env::new(1).await;
    let base = registry::url();
    let reader = env.billing().schema;
    let text = std::fs::read_to_string(&reader).expect("billing's schema");
    let id = registry::register(&base, &format!("{}-value", env.topic), "JSON", &text).await;
    let frame = |value: &serde_json::Value| idem::formats::frame::frame(id, None, value.to_string().as_bytes());
    let mut records: Vec<(i32, Vec<u8>)> = (0..100).map(|i| (0, frame(&order(i + 1, &[]).1))).collect();
    // Framed, but violating the reader's schema (billing's currencies are codes).
    records.push((0, frame(&order(500, &[("currency", json!("euro"))]).1)));
    // JSON without the frame.
    records.push((0, order(501, &[]).1.to_string().into_bytes()));
    kafka::produce_all(&env.producer, &env.topic, &records).await;
    let (_, config) = config(&env, "json-schema", reader, &base);
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.invalid), (100, 2), "{r:?}");
    let dead = kafka::read_all(&format!("{}.billing.dlq", env.topic));
    let reasons: Vec<String> = dead.iter().map(reason).collect();
    assert!(reasons[0].contains("violates the schema") && reasons[0].contains("currency"), "{reasons:?}");
    assert!(reasons[1].contains("not the magic byte 0"), "{reasons:?}");
    env.finish().await;
}

/// `idem check --config`: its exit status and what it printed.
fn idem_check(config: &Path) -> (bool, String) {
    let out = std::process::Command::new(idem_tests::idem_bin())
        .args(["check", "--config", config.to_str().unwrap_or_default()])
        .output()
        .unwrap_or_else(|e| panic!("run idem: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_contract_check_refuses_a_reader_that_cannot_read_a_registered_version() {
    let env = Env::new(1).await;
    let base = registry::url();
    let subject = format!("{}-value", env.topic);
    registry::register(&base, &subject, "AVRO", ORDER_V1).await;
    registry::register(&base, &subject, "AVRO", ORDER_V2).await;
    let (_, lenient) = config(&env, "avro", schema_file("order.avsc", ORDER_V1), &base);
    let (ok, out) = idem_check(&lenient);
    assert!(ok, "v1 reads v1 and v2: {out}");

    // A reader that needs a field v1 lacks, without a default: v1 is unreadable.
    let strict =
        ORDER_V2.replace(r#""name":"channel","type":"string","default":"web""#, r#""name":"channel","type":"string""#);
    let (_, strict_config) = config(&env, "avro", schema_file("order.avsc", &strict), &base);
    let (ok, out) = idem_check(&strict_config);
    assert!(!ok && out.contains("version 1") && out.contains("channel"), "{out}");

    let v3 = ORDER_V2.replace(r#""name":"totalAmount","type":"double""#, r#""name":"totalAmount","type":"string""#);
    let id3 = registry::register(&base, &subject, "AVRO", &v3).await;
    let (ok, out) = idem_check(&lenient);
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!("schema id {id3}")) && out.contains("field `shop.OrderConfirmed.totalAmount`"),
        "{out}"
    );
    assert!(!out.contains("version 1 ") && !out.contains("version 2 "), "v1 and v2 still read: {out}");

    // A schema met on the topic that is no version of the subject (written
    // under another subject): once a host has met it, the check reads it too.
    let stray_text = ORDER_V1.replace(r#""name":"orderId","type":"long""#, r#""name":"orderId","type":"string""#);
    let stray = registry::register(&base, &format!("{}-stray-value", env.topic), "AVRO", &stray_text).await;
    let (_, before) = idem_check(&lenient);
    assert!(!before.contains(&format!("schema id {stray}")), "not met yet: {before}");
    let mut value = order(1, &[("occurredAt", json!("2026-12-06T01:00:00.000Z"))]).1;
    value["orderId"] = json!("one");
    let framed = avro_record(&avro::Schema::parse(&stray_text).expect("stray"), stray, &value);
    kafka::produce_all(&env.producer, &env.topic, &[(0, framed)]).await;
    host::run_until_drained(&lenient).await;
    let (ok, out) = idem_check(&lenient);
    assert!(!ok && out.contains(&format!("schema id {stray}, seen on the topic")) && out.contains("orderId"), "{out}");

    // `idem deploy` to a running host runs the same check: refused, naming
    // the id and the field, and nothing stored.
    let running = host::InProcess::start(&lenient);
    let admin = host::admin_url(&lenient);
    idem_tests::wait_until_async("the admin API answers", || async {
        crate::operate::get(&admin, "/healthz").await.is_some()
    })
    .await;
    let component = idem_tests::guests::component("billing");
    let out = std::process::Command::new(idem_tests::idem_bin())
        .args(["deploy", "--handler", "billing", component.to_str().expect("path"), "--url", &admin])
        .output()
        .expect("idem deploy");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("contract check failed") && said.contains(&format!("schema id {id3}")), "{said}");
    assert!(said.contains("totalAmount"), "{said}");
    let stored = env.count("SELECT count(*) FROM idem.handler_module WHERE handler = 'billing'").await;
    running.stop().await;
    assert_eq!(stored, 1, "nothing stored but the version the host started with");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn idem_test_encodes_json_events_with_the_reader_schema_or_a_registered_version() {
    let env = Env::new(1).await;
    let base = registry::url();
    let subject = format!("{}-value", env.topic);
    let id2 = registry::register(&base, &subject, "AVRO", ORDER_V2).await;
    let (_, config) = config(&env, "avro", schema_file("order.avsc", ORDER_V1), &base);
    let stamp = [("occurredAt", json!("2026-12-06T01:00:00.000Z"))];
    let mut no_amount = order(3, &stamp).1;
    no_amount.as_object_mut().expect("an object").remove("totalAmount");
    // And a record as it is on the topic: written with v2, framed.
    let v2 = avro::Schema::parse(ORDER_V2).expect("v2");
    let framed = avro_record(&v2, id2, &order(4, &stamp).1);
    let raw = format!("base64:{}", base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &framed));
    let lines = [order(1, &stamp).1.to_string(), order(2, &stamp).1.to_string(), no_amount.to_string(), raw];
    let events = std::env::temp_dir().join(format!("{}.jsonl", idem_tests::unique_name("events")));
    std::fs::write(&events, lines.join("\n")).expect("events file");
    let run = |extra: &[&str]| {
        let mut args = vec!["test", "--config", config.to_str().unwrap_or_default(), "--handler", "billing"];
        args.extend_from_slice(extra);
        args.push(events.to_str().unwrap_or_default());
        let out = std::process::Command::new(idem_tests::idem_bin()).args(&args).output().expect("idem test");
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    };
    // With the reader schema (no registry needed): two orders charged, the
    // third cannot be an Avro `OrderConfirmed` at all.
    let (ok, out) = run(&[]);
    assert!(!ok, "{out}");
    assert_eq!(out.matches("order.confirmed.v1: processed").count(), 3, "lines 1, 2 and the framed 4: {out}");
    assert!(out.contains("line 3: invalid") && out.contains("no field `totalAmount`"), "{out}");
    // With v2 as the writer: resolved to the reader's v1 on the way in.
    let (_, out) = run(&["--schema-id", &id2.to_string()]);
    assert_eq!(out.matches("order.confirmed.v1: processed").count(), 3, "{out}");
    let (ok, out) = run(&["--schema-id", "987654"]);
    assert!(!ok && out.contains("schema id 987654 is not in the registry"), "{out}");
    env.finish().await;
}

const PAYMENT_REQUESTED: &str = r#"{"type":"record","name":"PaymentRequested","namespace":"payments","fields":[
    {"name":"eventId","type":"string"},
    {"name":"eventType","type":"string"},
    {"name":"occurredAt","type":"string"},
    {"name":"orderId","type":"long"},
    {"name":"amount","type":"double"},
    {"name":"currency","type":"string"}]}"#;

/// Billing emitting to `requests` as Avro (with `more` lines in its emit
/// table), payments reading them: the config, its emits allowed.
async fn avro_chain(env: &Env, base: &str, requests: &str, more: &str) -> PathBuf {
    let billing = host::HandlerSpec::billing_announcing(&env.topic, &env.provider.base_url(), requests);
    let mut payments = host::HandlerSpec::payments(requests);
    payments.schema = schema_file("payment-requested.avsc", PAYMENT_REQUESTED);
    payments.extra.push_str("format = \"avro\"\n");
    let config = host::write_config(&env.db.url, &[billing, payments]);
    let text = std::fs::read_to_string(&config).expect("the config");
    let emit = format!("[[handler.emit]]\ntopic = \"{requests}\"\n");
    assert!(text.contains(&emit), "billing emits to {requests}");
    std::fs::write(&config, text.replace(&emit, &format!("{emit}format = \"avro\"\n{more}"))).expect("the config");
    append_registry(&config, base);
    env.db.allow_emits(&config).await;
    config
}

/// Once `orders` are charged and two more seconds passed: the outbox's
/// failed and published rows.
async fn outbox_after_charges(env: &Env, orders: i64) -> (i64, i64) {
    idem_tests::wait_until_async("the orders are charged", || async { env.count(CHARGES).await >= orders }).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let failed = env.count("SELECT count(*) FROM idem.outbox WHERE failed_at IS NOT NULL").await;
    let published = env.count("SELECT count(*) FROM idem.outbox WHERE published_at IS NOT NULL").await;
    (failed, published)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_avro_outbox_chain_writes_and_reads_each_request_once() {
    let env = Env::new(2).await;
    let base = registry::url();
    let requests = kafka::create_topic(2).await;
    let config = avro_chain(&env, &base, &requests, "").await;
    env.send_orders(200).await;
    let running = host::spawn(&config, false, &[]);
    // The subject has no version yet: the requests wait (none failed)
    // until the producer team registers one.
    let (failed, published) = outbox_after_charges(&env, 200).await;
    let why: Vec<String> =
        sqlx::query_scalar("SELECT coalesce(failure, '') FROM idem.outbox WHERE failed_at IS NOT NULL LIMIT 3")
            .fetch_all(&env.db.pool)
            .await
            .unwrap_or_default();
    assert_eq!((failed, published), (0, 0), "held back while the subject has no version: {why:?}");
    let id = registry::register(&base, &format!("{requests}-value"), "AVRO", PAYMENT_REQUESTED).await;
    idem_tests::wait_until_async("every request is taken", || async {
        env.count("SELECT count(*) FROM payments.request").await >= 200
    })
    .await;
    host::signal(&running, "TERM");
    let (status, _) = tokio::task::spawn_blocking(move || host::wait_report(running)).await.expect("the host");
    assert!(status.success(), "{status}");
    assert_eq!(env.count("SELECT count(DISTINCT order_id) FROM payments.request").await, 200, "each request once");
    let written = kafka::read_all(&requests);
    assert_eq!(written.len(), 200);
    for m in &written {
        let payload = rdkafka::Message::payload(m).expect("a payload");
        assert_eq!(payload[0], 0, "framed");
        assert_eq!(
            u32::from_be_bytes([payload[1], payload[2], payload[3], payload[4]]),
            id,
            "with the subject's schema"
        );
    }
    env.finish().await;
}

/// The scenarios handler's events as Avro: the envelope and the scenario.
const SCENARIO_AVRO: &str = r#"{"type":"record","name":"Scenario","namespace":"test","fields":[
    {"name":"eventId","type":{"type":"string","logicalType":"uuid"}},
    {"name":"eventType","type":"string"},
    {"name":"occurredAt","type":"string"},
    {"name":"scenario","type":"string"}]}"#;

/// The notes the `origin` scenario wrote, by event: `origin <schema id or -> <hex>`.
async fn origins(env: &Env) -> Vec<(uuid::Uuid, String)> {
    sqlx::query_as("SELECT event_id, note FROM scenario.effect WHERE note LIKE 'origin %' ORDER BY event_id")
        .fetch_all(&env.db.pool)
        .await
        .expect("notes")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_reads_each_records_value_as_its_producer_wrote_it_framed_or_json() {
    let env = Env::new(1).await;
    let base = registry::url();
    let schema = avro::Schema::parse(SCENARIO_AVRO).expect("schema");
    let id = registry::register(&base, &format!("{}-value", env.topic), "AVRO", SCENARIO_AVRO).await;
    let mut sent: Vec<(uuid::Uuid, Vec<u8>)> = Vec::new();
    for _ in 0..5 {
        let (event_id, json) = super::failures::scenario("origin", json!({}));
        let value: serde_json::Value = serde_json::from_slice(&json).expect("json");
        let bytes = registry::avro_record(&schema, id, &value);
        env.send(0, &bytes).await;
        sent.push((event_id, bytes));
    }
    let mut spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    spec.schema = schema_file("scenario.avsc", SCENARIO_AVRO);
    spec.extra.push_str("format = \"avro\"\n");
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    append_registry(&config, &base);
    assert_eq!(host::run_until_drained(&config).await[0].processed, 5);
    sent.sort();
    let framed: Vec<(uuid::Uuid, String)> =
        sent.iter().map(|(event, bytes)| (*event, format!("origin {id} {}", hex::encode(bytes)))).collect();
    assert_eq!(origins(&env).await, framed, "each handler saw its record's frame, byte for byte, and its schema id");

    // A JSON topic's value is the payload: the same call answers its bytes.
    let topic = kafka::create_topic(1).await;
    let (event_id, json) = super::failures::scenario("origin", json!({ "note": "é \u{1F600}" }));
    let spaced = format!(" {} ", String::from_utf8(json).expect("utf-8")).into_bytes();
    kafka::produce(&env.producer, &topic, 0, "k", &spaced).await;
    let spec = HandlerSpec::scenarios(&topic, &env.provider.base_url());
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    assert_eq!(host::run_until_drained(&config).await[0].processed, 1);
    let json_note = origins(&env).await.into_iter().find(|(e, _)| *e == event_id);
    assert_eq!(json_note, Some((event_id, format!("origin - {}", hex::encode(&spaced)))));
    env.finish().await;
}

/// Sets `subject`'s compatibility rule at the registry.
async fn compatibility(base: &str, subject: &str, rule: &str) {
    let answer = reqwest::Client::new()
        .put(format!("{base}/config/{subject}"))
        .json(&json!({ "compatibility": rule }))
        .send()
        .await
        .expect("the registry");
    assert!(answer.status().is_success(), "PUT /config/{subject}: {}", answer.status());
}

/// `[[handler.emit]] register`: idem registers the topic's schema itself
/// and writes with the id the registry gave; while the registry refuses
/// it (the subject's compatibility rule), the rows wait, none failed.
#[tokio::test(flavor = "multi_thread")]
async fn an_emit_topic_that_registers_its_schema_waits_while_refused_then_writes_with_the_id_given() {
    let env = Env::new(2).await;
    let base = registry::url();
    let requests = kafka::create_topic(2).await;
    let subject = format!("{requests}-value");
    // The subject holds another schema, and refuses what old readers cannot read.
    let other = r#"{"type":"record","name":"Other","namespace":"x","fields":[{"name":"x","type":"int"}]}"#;
    registry::register(&base, &subject, "AVRO", other).await;
    compatibility(&base, &subject, "FORWARD").await;
    let file = schema_file("payment.avsc", PAYMENT_REQUESTED);
    let config = avro_chain(&env, &base, &requests, &format!("register = \"{}\"\n", file.display())).await;
    env.send_orders(100).await;
    let running = host::spawn(&config, false, &[]);
    let (failed, published) = outbox_after_charges(&env, 100).await;
    assert_eq!((failed, published), (0, 0), "held while the registry refuses the schema");

    compatibility(&base, &subject, "NONE").await;
    idem_tests::wait_until_async("every request is taken", || async {
        env.count("SELECT count(*) FROM payments.request").await >= 100
    })
    .await;
    host::signal(&running, "TERM");
    let (status, _) = tokio::task::spawn_blocking(move || host::wait_report(running)).await.expect("the host");
    assert!(status.success(), "{status}");
    let latest: serde_json::Value = reqwest::get(format!("{base}/subjects/{subject}/versions/latest"))
        .await
        .expect("the registry")
        .json()
        .await
        .expect("json");
    let id = latest["id"].as_u64().expect("an id") as u32;
    let registered: serde_json::Value = serde_json::from_str(latest["schema"].as_str().expect("schema")).expect("avsc");
    assert_eq!(registered["name"], "PaymentRequested", "idem registered its file: {latest}");
    let written = kafka::read_all(&requests);
    assert_eq!(written.len(), 100);
    for m in &written {
        let payload = rdkafka::Message::payload(m).expect("a payload");
        assert_eq!(u32::from_be_bytes([payload[1], payload[2], payload[3], payload[4]]), id, "with the id given");
    }
    assert_eq!(env.count("SELECT count(DISTINCT order_id) FROM payments.request").await, 100, "each request once");

    // A schema file that does not compile is refused before anything runs.
    std::fs::write(&file, "{\"type\": \"record\"").expect("a broken schema");
    let out = std::process::Command::new(idem_tests::idem_bin())
        .args(["check", "--config", config.to_str().expect("path")])
        .output()
        .expect("idem check");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("register =") && said.contains("payment.avsc"), "{said}");
    env.finish().await;
}
