//! A fleet under load (docs/deployment.md): three `idem run` hosts of the
//! billing example in one group, on a three-node Kafka cluster (replication
//! factor 3, min.insync.replicas 2; scripts/kafka/cluster), a topic of 12
//! partitions, 30,000 orders produced at a steady 200/s. While they flow:
//! every host restarted in turn with SIGTERM (a rolling upgrade), one host
//! SIGKILLed and started again, one Kafka node SIGKILLed and started again
//! 20 s later, the fleet scaled in to one host (SIGUSR1) and out again to
//! three. Then: every order charged exactly once, nothing dead-lettered,
//! every partition committed to its end, and no order waiting (acknowledged
//! by the cluster, not yet applied: its partition idle) longer than the
//! failover bound plus 5 s.
//!
//! Once with the hosts as processes, once as podman containers of the image
//! (scripts/image). Run by scripts/test-fleet, which starts the cluster
//! (IDEM_FLEET_CLUSTER names its folder, KAFKA_BROKERS its nodes) and builds
//! the image; the suite's own run (scripts/test) leaves this binary out
//! (.config/nextest.toml's default filter).
#![expect(clippy::expect_used, reason = "tests state their expectations with expect")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use idem_tests::db::TestDb;
use idem_tests::host::{self, HandlerSpec, order_payload};
use idem_tests::kafka;
use idem_tests::podman::{self, Container};
use idem_tests::provider::PaymentProvider;

