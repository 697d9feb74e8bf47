//! The host re-sends a guest's request after a transient failure (README,
//! "Transient failures are re-sent by the host"), through `idem run` on the
//! real broker and PostgreSQL, against a scripted provider: resets
//! mid-body, 429/502/503/504, refused connections, safe methods without a
//! key, and re-sends that spend none of the guest's `max_http_requests`.
//!
//! Every handler here has `[handler.retry] max_attempts = 1`: a failure
//! that reached the guest would dead-letter its event at once instead of
//! being retried by the pipeline, so an event processed at its only
//! attempt was saved by the host's own re-sends. And each event is a
//! transaction of its own (`[handler.batch] max_events = 1`): a failure in
//! a batch re-runs the events before it, which repeats their requests, and
//! the provider would count those sends too.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use idem::stats::HandlerReport;
use idem_tests::db::TestDb;
use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;
use prometheus_parse::{Scrape, Value};

mod budget;
mod connections;
mod provider;
mod safe;
mod statuses;

/// The log message of a re-send (`capabilities/http`, at debug).
const RESENT: &str = "a transient failure: the request is sent again";

struct Env {
    db: TestDb,
    topic: String,
    producer: kafka::Producer,
}

impl Env {
    async fn new() -> Self {
        idem_tests::init_logging();
        let db = TestDb::new().await.unwrap_or_else(|e| panic!("test database: {e:#}"));
        let topic = kafka::create_topic(1).await;
        Self { db, topic, producer: kafka::producer() }
    }

    /// `spec` with no pipeline retry and one event per transaction, written with `more` TOML appended
    /// (tables of its `[[handler]]`: `[handler.limits]`, `[handler.http.retry]`).
    fn config(&self, mut spec: HandlerSpec, more: &str) -> (HandlerSpec, PathBuf) {
        spec.max_attempts = 1;
        spec.batch = Some((1, 5));
        let path = host::write_config(&self.db.url, std::slice::from_ref(&spec));
        let mut text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("config: {e}"));
        text.push_str(more);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("config: {e}"));
        (spec, path)
    }

    /// Sends `payloads` to partition 0, in order.
    async fn send(&self, payloads: &[&[u8]]) {
        for payload in payloads {
            kafka::produce(&self.producer, &self.topic, 0, "k", payload).await;
        }
    }

    /// The event ids `billing.charge` holds, sorted.
    async fn charged_events(&self) -> Vec<uuid::Uuid> {
        sqlx::query_scalar("SELECT event_id FROM billing.charge ORDER BY event_id")
            .fetch_all(&self.db.pool)
            .await
            .unwrap_or_else(|e| panic!("billing.charge: {e}"))
    }

    async fn count(&self, sql: &str) -> i64 {
        self.db.count(sql).await
    }

    async fn finish(self) {
        self.db.drop_database().await;
    }
}

/// `idem run` as a child, its stderr (JSON logs) kept.
struct Running {
    child: Child,
    config: PathBuf,
    logs: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl Running {
    /// Starts `idem run --config config`, logging warnings and the HTTP
    /// capability's debug lines (each re-send) as JSON.
    fn start(config: &Path) -> Self {
        let mut child = Command::new(idem_tests::idem_bin())
            .arg("run")
            .arg("--config")
            .arg(config)
            .env("IDEM_LOG", "warn,idem::capabilities::http=debug")
            .env("IDEM_LOG_FORMAT", "json")
            .env("IDEM_TEST_PARENT_PID", std::process::id().to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", idem_tests::idem_bin().display()));
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (stderr, kept) = (child.stderr.take(), logs.clone());
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr?).lines().map_while(Result::ok) {
                eprintln!("{line}");
                if let Ok(value) = serde_json::from_str(&line) {
                    kept.lock().unwrap_or_else(|e| e.into_inner()).push(value);
                }
            }
            Some(())
        });
        Self { child, config: config.to_path_buf(), logs }
    }

    /// The reasons of the re-sends logged so far, in order.
    fn resend_reasons(&self) -> Vec<String> {
        let logs = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        logs.iter()
            .filter(|l| l["message"] == RESENT)
            .map(|l| l["reason"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Whether a line with `message` was logged.
    fn logged(&self, message: &str) -> bool {
        self.logs.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|l| l["message"] == message)
    }

    /// Waits until `spec`'s group has committed `offset` on partition 0
    /// (every record before it resolved), then scrapes `/metrics`.
    async fn resolved(&self, spec: &HandlerSpec, offset: i64) -> Scrape {
        let (group, topic) = (spec.group_id.clone(), spec.topic.clone());
        idem_tests::wait_until_async(&format!("{group} committed offset {offset} of {topic}"), || {
            let (group, topic) = (group.clone(), topic.clone());
            async move {
                let committed = tokio::task::spawn_blocking(move || kafka::committed(&group, &topic, 1)).await;
                committed.is_ok_and(|c| c == vec![Some(offset)])
            }
        })
        .await;
        let lines = host::metrics(&self.config).await;
        assert!(!lines.is_empty(), "/metrics of {} answered nothing", self.config.display());
        let text = lines.join("\n");
        Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap_or_else(|e| panic!("a Prometheus scrape: {e}"))
    }

    /// SIGTERMs the host; its exit status must be success, and its report
    /// is returned.
    async fn stop(self) -> HandlerReport {
        host::signal(&self.child, "TERM");
        let child = self.child;
        let (status, reports) =
            tokio::task::spawn_blocking(move || host::wait_report(child)).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(status.success(), "idem run exited {status}");
        reports.into_iter().next().unwrap_or_else(|| panic!("idem run printed no report"))
    }
}

/// The value of the sample `name` whose labels include `labels` (0 when
/// there is none: a counter never incremented is not rendered).
fn metric(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .and_then(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(*v),
            Value::Histogram(_) | Value::Summary(_) => None,
        })
        .unwrap_or(0.0)
}

/// `idem_http_retries_total` of `handler` for `reason`.
fn retries(scrape: &Scrape, handler: &str, reason: &str) -> f64 {
    metric(scrape, "idem_http_retries_total", &[("handler", handler), ("reason", reason)])
}

/// A `test.scenario.v1` payload for the scenarios guest.
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
