//! The shared harness of idem's integration tests and benchmarks. It starts
//! or connects to the real services and builds the guest components itself:
//!
//! - [`db`]: a fresh PostgreSQL database per test, migrated, with the
//!   examples' tables (`DATABASE_URL` picks the server);
//! - [`guests`]: the example and test components, built for
//!   `wasm32-wasip2` on first use;
//! - [`provider`]: a local payment provider that deduplicates by
//!   `Idempotency-Key` and can misbehave on purpose;
//! - [`host`]: config files for `idem run`, in-process or as a child process;
//! - [`proxy`]: a TCP proxy to cut, for database outages;
//! - [`native`]: the billing example as a native handler (no wasm), which
//!   `idem-under-test` registers for the benchmark;
//! - [`kafka`]: the broker (Apache Kafka at `KAFKA_BROKERS`, or, for the
//!   `mock_faults` tests alone, librdkafka's mock cluster in this process),
//!   random topics, a producer that batches like real ones.

pub mod db;
pub mod guests;
pub mod host;
pub mod kafka;
pub mod native;
pub mod provider;
pub mod proxy;

use std::sync::Once;

/// Logs to the test's output (`IDEM_LOG` filters), once per process.
pub fn init_logging() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_env("IDEM_LOG").unwrap_or_else(|_| "warn".into());
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
    });
}

/// A random lowercase name with `prefix`, for databases and topics.
pub fn unique_name(prefix: &str) -> String {
    let id = uuid::Uuid::now_v7().simple().to_string();
    format!("{prefix}_{}", &id[id.len() - 12..])
}

/// A UUID v7 created at `ms` (milliseconds since the epoch), random
/// otherwise: an event id from the past or the future.
pub fn v7_at(ms: i64) -> uuid::Uuid {
    // The random tail of a fresh v7 (the builder sets version and variant).
    let fresh = *uuid::Uuid::now_v7().as_bytes();
    let mut tail = [0u8; 10];
    tail.copy_from_slice(&fresh[6..]);
    uuid::Builder::from_unix_timestamp_millis(u64::try_from(ms).unwrap_or(0), &tail).into_uuid()
}

/// A validated event as the pipeline hands it to the executor: `id`,
/// `payload` (its `eventType` and the id set), on `topic` at `offset`.
pub fn event(id: uuid::Uuid, mut payload: serde_json::Value, topic: &str, offset: i64) -> idem::Event {
    payload["eventId"] = serde_json::Value::String(id.to_string());
    idem::Event {
        id,
        event_type: payload["eventType"].as_str().unwrap_or_default().to_owned(),
        occurred_at: "2026-11-30T00:00:00Z".into(),
        topic: topic.to_owned(),
        partition: 0,
        offset,
        key: None,
        headers: vec![],
        payload_sha256: idem::event::payload_hash(&payload),
        payload: payload.to_string(),
    }
}

/// The binary [`idem_bin`] answers instead of the one next to the running
/// program, and whether it seals dead letters: the benchmark's comparison
/// runs an earlier build with it.
static IDEM_BIN: std::sync::RwLock<Option<(std::path::PathBuf, bool)>> = std::sync::RwLock::new(None);

/// From now on the harness spawns `path` as the `idem` command line
/// (`None`: the one built with this package again). `sealed: false`: a
/// build from before sealed dead letters, which refuses `[dlq] key_file`,
/// so the configs the harness writes leave it out.
pub fn use_idem_bin(path: Option<std::path::PathBuf>, sealed: bool) {
    *IDEM_BIN.write().unwrap_or_else(|e| e.into_inner()) = path.map(|p| (p, sealed));
}

/// Whether the binary under test seals dead letters (see [`use_idem_bin`]).
pub fn seals_dead_letters() -> bool {
    IDEM_BIN.read().unwrap_or_else(|e| e.into_inner()).as_ref().is_none_or(|(_, sealed)| *sealed)
}

/// The `idem` command line as built by `cargo test` (or `cargo build`) of
/// this package, next to the running test or binary (or the one
/// [`use_idem_bin`] named).
pub fn idem_bin() -> std::path::PathBuf {
    if let Some((path, _)) = IDEM_BIN.read().unwrap_or_else(|e| e.into_inner()).clone() {
        return path;
    }
    let exe = std::env::current_exe().unwrap_or_default();
    // Binaries live in <target>/<profile>/, integration tests in <target>/<profile>/deps/.
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join("idem-under-test"))
        .find(|candidate| candidate.exists())
        .unwrap_or_else(|| panic!("no idem-under-test binary next to {}; build the idem-tests package", exe.display()))
}

/// The DLQ key every host of the suite seals and verifies dead letters
/// with: the configs it writes name a file holding it (`[dlq] key_file`).
pub const DLQ_KEY: &str = "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed";

/// Polls `done` every 50 ms; panics after 60 s naming `what`.
pub async fn wait_until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..1200 {
        if done() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("not within 60 s: {what}");
}

/// [`wait_until`] for a check that awaits (a query, say).
pub async fn wait_until_async<F: std::future::Future<Output = bool>>(what: &str, done: impl Fn() -> F) {
    for _ in 0..1200 {
        if done().await {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("not within 60 s: {what}");
}