const PARTITIONS: i32 = 12;
const ORDERS: i64 = 30_000;
const RATE: i64 = 200;
/// How long an order may wait between the cluster's acknowledgement and its
/// transaction (how long its partition may stand idle): the failover bound, the larger of the
/// brokers' `broker.session.timeout.ms` (scripts/kafka/cluster.properties)
/// and the hosts' consumer session (the harness's 6 s), plus 5 s.
const IDLE_BOUND: Duration = Duration::from_secs(6 + 5);

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_of_processes_applies_every_order_once_through_restarts_kills_and_scaling() {
    fleet(Runner::Process).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_of_containers_applies_every_order_once_through_restarts_kills_and_scaling() {
    fleet(Runner::Podman(podman::image())).await;
}

#[derive(Clone)]
enum Runner {
    Process,
    Podman(String),
}

/// One host of the fleet: its config, identity, and what runs it.
struct Host {
    config: PathBuf,
    id: String,
    running: Running,
}

enum Running {
    Process(Child),
    Container(Container),
    Stopped,
}

impl Host {
    fn start(runner: &Runner, config: &Path, id: &str) -> Self {
        let running = match runner {
            Runner::Process => Running::Process(host::spawn(config, false, &[("IDEM_INSTANCE_ID", id)])),
            Runner::Podman(image) => {
                let name = idem_tests::unique_name(id);
                let mounted = config.with_file_name("mounted");
                let env = format!("IDEM_INSTANCE_ID={id}");
                let options = ["-d", "--name", &name, "-e", &env];
                let (status, out) = podman::run(image, &mounted, &options, &["run", "--config", "/etc/idem/idem.toml"]);
                assert!(status.success(), "podman run {name}: {out}");
                Running::Container(Container(name))
            }
        };
        Self { config: config.to_path_buf(), id: id.to_owned(), running }
    }

    /// Sends `signal` and waits for the exit; TERM and USR1 must exit 0.
    fn stop(&mut self, signal: &str) {
        match std::mem::replace(&mut self.running, Running::Stopped) {
            Running::Process(child) => {
                host::signal(&child, signal);
                let (status, _) = host::wait_report(child);
                assert!(signal == "KILL" || status.success(), "host {} after SIG{signal}: {status}", self.id);
            }
            Running::Container(container) => {
                container.signal(signal);
                let code = container.wait();
                assert!(
                    signal == "KILL" || code == 0,
                    "host {} after SIG{signal}: exit {code}: {}",
                    self.id,
                    container.logs()
                );
            }
            Running::Stopped => panic!("host {} is not running", self.id),
        }
    }

    fn restart(&mut self, runner: &Runner) {
        *self = Self::start(runner, &self.config, &self.id);
    }

    async fn ready(&self) {
        host::ready(&self.config).await;
    }
}

/// `scripts/kafka/cluster ACTION DIR NODE` on the test's cluster.
fn cluster(action: &str, node: u32) {
    let dir = std::env::var("IDEM_FLEET_CLUSTER").expect("IDEM_FLEET_CLUSTER: run scripts/test-fleet");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kafka/cluster");
    let (status, out) = idem_tests::output_and_errors(
        Command::new(script).args([action, &dir, &node.to_string()]),
        "cluster",
        Duration::from_secs(120),
    );
    assert!(status.success(), "scripts/kafka/cluster {action} {dir} {node}: {out}");
}

async fn fleet(runner: Runner) {
    idem_tests::init_logging();
    assert!(kafka::brokers().split(',').count() == 3, "KAFKA_BROKERS names the three nodes: run scripts/test-fleet");
    let db = TestDb::new().await.expect("database");
    let provider = PaymentProvider::start().await;
    let topic = kafka::create_topic(PARTITIONS).await;
    let spec = HandlerSpec { create_dlq: true, ..HandlerSpec::billing(&topic, &provider.base_url()) };
    let mut hosts: Vec<Host> = ["a", "b", "c"]
        .iter()
        .map(|name| {
            let config = host::write_config(&db.url, std::slice::from_ref(&spec));
            if matches!(runner, Runner::Podman(_)) {
                podman::stage(&config);
            }
            Host::start(&runner, &config, &format!("{}-{name}", spec.group_id))
        })
        .collect();
    for h in &hosts {
        h.ready().await;
    }

    let began = Instant::now();
    let producing = tokio::spawn(produce(topic.clone()));
    let faults = chaos(&runner, &mut hosts).await;
    assert!(!producing.is_finished(), "the faults ({faults}) ended after the last order was sent: not under load");
    let delivered = producing.await.expect("producer");
    figure(&format!("{ORDERS} orders sent over {} s; {faults}", began.elapsed().as_secs()));

    let drained = Instant::now();
    while db.count("SELECT count(*) FROM billing.charge").await < ORDERS {
        assert!(drained.elapsed() < Duration::from_secs(180), "orders not all charged within 180 s of the last");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    wait_committed(&spec.group_id, &topic).await;
    let wait = longest_wait(&db, &delivered).await;
    for h in &mut hosts {
        h.stop("TERM");
    }

    assert_eq!(db.count("SELECT count(*) FROM billing.charge").await, ORDERS, "each order charged once");
    assert_eq!(db.count("SELECT count(*) FROM idem.processed_event").await, ORDERS, "one dedup row per order");
    assert_eq!(provider.charges(), ORDERS as usize, "the provider charged each order once");
    let dlq = format!("{topic}.{}.dlq", spec.name);
    assert_eq!(kafka::high_watermarks(&dlq, PARTITIONS).iter().sum::<i64>(), 0, "nothing dead-lettered");
    figure(&format!("the longest an order waited: {:.1} s (partition {})", wait.1.as_secs_f64(), wait.0));
    assert!(
        wait.1 <= IDLE_BOUND,
        "an order of partition {} waited {:?} to be applied (bound {IDLE_BOUND:?})",
        wait.0,
        wait.1
    );
    db.drop_database().await;
}

/// A figure of the run, on stderr and appended to the file
/// IDEM_FLEET_FIGURES names (scripts/test-fleet prints it: nextest keeps a
/// passing test's output to itself).
fn figure(line: &str) {
    use std::io::Write as _;
    let line = format!("fleet ({}): {line}", std::thread::current().name().unwrap_or("test"));
    eprintln!("{line}");
    if let Some(path) = std::env::var_os("IDEM_FLEET_FIGURES") {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path);
        let _ = file.and_then(|mut f| writeln!(f, "{line}"));
    }
}

/// 30,000 orders at [`RATE`] per second, round-robin over the partitions,
/// each batch sent when its time comes (a late one goes at once); returns
/// each order's event id and when the cluster acknowledged it (from then
/// on a host could read it).
async fn produce(topic: String) -> Vec<(uuid::Uuid, chrono::DateTime<chrono::Utc>)> {
    let producer = kafka::producer();
    let began = Instant::now();
    let per_tick = RATE / 10;
    let mut delivered = Vec::with_capacity(ORDERS as usize);
    for tick in 0..ORDERS / per_tick {
        let due = began + Duration::from_millis(100 * tick as u64);
        tokio::time::sleep_until(due.into()).await;
        let from = 1 + tick * per_tick;
        let sends = (from..from + per_tick).map(|i| {
            let (id, payload) = order_payload(i);
            let (producer, topic) = (&producer, &topic);
            async move {
                kafka::produce(producer, topic, (i % i64::from(PARTITIONS)) as i32, "k", &payload).await;
                (id, chrono::Utc::now())
            }
        });
        delivered.extend(futures::future::join_all(sends).await);
    }
    delivered
}

/// The faults, in order, each once the fleet has recovered from the last;
/// returns what was done and when.
async fn chaos(runner: &Runner, hosts: &mut [Host]) -> String {
    let began = Instant::now();
    let mut done = Vec::new();
    let mut note = |what: &str| done.push(format!("{what} at {} s", began.elapsed().as_secs()));
    tokio::time::sleep(Duration::from_secs(10)).await;
    for h in hosts.iter_mut() {
        h.stop("TERM");
        h.restart(runner);
        h.ready().await;
    }
    note("rolling restart done");
    tokio::time::sleep(Duration::from_secs(5)).await;
    hosts[1].stop("KILL");
    tokio::time::sleep(Duration::from_secs(2)).await;
    hosts[1].restart(runner);
    hosts[1].ready().await;
    note("host b SIGKILLed and back");
    tokio::time::sleep(Duration::from_secs(5)).await;
    cluster("kill", 2);
    tokio::time::sleep(Duration::from_secs(20)).await;
    cluster("restart", 2);
    note("Kafka node 2 SIGKILLed and back");
    tokio::time::sleep(Duration::from_secs(10)).await;
    for h in hosts[1..].iter_mut() {
        h.stop("USR1");
    }
    note("scaled in to 1");
    tokio::time::sleep(Duration::from_secs(10)).await;
    for h in hosts[1..].iter_mut() {
        h.restart(runner);
    }
    for h in hosts.iter() {
        h.ready().await;
    }
    note("scaled out to 3");
    done.join(", ")
}

/// Until the group's committed offset of every partition is its end (60 s).
async fn wait_committed(group: &str, topic: &str) {
    let began = Instant::now();
    loop {
        let ends = kafka::high_watermarks(topic, PARTITIONS);
        let committed = kafka::committed(group, topic, PARTITIONS);
        if committed.iter().zip(&ends).all(|(c, e)| *c == Some(*e)) {
            return;
        }
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "committed {committed:?} short of the ends {ends:?} after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The order that waited longest between its acknowledgement by the
/// cluster and its transaction's start: its partition and the wait.
async fn longest_wait(db: &TestDb, delivered: &[(uuid::Uuid, chrono::DateTime<chrono::Utc>)]) -> (i32, Duration) {
    let rows: Vec<(uuid::Uuid, i32, chrono::DateTime<chrono::Utc>)> =
        sqlx::query_as("SELECT event_id, \"partition\", processed_at FROM idem.processed_event")
            .fetch_all(&db.pool)
            .await
            .expect("dedup rows");
    let applied: std::collections::HashMap<uuid::Uuid, (i32, chrono::DateTime<chrono::Utc>)> =
        rows.into_iter().map(|(id, p, at)| (id, (p, at))).collect();
    delivered
        .iter()
        .map(|(id, acked)| {
            let (partition, at) = applied.get(id).unwrap_or_else(|| panic!("order {id} has no dedup row"));
            (*partition, (*at - *acked).to_std().unwrap_or_default())
        })
        .max_by_key(|(_, wait)| *wait)
        .expect("orders")
}
