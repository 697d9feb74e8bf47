//! The console's limits, over plain HTTP against the real `idem run` on
//! Apache Kafka and PostgreSQL (README, "The console"): dead-letter pages
//! beside a transaction left open on the DLQ topic, the failed-login count
//! past 4,096 addresses, sessions that ended, one replay at a time and at
//! most 200 records per replay, and CSRF tokens bound to their session.

#![expect(clippy::expect_used, reason = "test helpers state their expectations with expect, like the tests")]

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use idem_tests::db::TestDb;
use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::{Offset, TopicPartitionList};

mod console;
mod dlq_pages;
mod expiry;
mod logins;
mod replays;
mod sessions;

/// The host's token of scope `operate` (`IDEM_ADMIN_TOKEN`).
const TOKEN: &str = "console-limits-token-0123456789abcdef";
/// The host's token of scope `read` (`IDEM_ADMIN_READ_TOKEN`).
const READ_TOKEN: &str = "console-limits-read-token-0123456789abcdef";

struct Env {
    db: TestDb,
    provider: PaymentProvider,
    topic: String,
}

impl Env {
    async fn new() -> Self {
        idem_tests::init_logging();
        let db = TestDb::new().await.unwrap_or_else(|e| panic!("test database: {e:#}"));
        let provider = PaymentProvider::start().await;
        let topic = kafka::create_topic(2).await;
        Self { db, provider, topic }
    }

    fn billing(&self) -> HandlerSpec {
        HandlerSpec::billing(&self.topic, &self.provider.base_url())
    }

    /// A config for the billing handler whose `[admin]` table has `admin`
    /// lines too.
    fn config(&self, admin: &str) -> PathBuf {
        let path = host::write_config(&self.db.url, &[self.billing()]);
        let text = std::fs::read_to_string(&path).expect("config");
        std::fs::write(&path, text.replacen("[admin]\n", &format!("[admin]\n{admin}\n"), 1)).expect("config");
        path
    }

    /// The handler's DLQ topic.
    fn dlq(&self) -> String {
        format!("{}.billing.dlq", self.topic)
    }

    async fn finish(self) {
        self.db.drop_database().await;
    }
}

/// `idem run` as a child with both tokens set.
struct Host {
    child: Option<Child>,
    /// Where to reach the listener (loopback when it listens on all addresses).
    address: SocketAddr,
}

impl Host {
    async fn start(config: &Path) -> Self {
        Self::start_with(config, &[]).await
    }

    /// [`Host::start`] with more environment variables.
    async fn start_with(config: &Path, env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(idem_tests::idem_bin());
        cmd.arg("run").arg("--config").arg(config).stdout(Stdio::null()).stderr(Stdio::inherit());
        // Not a line per wrong login (thousands of them here).
        let log = std::env::var("IDEM_LOG").unwrap_or_else(|_| "warn,idem::admin::console::api=error".into());
        cmd.env("IDEM_LOG", log);
        cmd.env("IDEM_TEST_PARENT_PID", std::process::id().to_string());
        cmd.env("IDEM_ADMIN_TOKEN", TOKEN).env("IDEM_ADMIN_READ_TOKEN", READ_TOKEN);
        cmd.envs(env.iter().copied());
        let child = cmd.spawn().expect("spawn idem run");
        let listen: SocketAddr = host::admin_url(config).trim_start_matches("http://").parse().expect("admin address");
        let address =
            if listen.ip().is_unspecified() { SocketAddr::from(([127, 0, 0, 1], listen.port())) } else { listen };
        let host = Self { child: Some(child), address };
        host.wait_ready().await;
        host
    }

    fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Until `/readyz` answers 200: the consumer joined its group.
    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        let client = client();
        loop {
            if client.get(format!("{}/readyz", self.url())).send().await.is_ok_and(|r| r.status() == 200) {
                return;
            }
            assert!(Instant::now() < deadline, "the host at {} was not ready within 90 s", self.url());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM, and a clean exit within 40 s.
    async fn stop(mut self) {
        let child = self.child.take().expect("running");
        host::signal(&child, "TERM");
        let deadline = Instant::now() + Duration::from_secs(40);
        let (status, _) =
            tokio::task::spawn_blocking(move || idem_tests::wait_within(child, "idem run after SIGTERM", deadline))
                .await
                .expect("wait");
        assert!(status.success(), "idem run exited with {status}");
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A client that opens a connection per request and gives up after 60 s.
fn client() -> reqwest::Client {
    reqwest::Client::builder().pool_max_idle_per_host(0).timeout(Duration::from_secs(60)).build().expect("client")
}

/// Every record of `topic`, uncommitted ones too (`read_uncommitted`: a
/// transaction left open does not stop the read at its first record), to
/// the high watermark at the time of the call.
fn read_uncommitted(topic: &str) -> Vec<rdkafka::message::OwnedMessage> {
    use rdkafka::Message as _;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka::brokers())
        .set("group.id", idem_tests::unique_name("reader"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_uncommitted")
        .create()
        .expect("consumer");
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
    let partitions = metadata.topics().first().map_or(0, |t| t.partitions().len() as i32);
    let mut out = Vec::new();
    for p in 0..partitions {
        let (low, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).expect("watermarks");
        if high <= low {
            continue;
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, p, Offset::Offset(low)).expect("offset");
        consumer.assign(&tpl).expect("assign");
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut next = low;
        while next < high {
            assert!(Instant::now() < deadline, "reading {topic}/{p} uncommitted: stuck at {next} of {high}");
            if let Some(message) = consumer.poll(Duration::from_millis(200)) {
                let message = message.expect("read");
                next = message.offset() + 1;
                out.push(message.detach());
            }
        }
    }
    out
}

/// The payloads of `records` as text.
fn payloads(records: &[rdkafka::message::OwnedMessage]) -> Vec<String> {
    use rdkafka::Message as _;
    records.iter().map(|m| String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned()).collect()
}

/// The loopback address number `i` of a block (any of 127.0.0.0/8 is this
/// machine): another peer, as the listener counts.
fn loopback(block: u8, i: u32) -> IpAddr {
    let [_, _, hi, lo] = i.to_be_bytes();
    IpAddr::from([127, block, hi, lo])
}
