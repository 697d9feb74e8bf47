//! How `idem run` ends (README "Restarts, shutdown and scale-in"), through
//! the real binary on the real broker and PostgreSQL: an event still
//! running at SIGTERM is rolled back and redelivered, `[shutdown] timeout`
//! bounds the exit whatever still runs, a final commit the broker does not
//! confirm is logged with its positions, and SIGUSR1 hands the host's
//! partitions to the rest of its group at once.
//!
//! Each host here is a child `idem run` whose log goes to a file of its own
//! ([`Host`]), so that a test can assert what it said.

#![expect(clippy::expect_used, reason = "test helpers state their expectations with expect, like the tests")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use idem::stats::HandlerReport;
use idem_tests::db::TestDb;
use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;

mod broker;
mod scale_in;
mod sigterm;
mod startup;
mod timeout;
mod unconfirmed;
mod watchdog;

struct Env {
    db: TestDb,
    provider: PaymentProvider,
    /// The bootstrap servers the hosts' configs name.
    brokers: String,
    topic: String,
    producer: kafka::Producer,
}

impl Env {
    /// On the suite's broker, a topic of `partitions`.
    async fn new(partitions: i32) -> Self {
        let topic = kafka::create_topic(partitions).await;
        Self::on(kafka::brokers(), topic, kafka::producer()).await
    }

    /// On the broker at `brokers`, whose `topic` exists already.
    async fn on(brokers: String, topic: String, producer: kafka::Producer) -> Self {
        idem_tests::init_logging();
        let db = TestDb::new().await.unwrap_or_else(|e| panic!("test database: {e:#}"));
        let provider = PaymentProvider::start().await;
        Self { db, provider, brokers, topic, producer }
    }

    /// The billing example.
    fn billing(&self) -> HandlerSpec {
        HandlerSpec::billing(&self.topic, &self.provider.base_url())
    }

    /// The `scenarios` test handler, one event at a time.
    fn scenarios(&self) -> HandlerSpec {
        HandlerSpec { concurrency: 1, ..HandlerSpec::scenarios(&self.topic, &self.provider.base_url()) }
    }

    /// A config of `spec` whose `[shutdown] timeout` is `timeout` (`None`:
    /// idem's default, 10 s, not written).
    fn config(&self, spec: &HandlerSpec, timeout: Option<&str>) -> PathBuf {
        let path = host::write_config_for(&self.brokers, &self.db.url, std::slice::from_ref(spec));
        if let Some(timeout) = timeout {
            let text = std::fs::read_to_string(&path).expect("config");
            std::fs::write(&path, format!("[shutdown]\ntimeout = \"{timeout}\"\n{text}")).expect("config");
            assert_eq!(host::shutdown_timeout(&path), idem::config::Span::parse(timeout).expect("span").0);
        }
        path
    }

    async fn send(&self, partition: i32, payload: &[u8]) -> i64 {
        kafka::produce(&self.producer, &self.topic, partition, "k", payload).await
    }

    async fn count(&self, sql: &str) -> i64 {
        self.db.count(sql).await
    }

    /// The committed offsets of `group` on the first `partitions` of the
    /// topic. Asked again while the broker answers with an error (a broker
    /// just started again is loading its groups: NotCoordinator), for 60 s.
    fn committed(&self, group: &str, partitions: i32) -> Vec<Option<i64>> {
        use rdkafka::consumer::{BaseConsumer, Consumer as _};
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let mut wanted = rdkafka::TopicPartitionList::new();
        for p in 0..partitions {
            wanted.add_partition(&self.topic, p);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        let committed = loop {
            match consumer.committed_offsets(wanted.clone(), Duration::from_secs(10)) {
                Ok(committed) => break committed,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("committed offsets of {group}: {e}; asking again");
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => panic!("committed offsets of {group} not read within 60 s: {e}"),
            }
        };
        (0..partitions)
            .map(|p| match committed.find_partition(&self.topic, p).map(|e| e.offset()) {
                Some(rdkafka::Offset::Offset(n)) => Some(n),
                _ => None,
            })
            .collect()
    }

    /// `event`'s rows: its effects (`scenario.effect`) and its dedup rows
    /// (`idem.processed_event`).
    async fn rows_of(&self, event: uuid::Uuid) -> (i64, i64) {
        let count = |sql: &'static str| async move {
            sqlx::query_scalar::<_, i64>(sql).bind(event).fetch_one(&self.db.pool).await.expect(sql)
        };
        (
            count("SELECT count(*) FROM scenario.effect WHERE event_id = $1").await,
            count("SELECT count(*) FROM idem.processed_event WHERE event_id = $1").await,
        )
    }

