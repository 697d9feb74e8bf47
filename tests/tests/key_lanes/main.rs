//! `ordering = "key"` (key lanes) through the real `idem run` binary, on
//! the real broker and PostgreSQL: a crash's marks (`idem.batch_in_flight`,
//! a row per lane), an event that kills the host inside a key-lane batch,
//! and records without a Kafka key.

#![expect(clippy::expect_used, reason = "test helpers state their expectations with expect, like the tests")]

mod crash_marks;
mod keyless;
mod killer;

use std::time::Duration;

use idem_tests::db::TestDb;
use idem_tests::host::HandlerSpec;
use idem_tests::kafka;
use rdkafka::producer::{FutureProducer, FutureRecord};

/// The handler's name in the configs (`idem.batch_in_flight.consumer`).
const HANDLER: &str = "scenarios";

struct Env {
    db: TestDb,
    /// One partition: lanes are per partition.
    topic: String,
}

impl Env {
    async fn new() -> Self {
        idem_tests::init_logging();
        let db = TestDb::new().await.unwrap_or_else(|e| panic!("test database: {e:#}"));
        let topic = kafka::create_topic(1).await;
        Self { db, topic }
    }

    /// The `scenarios` test handler on the topic (its `lane` scenario
    /// needs no HTTP).
    fn scenarios(&self) -> HandlerSpec {
        HandlerSpec::scenarios(&self.topic, "http://127.0.0.1:9")
    }

    async fn count(&self, sql: &str) -> i64 {
        self.db.count(sql).await
    }

    /// The crash marks of this topic's partition, by lane.
    async fn marks(&self) -> Vec<Mark> {
        let rows: Vec<(i32, i64, i64)> = sqlx::query_as(
            "SELECT lane, first_offset, last_offset FROM idem.batch_in_flight \
             WHERE consumer = $1 AND topic = $2 AND \"partition\" = 0 ORDER BY lane",
        )
        .bind(HANDLER)
        .bind(&self.topic)
        .fetch_all(&self.db.pool)
        .await
        .expect("idem.batch_in_flight");
        rows.into_iter().map(|(lane, first, last)| Mark { lane: lane as usize, first, last }).collect()
    }

    /// `scenario.lane_log`, in the order the records began.
    async fn lane_log(&self) -> Vec<Ran> {
        let rows: Vec<(uuid::Uuid, String, i64, f64, Option<f64>, String)> = sqlx::query_as(
            "SELECT event_id, key, seq, extract(epoch FROM began)::float8, extract(epoch FROM ended)::float8, \
             xmin::text FROM scenario.lane_log ORDER BY began, id",
        )
        .fetch_all(&self.db.pool)
        .await
        .expect("lane log");
        rows.into_iter()
            .map(|(id, key, seq, began, ended, xmin)| Ran { id, key, seq, began, ended: ended.unwrap_or(began), xmin })
            .collect()
    }

    async fn finish(self) {
        self.db.drop_database().await;
    }
}

/// A row of `idem.batch_in_flight`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    lane: usize,
    first: i64,
    last: i64,
}

/// A row of `scenario.lane_log`: one record's committed run.
#[derive(Debug, Clone)]
struct Ran {
    id: uuid::Uuid,
    /// The Kafka key as the guest saw it ("" when the record has none).
    key: String,
    seq: i64,
    began: f64,
    ended: f64,
    /// The row's `xmin`: rows a batch wrote share it, a record run alone
    /// (a savepoint per statement) has its own.
    xmin: String,
}

impl Ran {
    fn overlaps(&self, other: &Ran) -> bool {
        self.began < other.ended && other.began < self.ended
    }
}

/// A record the test sent.
#[derive(Debug, Clone)]
struct Sent {
    id: uuid::Uuid,
    /// `None`: no Kafka key at all (not an empty one).
    key: Option<String>,
    seq: i64,
    offset: i64,
    payload: Vec<u8>,
}

