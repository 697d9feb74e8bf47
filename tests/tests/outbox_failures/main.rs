//! The outbox relay when the broker will not take a row (README, "The
//! outbox", *Guarantees and their limits* and *Operations*), through the
//! `idem run` binary on the real broker and PostgreSQL: a row refused for
//! good is failed and holds nothing back, a topic in an outage waits while
//! the others go on, retention deletes published rows only, the emit caps,
//! the relay's metrics, and a producer broken for good made anew. Three
//! tests need a fault the suite's single Apache Kafka broker cannot give
//! (a topic not authorised, one topic's partition without a leader, a
//! fatal producer error) and run on a librdkafka mock cluster of their own
//! (`mock.rs`); the others on Apache Kafka.

#![expect(clippy::expect_used, reason = "test helpers state their expectations with expect, like the tests")]

mod fatal;
mod held;
mod limits;
mod metrics;
mod mock;
mod refused;
mod retention;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use idem_tests::db::TestDb;
use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;

/// A test's database, fake provider, broker and input topic (one
/// partition).
struct Env {
    db: TestDb,
    provider: PaymentProvider,
    brokers: String,
    topic: String,
    producer: kafka::Producer,
}

impl Env {
    /// On Apache Kafka (`KAFKA_BROKERS`).
    async fn new() -> Self {
        idem_tests::init_logging();
        let db = TestDb::new().await.unwrap_or_else(|e| panic!("test database: {e:#}"));
        let provider = PaymentProvider::start().await;
        let topic = kafka::create_topic(1).await;
        Self { db, provider, brokers: kafka::brokers(), topic, producer: kafka::producer() }
    }

    /// On `mock`, the handler's dead-letter topic made ahead (the mock
    /// cluster has no CreateTopics for idem to make it).
    async fn on_mock(mock: &mock::Mock) -> Self {
        idem_tests::init_logging();
        let db = TestDb::new().await.unwrap_or_else(|e| panic!("test database: {e:#}"));
        let provider = PaymentProvider::start().await;
        let topic = mock.topic();
        mock.create(&format!("{topic}.scenarios.dlq"));
        Self { db, provider, brokers: mock.servers.clone(), topic, producer: mock.producer() }
    }

    /// The config of a host running `spec` on this test's broker, its
    /// outbox rights recorded as `idem migrate` records them.
    async fn config(&self, spec: HandlerSpec) -> PathBuf {
        let config = host::write_config_for(&self.brokers, &self.db.url, &[spec]);
        self.db.allow_emits(&config).await;
        config
    }

    /// The scenarios handler, one attempt per event, allowed to emit
    /// `test.emitted.v1` to each of `outs`.
    fn emitter(&self, outs: &[&str]) -> HandlerSpec {
        let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("guests/scenarios/emitted.schema.json");
        let spec = HandlerSpec { max_attempts: 1, ..HandlerSpec::scenarios(&self.topic, &self.provider.base_url()) };
        outs.iter().fold(spec, |spec, out| spec.emitting(out, &["test.emitted.v1"], schema.clone()))
    }

    /// Sends an `emit` scenario emitting `emits` in order; its event id.
    async fn emit(&self, emits: Vec<serde_json::Value>) -> uuid::Uuid {
        let (id, payload) = scenario("emit", serde_json::json!({ "emits": emits }));
        kafka::produce(&self.producer, &self.topic, 0, "k", &payload).await;
        id
    }

    /// The outbox's rows, in id order.
    async fn rows(&self) -> Vec<Row> {
        sqlx::query_as(
            "SELECT id, topic, key, published_at IS NOT NULL AS published, failed_at IS NOT NULL AS failed, failure \
             FROM idem.outbox ORDER BY id",
        )
        .fetch_all(&self.db.pool)
        .await
        .expect("outbox rows")
    }

    /// The guest's notes of `event`: `emitted <n> <id>` / `refused <n> <why>`.
    async fn notes(&self, event: uuid::Uuid) -> Vec<String> {
        sqlx::query_scalar("SELECT note FROM scenario.effect WHERE event_id = $1 AND note <> 'start' ORDER BY note")
            .bind(event)
            .fetch_all(&self.db.pool)
            .await
            .expect("notes")
    }

    async fn finish(self) {
        self.db.drop_database().await;
    }
}

