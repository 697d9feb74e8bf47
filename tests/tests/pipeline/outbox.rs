//! The transactional outbox on the real broker: what a handler emits is
//! published once its event commits, never when it rolls back, with the
//! envelope and provenance the host sets; what the guest may not do; the
//! SQL producer of another application; the relay's lease.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;
use rdkafka::Message as _;

use super::Env;
use super::failures::scenario;

fn emitted_schema() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("guests/scenarios/emitted.schema.json")
}

/// The scenarios handler allowed to emit `test.emitted.v1` to `out`.
fn emitter(env: &Env, out: &str) -> HandlerSpec {
    HandlerSpec { max_attempts: 1, ..HandlerSpec::scenarios(&env.topic, &env.provider.base_url()) }.emitting(
        out,
        &["test.emitted.v1"],
        emitted_schema(),
    )
}

/// One `emit` entry of a scenario's payload.
fn emit(topic: &str, key: &str, payload: serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "topic": topic, "key": key, "event_type": "test.emitted.v1", "payload": payload })
}

/// Every record of `topic` once `n` are there (at most 60 s).
fn published(topic: &str, n: usize) -> Vec<rdkafka::message::OwnedMessage> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let records = kafka::read_all(topic);
        if records.len() >= n || Instant::now() > deadline {
            return records;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn header(record: &rdkafka::message::OwnedMessage, name: &str) -> Option<String> {
    idem::pipeline::replay::header(record, name)
}

fn value(record: &rdkafka::message::OwnedMessage) -> serde_json::Value {
    serde_json::from_slice(record.payload().unwrap_or_default()).unwrap_or_default()
}

/// The guest's notes: `emitted <n> <id>` / `refused <n> <why>`, by event.
async fn notes(env: &Env, event: uuid::Uuid) -> Vec<String> {
    sqlx::query_scalar("SELECT note FROM scenario.effect WHERE event_id = $1 AND note <> 'start' ORDER BY note")
        .bind(event)
        .fetch_all(&env.db.pool)
        .await
        .unwrap_or_else(|e| panic!("notes: {e}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_event_emitted_is_published_once_after_its_commit_and_never_when_it_rolls_back() {
    let env = Env::new(1).await;
    let out = kafka::create_topic(2).await;
    let one = serde_json::json!({ "emits": [
        { "topic": out, "key": "k1", "event_type": "test.emitted.v1", "payload": { "amount": 1 },
          "headers": [["x-note", "hello"]] }
    ]});
    let (first, first_payload) = scenario("emit", one);
    let (failed, failed_payload) = scenario(
        "emit-then-fail",
        serde_json::json!({ "emits": [emit(&out, "k9", serde_json::json!({ "amount": 9 }))] }),
    );
    let two = serde_json::json!({ "emits": [
        emit(&out, "k2", serde_json::json!({ "amount": 2 })), emit(&out, "k3", serde_json::json!({ "amount": 3 }))
    ]});
    let (second, second_payload) = scenario("emit", two);
    for payload in [&first_payload, &failed_payload, &second_payload] {
        env.send(0, payload).await;
    }
    let spec = emitter(&env, &out);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    env.db.allow_emits(&config).await;
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.dead_lettered), (2, 1), "{r:?}");

    let records = published(&out, 3);
    assert_eq!(records.len(), 3, "three events emitted by committed events, none by the failed one");
    let ids: Vec<String> = [notes(&env, first).await, notes(&env, second).await]
        .concat()
        .iter()
        .map(|n| n.rsplit(' ').next().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(ids.len(), 3, "the guest was told three event ids");
    assert!(notes(&env, failed).await.is_empty(), "the failed event's writes rolled back");
    for record in &records {
        let v = value(record);
        let id = v["eventId"].as_str().unwrap_or_default().to_owned();
        assert!(ids.contains(&id), "published {id}, which the guest was told: {ids:?}");
        let parsed = uuid::Uuid::parse_str(&id).unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(parsed.get_version_num(), 7, "a UUID v7 eventId");
        assert_eq!(v["eventType"], "test.emitted.v1");
        assert!(chrono::DateTime::parse_from_rfc3339(v["occurredAt"].as_str().unwrap_or_default()).is_ok(), "{v}");
        let key = String::from_utf8_lossy(record.key().unwrap_or_default()).into_owned();
        let cause = if key == "k1" { first } else { second };
        assert_eq!(header(record, "idem.causation-id"), Some(cause.to_string()), "caused by its source event");
        assert_eq!(header(record, "idem.correlation-id"), Some(cause.to_string()), "a chain's first event");
        assert_eq!(header(record, "idem.producer").as_deref(), Some("scenarios"));
        assert_eq!(v["amount"].as_i64(), key.strip_prefix('k').and_then(|n| n.parse().ok()), "{v}");
        if key == "k1" {
            assert_eq!(header(record, "x-note").as_deref(), Some("hello"), "the guest's own header");
        }
    }
    let unpublished =
        env.count("SELECT count(*) FROM idem.outbox WHERE published_at IS NULL OR failed_at IS NOT NULL").await;
    assert_eq!((env.count("SELECT count(*) FROM idem.outbox").await, unpublished), (3, 0), "marked published");
    env.finish().await;
}
