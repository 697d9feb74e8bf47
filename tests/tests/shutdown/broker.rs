//! An Apache Kafka broker of one test's own, which it stops while a host
//! runs: `scripts/kafka/broker` in a folder of its own, on a port below
//! the kernel's ephemeral range (as `kafka::use_own_broker` picks it). Not
//! that harness function: it makes the whole process use the broker, and
//! the other tests of this binary run on the suite's shared one.

use std::path::PathBuf;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

/// A `scripts/kafka/broker start` or `stop` may take this long (a start
/// waits for the JVM; a stop kills after 15 s).
const SCRIPT_LIMIT: Duration = Duration::from_secs(300);

pub(crate) struct Broker {
    dir: PathBuf,
    port: u16,
}

impl Broker {
    /// Starts one; it is stopped when this process ends, however it ends
    /// (the script's owner watchdog).
    pub(crate) fn start() -> Self {
        let broker = Self { dir: std::env::temp_dir().join(idem_tests::unique_name("idem_own_broker")), port: port() };
        broker.again();
        broker
    }

    pub(crate) fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts it again on its port and data, and returns once it serves.
    pub(crate) fn again(&self) {
        self.script(&["start", &self.dir.to_string_lossy(), &self.port.to_string()]);
    }

    /// A controlled shutdown (killed after 15 s).
    pub(crate) fn stop(&self) {
        self.script(&["stop", &self.dir.to_string_lossy()]);
    }

    /// Stops it for good and deletes its folder (as its drop does, which
    /// also runs when the test fails).
    pub(crate) fn remove(self) {
        drop(self);
    }

    pub(crate) fn client(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", self.address());
        config
    }

    /// A topic of one partition, with a random name.
    pub(crate) async fn topic(&self) -> String {
        let name = idem_tests::unique_name("idem_topic");
        let admin: AdminClient<DefaultClientContext> = self.client().create().expect("admin client");
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        let created = admin.create_topics([&NewTopic::new(&name, 1, TopicReplication::Fixed(1))], &options).await;
        for result in created.expect("create topic") {
            result.unwrap_or_else(|(topic, code)| panic!("create topic {topic}: {code}"));
        }
        name
    }

    fn script(&self, args: &[&str]) {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kafka/broker");
        let mut command = std::process::Command::new(script);
        command
            .args(args)
            .env("IDEM_BROKER_OWNER", std::process::id().to_string())
            .stderr(std::process::Stdio::inherit());
        let (status, _) =
            idem_tests::output_within(&mut command, &format!("scripts/kafka/broker {args:?}"), SCRIPT_LIMIT);
        assert!(status.success(), "scripts/kafka/broker {args:?} failed ({status}): its error above");
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // No panic here (it may run while a failed test unwinds): a stop
        // that fails leaves the broker to the script's owner watchdog. The
        // script bounds itself (a broker not stopped in 15 s is killed).
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kafka/broker");
        let stopped = std::process::Command::new(script).args(["stop", &self.dir.to_string_lossy()]).status();
        if stopped.is_ok_and(|s| s.success()) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A free port below the kernel's ephemeral range: while the broker is
/// stopped the clients' reconnects draw source ports from that range, and
/// one equal to the broker's port would connect to itself and hold it.
fn port() -> u16 {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let low: u16 = range.split_whitespace().next().and_then(|p| p.parse().ok()).unwrap_or(32768);
    let (first, last) = (10_000u16, low.saturating_sub(1).max(10_001));
    let start = first + (std::process::id() % u32::from(last - first)) as u16;
    (start..last)
        .chain(first..start)
        .find(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .unwrap_or_else(|| panic!("no free port on 127.0.0.1 in {first}..{last}"))
}