/// An outbox row as the tests look at it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
struct Row {
    id: i64,
    topic: String,
    key: String,
    published: bool,
    failed: bool,
    failure: Option<String>,
}

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

/// One `emit` entry of a scenario: `test.emitted.v1` with `amount`, padded
/// with `pad` bytes of `x` (a field the topic's schema allows).
fn emit(topic: &str, key: &str, amount: i64, pad: usize) -> serde_json::Value {
    let payload = if pad == 0 {
        serde_json::json!({ "amount": amount })
    } else {
        serde_json::json!({ "amount": amount, "pad": "x".repeat(pad) })
    };
    serde_json::json!({ "topic": topic, "key": key, "event_type": "test.emitted.v1", "payload": payload })
}

/// Appends `text` (TOML tables) to the config at `path`.
fn append_config(path: &Path, text: &str) {
    let mut config = std::fs::read_to_string(path).expect("config");
    config.push('\n');
    config.push_str(text);
    std::fs::write(path, config).expect("config written");
}

/// `idem run` as a child process, its log (JSON lines, info and worse)
/// kept in a file beside its config for the test to read.
struct Host {
    child: Child,
    log: PathBuf,
}

impl Host {
    fn start(config: &Path) -> Self {
        Self::start_with(config, &[])
    }

    fn start_with(config: &Path, env: &[(&str, &str)]) -> Self {
        let log = config.with_file_name(format!("idem-{}.log", idem_tests::unique_name("run")));
        let file = std::fs::File::create(&log).expect("log file");
        let mut command = Command::new(idem_tests::idem_bin());
        command
            .arg("run")
            .arg("--config")
            .arg(config)
            .stdout(Stdio::piped())
            .stderr(file)
            .env("IDEM_LOG", "info,rdkafka=warn")
            .env("IDEM_LOG_FORMAT", "json")
            // It exits if this test process dies first.
            .env("IDEM_TEST_PARENT_PID", std::process::id().to_string());
        for (name, value) in env {
            command.env(name, value);
        }
        let child = command.spawn().unwrap_or_else(|e| panic!("spawn {}: {e}", idem_tests::idem_bin().display()));
        Self { child, log }
    }

    /// Its log lines so far, parsed.
    fn log(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    /// The messages of its log lines at `level` that contain `text`.
    fn logged(&self, level: &str, text: &str) -> Vec<String> {
        self.log()
            .iter()
            .filter(|l| l["level"] == level)
            .filter_map(|l| l["message"].as_str().map(str::to_owned))
            .filter(|m| m.contains(text))
            .collect()
    }

    /// SIGTERM, then its exit within its shutdown timeout (10 s) and 30 s;
    /// the report it printed.
    fn stop(self) -> Vec<idem::stats::HandlerReport> {
        host::signal(&self.child, "TERM");
        let deadline = Instant::now() + Duration::from_secs(40);
        let (status, stdout) = idem_tests::wait_within(self.child, "idem run after SIGTERM (allowed 40 s)", deadline);
        assert!(status.success(), "a clean stop: {status}; its log: {}", self.log.display());
        String::from_utf8_lossy(&stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find_map(|v| serde_json::from_value(v["handlers"].clone()).ok())
            .expect("the report line")
    }
}

/// Polls `check` every 100 ms until it answers `Ok`, for at most
/// `within`; panics naming `what` and the last state it answered.
async fn wait_for<T, F: std::future::Future<Output = Result<T, String>>>(
    what: &str,
    within: Duration,
    check: impl Fn() -> F,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match check().await {
            Ok(found) => return found,
            Err(state) => assert!(Instant::now() < deadline, "not within {within:?}: {what}; last: {state}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the outbox's rows satisfy `done`; returns them.
async fn wait_rows(env: &Env, what: &str, done: impl Fn(&[Row]) -> bool) -> Vec<Row> {
    let last = std::sync::Mutex::new(Vec::new());
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let rows = env.rows().await;
            if done(&rows) {
                return rows;
            }
            *last.lock().expect("last") = rows;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("not within 60 s: {what}; the outbox: {:#?}", last.lock().expect("last")))
}

/// The value of `name{producer="<producer>"}` in `/metrics` lines.
fn metric(lines: &[String], name: &str, producer: &str) -> Option<f64> {
    let prefix = format!("{name}{{producer=\"{producer}\"}} ");
    lines.iter().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok())
}