    /// Until the handler's connection runs a statement containing `marker`
    /// (the guest's event is under way, its transaction open).
    async fn running(&self, marker: &str) {
        let sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                   AND state = 'active' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()";
        idem_tests::wait_until_async(&format!("a statement with `{marker}` running"), || async {
            sqlx::query_scalar::<_, i64>(sql).bind(marker).fetch_one(&self.db.pool).await.is_ok_and(|n| n > 0)
        })
        .await;
    }

    async fn finish(self) {
        self.db.drop_database().await;
    }
}

/// A `test.scenario.v1` payload for the scenario `name`, with `extra` keys.
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

/// An event that writes its effect row, then holds its transaction open
/// for `seconds` (`pg_sleep`) and succeeds. `marker` is in its statement,
/// for [`Env::running`].
fn slow(seconds: f64, marker: &str) -> (uuid::Uuid, Vec<u8>) {
    scenario("statement", serde_json::json!({ "sql": format!("SELECT pg_sleep({seconds}) /* {marker} */") }))
}

/// A child `idem run` logging (`IDEM_LOG=info`) to a file of its own.
struct Host {
    child: Child,
    config: PathBuf,
    log: PathBuf,
}

/// How a [`Host`] ended.
struct Stopped {
    /// From the signal to the exit.
    took: Duration,
    status: ExitStatus,
    reports: Vec<HandlerReport>,
    log: String,
}

impl Host {
    fn start(config: &Path, env: &[(&str, &str)], exit_when_drained: bool) -> Self {
        let log = config.with_file_name(format!("{}.log", idem_tests::unique_name("idem_run")));
        let file = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(idem_tests::idem_bin());
        cmd.arg("run").arg("--config").arg(config).stdout(Stdio::piped()).stderr(file);
        if exit_when_drained {
            cmd.arg("--exit-when-drained");
        }
        cmd.env("IDEM_LOG", "info").env("IDEM_TEST_PARENT_PID", std::process::id().to_string());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn idem run");
        Self { child, config: config.to_path_buf(), log }
    }

    /// Sends `signal` and waits for the exit: within the config's
    /// `[shutdown] timeout` plus the harness's margin, or the test fails.
    async fn stop(self, signal: &str) -> Stopped {
        let began = Instant::now();
        host::signal(&self.child, signal);
        let limit = host::shutdown_timeout(&self.config) + host::EXIT_MARGIN;
        self.wait(&format!("idem run after SIG{signal}"), began, limit).await
    }

    /// Waits for a host started to drain and exit.
    async fn drained(self) -> Stopped {
        self.wait("idem run --exit-when-drained", Instant::now(), host::RUN_LIMIT).await
    }

    /// Waits for the exit, `began` (the signal) plus `limit` at most.
    async fn wait(self, what: &str, began: Instant, limit: Duration) -> Stopped {
        let Self { child, config, log } = self;
        let what = format!("{what} ({}, log {})", config.display(), log.display());
        let (status, out) = tokio::task::spawn_blocking(move || idem_tests::wait_within(child, &what, began + limit))
            .await
            .expect("wait");
        let took = began.elapsed();
        let reports = String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find_map(|v| serde_json::from_value(v["handlers"].clone()).ok())
            .unwrap_or_default();
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        eprintln!("--- idem run ({}) exited {status} after {took:?}; its log:\n{log}---", config.display());
        Stopped { took, status, reports, log }
    }
}
