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
//! - [`proxy`]: a TCP proxy to cut, for database (and registry) outages;
//! - [`registry`]: the schema registry scripts/test starts, subjects and
//!   framed records for the registry formats' tests;
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
pub mod podman;
pub mod provider;
pub mod proxy;
pub mod registry;

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
        origin: None,
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

/// Waits for `child` to exit, its stdout (when piped) read meanwhile, for
/// at most until `deadline`: past it the child is killed and the test
/// panics naming `what`. Every wait of the harness for a process goes
/// through here or [`output_within`], so that a process that never exits
/// fails its test, naming it, instead of hanging the run.
pub fn wait_within(
    mut child: std::process::Child,
    what: &str,
    deadline: std::time::Instant,
) -> (std::process::ExitStatus, Vec<u8>) {
    use std::io::Read as _;
    use std::time::{Duration, Instant};
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    if let Some(mut stdout) = child.stdout.take() {
        std::thread::spawn(move || {
            let mut buffer = Vec::new();
            let _ = stdout.read_to_end(&mut buffer);
            let _ = tx.send(buffer);
        });
    } else {
        drop(tx);
    }
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => panic!("waiting for {what} (pid {}): {e}", child.id()),
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} (pid {}) had not exited by its deadline: killed it (SIGKILL)", child.id());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // A process it started and left running may hold its stdout open.
    let stdout = match rx.recv_timeout(STDOUT_AFTER_EXIT) {
        Ok(buffer) => buffer,
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Vec::new(),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!(
            "{what} exited ({status}) but its stdout was still open {STDOUT_AFTER_EXIT:?} later: a process it \
             started holds it"
        ),
    };
    (status, stdout)
}

/// How long [`wait_within`] reads a child's stdout after the child exited.
const STDOUT_AFTER_EXIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Runs `command` to its end within `limit` (stdout captured, stderr as
/// the command set it, inherited by default); past `limit` it is killed
/// and the test panics naming `what`.
pub fn output_within(
    command: &mut std::process::Command,
    what: &str,
    limit: std::time::Duration,
) -> (std::process::ExitStatus, Vec<u8>) {
    let child =
        command.stdout(std::process::Stdio::piped()).spawn().unwrap_or_else(|e| panic!("failed to start {what}: {e}"));
    wait_within(child, &format!("{what} (allowed {} s)", limit.as_secs()), std::time::Instant::now() + limit)
}

/// [`output_within`] of `command` within `limit`, its stderr kept too: its
/// status and what it printed (stdout, then stderr).
pub fn output_and_errors(
    command: &mut std::process::Command,
    what: &str,
    limit: std::time::Duration,
) -> (std::process::ExitStatus, String) {
    let err = std::env::temp_dir().join(unique_name(&what.replace(' ', "_")));
    command.stderr(std::fs::File::create(&err).unwrap_or_else(|e| panic!("{}: {e}", err.display())));
    let (status, out) = output_within(command, what, limit);
    let text = std::fs::read_to_string(&err).unwrap_or_default();
    let _ = std::fs::remove_file(&err);
    (status, format!("{}{text}", String::from_utf8_lossy(&out)))
}

/// Polls `done` every 50 ms; panics after 60 s (of wall-clock time, however
/// long each check takes) naming `what`.
pub async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if done() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("not within 60 s: {what}");
}

/// [`wait_until`] for a check that awaits (a query, say); a check that
/// never finishes is cut off at the same 60 s.
pub async fn wait_until_async<F: std::future::Future<Output = bool>>(what: &str, done: impl Fn() -> F) {
    let polling = async {
        loop {
            if done().await {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    if tokio::time::timeout(std::time::Duration::from_secs(60), polling).await.is_err() {
        panic!("not within 60 s: {what}");
    }
}