/// A `test.scenario.v1` payload with a fresh event id.
fn scenario(name: &str, extra: serde_json::Value) -> (uuid::Uuid, Vec<u8>) {
    let id = uuid::Uuid::now_v7();
    let mut payload = serde_json::json!({
        "eventId": id.to_string(), "eventType": "test.scenario.v1",
        "occurredAt": "2026-11-30T12:00:00Z", "scenario": name,
    });
    if let (Some(p), Some(e)) = (payload.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    (id, payload.to_string().into_bytes())
}

/// Sends `records` (key, payload) to partition 0 in this order, at once,
/// and returns their offsets. A `None` key is a record without a key (the
/// harness's producer always sets one).
async fn send(topic: &str, records: &[(Option<String>, Vec<u8>)]) -> Vec<i64> {
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka::brokers())
        .set("enable.idempotence", "true")
        .set("linger.ms", "20")
        .create()
        .expect("producer");
    // One idempotent producer keeps a partition's records in the order sent.
    let sends = records.iter().map(|(key, payload)| {
        let mut record = FutureRecord::<str, [u8]>::to(topic).partition(0).payload(payload);
        if let Some(key) = key {
            record = record.key(key.as_str());
        }
        producer.send(record, Duration::from_secs(10))
    });
    futures::future::join_all(sends)
        .await
        .into_iter()
        .map(|r| r.unwrap_or_else(|(e, _)| panic!("produce to {topic}: {e}")).offset)
        .collect()
}

/// Sends `lane` scenario records (key, seq, more payload fields) in this
/// order and returns them with their offsets.
async fn send_lane_records(env: &Env, records: &[(Option<String>, i64, serde_json::Value)]) -> Vec<Sent> {
    let made: Vec<(uuid::Uuid, Option<String>, i64, Vec<u8>)> = records
        .iter()
        .map(|(key, seq, extra)| {
            let mut fields = serde_json::json!({ "seq": seq });
            if let (Some(f), Some(e)) = (fields.as_object_mut(), extra.as_object()) {
                f.extend(e.clone());
            }
            let (id, payload) = scenario("lane", fields);
            (id, key.clone(), *seq, payload)
        })
        .collect();
    let to_send: Vec<(Option<String>, Vec<u8>)> = made.iter().map(|(_, key, _, p)| (key.clone(), p.clone())).collect();
    let offsets = send(&env.topic, &to_send).await;
    made.into_iter()
        .zip(offsets)
        .map(|((id, key, seq, payload), offset)| Sent { id, key, seq, offset, payload })
        .collect()
}

/// `n` keys, each in a lane of its own out of `lanes` (under
/// `ordering = "key"`, `idem::config::key_lane`), none in `avoid`.
fn keys_in_distinct_lanes(lanes: usize, n: usize, avoid: &[usize]) -> Vec<(String, usize)> {
    let mut taken: Vec<usize> = avoid.to_vec();
    let mut keys = Vec::new();
    for key in (0..1000).map(|k| format!("customer-{k}")) {
        let lane = idem::config::key_lane(Some(key.as_bytes()), lanes);
        if !taken.contains(&lane) {
            taken.push(lane);
            keys.push((key, lane));
        }
        if keys.len() == n {
            return keys;
        }
    }
    panic!("no {n} keys in distinct lanes of {lanes} avoiding {avoid:?}");
}

/// The lane of a record with `key` (`None`: no key) among `lanes`.
fn lane_of(key: Option<&str>, lanes: usize) -> usize {
    idem::config::key_lane(key.map(str::as_bytes), lanes)
}

/// Runs `idem run` on `config` until it exits by itself (drained, or
/// crashed), with `env` set; its exit status and report.
async fn run_to_exit(
    config: &std::path::Path,
    env: &'static [(&'static str, &'static str)],
) -> (std::process::ExitStatus, Vec<idem::stats::HandlerReport>) {
    let config = config.to_path_buf();
    tokio::task::spawn_blocking(move || idem_tests::host::wait_report(idem_tests::host::spawn(&config, true, env)))
        .await
        .expect("wait for idem run")
}
