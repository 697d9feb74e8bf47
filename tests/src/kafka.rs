//! The broker: Apache Kafka at `KAFKA_BROKERS` (scripts/test starts one and
//! sets it; any Kafka cluster will do), or, for the tests of the
//! `mock_faults` binary alone, librdkafka's mock cluster.
//!
//! Why a mock cluster at all: a few tests need a broker fault that Apache
//! Kafka cannot be made to give from outside, such as refusing exactly the
//! next N Produce requests with a given error. The mock cluster is the
//! in-memory Kafka of librdkafka's own test suite (part of the librdkafka
//! that the rdkafka crate already builds); it injects such errors on
//! request. A test that uses it calls [`use_mock_cluster`] first, naming the
//! fault, and lives in `tests/tests/mock_faults.rs`, so that every other
//! test runs against the broker users run. The mock differs from Kafka in
//! ways the other tests would hide: it holds a fetch of an empty partition
//! for the whole `fetch.wait.max.ms`, has no CreateTopics and no
//! DescribeConfigs, and refuses commits while a group is joining.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::statistics::Statistics;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// Something to do with the mock cluster on the thread that owns it.
type MockCommand = Box<dyn FnOnce(&MockCluster<'static, rdkafka::producer::DefaultProducerContext>) + Send>;

enum Broker {
    /// A cluster named by `KAFKA_BROKERS`.
    External(String),
    /// The in-process mock cluster; its owner thread creates topics.
    Mock { servers: String, commands: mpsc::Sender<MockCommand> },
}

static BROKER: OnceLock<Result<Broker, String>> = OnceLock::new();

fn broker() -> &'static Broker {
    let found = BROKER.get_or_init(|| match std::env::var("KAFKA_BROKERS") {
        Ok(brokers) if !brokers.is_empty() => Ok(Broker::External(brokers)),
        _ => Err("KAFKA_BROKERS is not set: run the tests with scripts/test, which starts Apache Kafka \
                  (or set it to a Kafka cluster's bootstrap servers)"
            .into()),
    });
    match found {
        Ok(b) => b,
        Err(e) => panic!("{e}"),
    }
}

/// Makes this test process use librdkafka's mock cluster instead of Apache
/// Kafka, for a test that needs `fault`, which Apache Kafka cannot give.
/// Every test of the process must call it first (they share the broker):
/// such tests live in the `mock_faults` binary.
pub fn use_mock_cluster(fault: &str) {
    let found = BROKER.get_or_init(start_mock);
    match found {
        Ok(Broker::Mock { .. }) => {
            eprintln!("on librdkafka's mock cluster, for a fault Apache Kafka cannot give: {fault}")
        }
        Ok(Broker::External(servers)) => {
            panic!("this test needs the mock cluster ({fault}), but this process already uses {servers}")
        }
        Err(e) => panic!("{e}"),
    }
}

/// A broker this process started for itself ([`use_own_broker`]): Apache
/// Kafka, as `scripts/kafka/broker` starts it, in a folder of its own, which
/// a test may stop and start again on the same port and data.
pub struct OwnBroker {
    dir: std::path::PathBuf,
    port: u16,
}

static OWN: OnceLock<OwnBroker> = OnceLock::new();

/// Makes this test process use an Apache Kafka broker of its own instead of
/// the suite's shared one (`KAFKA_BROKERS`), for a test that stops the
/// broker (`why`): stopping the shared one would fail every test running
/// beside it. Such tests live in a binary of their own, every test of which
/// calls this first. The broker is stopped when this process ends, however
/// it ends (`scripts/kafka/broker`'s owner watchdog).
pub fn use_own_broker(why: &str) -> &'static OwnBroker {
    let own = OWN.get_or_init(|| {
        let dir = std::env::temp_dir().join(crate::unique_name("idem_own_broker"));
        let port = free_port();
        let own = OwnBroker { dir, port };
        own.start();
        own
    });
    let address = own.address();
    let found = BROKER.get_or_init(|| Ok(Broker::External(address.clone())));
    match found {
        Ok(Broker::External(servers)) if *servers == address => {
            eprintln!("on a broker of this process's own at {address}: {why}")
        }
        Ok(_) => panic!("this test stops its broker ({why}), but this process already uses {}", describe()),
        Err(e) => panic!("{e}"),
    }
    own
}

/// A free port below the kernel's ephemeral range. Not one from it: while
/// the broker is stopped, the clients' reconnects to its port draw source
/// ports from that range, and a connect whose source port is the
/// destination port connects to itself (TCP simultaneous open) and holds
/// the port the broker must listen on again.
fn free_port() -> u16 {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let low: u16 = range.split_whitespace().next().and_then(|p| p.parse().ok()).unwrap_or(32768);
    let (first, last) = (10_000u16, low.saturating_sub(1).max(10_001));
    let start = first + (std::process::id() % u32::from(last - first)) as u16;
    (start..last)
        .chain(first..start)
        .find(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .unwrap_or_else(|| panic!("no free port on 127.0.0.1 in {first}..{last}"))
}

impl OwnBroker {
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts it (again: same port, same data) and returns once it serves.
    pub fn start(&self) {
        self.script(&["start", &self.dir.to_string_lossy(), &self.port.to_string()]);
    }

    /// Stops it: a controlled shutdown, killed after 15 s.
    pub fn stop(&self) {
        self.script(&["stop", &self.dir.to_string_lossy()]);
    }

    /// Stops it for good and deletes its folder (data, logs, certificates).
    pub fn remove(&self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// Runs `scripts/kafka/broker` with `args`, within [`BROKER_SCRIPT_LIMIT`].
    fn script(&self, args: &[&str]) {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kafka/broker");
        let mut command = std::process::Command::new(script);
        command
            .args(args)
            .env("IDEM_BROKER_OWNER", std::process::id().to_string())
            .stderr(std::process::Stdio::inherit());
        let (status, _) =
            crate::output_within(&mut command, &format!("scripts/kafka/broker {args:?}"), BROKER_SCRIPT_LIMIT);
        assert!(status.success(), "scripts/kafka/broker {args:?} failed ({status}): its error above");
    }
}

/// The longest `scripts/kafka/broker start` or `stop` may take: a start
/// waits for the JVM to serve (seconds; tens on a busy machine, a minute
/// or more when the jars are fetched first), a stop kills after 15 s.
const BROKER_SCRIPT_LIMIT: Duration = Duration::from_secs(300);

/// The longest the mock cluster's thread may take to start it or to run
/// one command ([`on_mock`]).
const MOCK_LIMIT: Duration = Duration::from_secs(60);

/// Starts the mock cluster on a thread that owns it (it is not `Send`) for
/// the rest of the process.
fn start_mock() -> Result<Broker, String> {
    let (ready_tx, ready_rx) = mpsc::channel::<Result<String, String>>();
    let (command_tx, command_rx) = mpsc::channel::<MockCommand>();
    std::thread::Builder::new()
        .name("kafka-mock".into())
        .spawn(move || {
            let cluster = match MockCluster::new(1) {
                Ok(c) => c,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("failed to start librdkafka's mock cluster: {e}")));
                    return;
                }
            };
            let _ = ready_tx.send(Ok(cluster.bootstrap_servers()));
            for command in command_rx {
                command(&cluster);
            }
        })
        .map_err(|e| format!("failed to spawn the mock cluster's thread: {e}"))?;
    let servers = ready_rx
        .recv_timeout(MOCK_LIMIT)
        .map_err(|e| format!("librdkafka's mock cluster did not start within {} s: {e}", MOCK_LIMIT.as_secs()))??;
    Ok(Broker::Mock { servers, commands: command_tx })
}

/// Runs `f` with the mock cluster and returns its answer; panics unless
/// [`use_mock_cluster`] was called.
pub fn on_mock<T: Send + 'static>(
    f: impl FnOnce(&MockCluster<'static, rdkafka::producer::DefaultProducerContext>) -> T + Send + 'static,
) -> T {
    let Broker::Mock { commands, .. } = broker() else {
        panic!("this test injects broker faults: call kafka::use_mock_cluster first");
    };
    let (tx, rx) = mpsc::channel();
    let command: MockCommand = Box::new(move |cluster| {
        let _ = tx.send(f(cluster));
    });
    commands.send(command).unwrap_or_else(|e| panic!("mock cluster gone: {e}"));
    rx.recv_timeout(MOCK_LIMIT)
        .unwrap_or_else(|e| panic!("no answer from the mock cluster's thread within {} s: {e}", MOCK_LIMIT.as_secs()))
}

/// Whether this process runs on the mock cluster ([`use_mock_cluster`]).
pub(crate) fn on_mock_cluster() -> bool {
    matches!(broker(), Broker::Mock { .. })
}

/// The bootstrap servers the tests use.
pub fn brokers() -> String {
    match broker() {
        Broker::External(servers) | Broker::Mock { servers, .. } => servers.clone(),
    }
}

/// Which broker the tests run against, for logs and summaries.
pub fn describe() -> String {
    match broker() {
        Broker::External(servers) if OWN.get().is_some() => format!("{servers} (this process's own broker)"),
        Broker::External(servers) => format!("{servers} (KAFKA_BROKERS)"),
        Broker::Mock { servers, .. } => format!("{servers} (librdkafka's mock cluster, in this process)"),
    }
}

/// Creates a topic with a random name and `partitions` partitions.
pub async fn create_topic(partitions: i32) -> String {
    let name = crate::unique_name("idem_topic");
    create_named_topic(&name, partitions).await;
    name
}

/// Creates the topic `name` with `partitions` partitions.
pub async fn create_named_topic(name: &str, partitions: i32) {
    create_topic_with(name, partitions, &[]).await
}

/// Creates the topic `name` with topic configs (`max.message.bytes`, …;
/// Apache Kafka only: the mock cluster has none).
pub async fn create_topic_with(name: &str, partitions: i32, configs: &[(&str, &str)]) {
    match broker() {
        Broker::Mock { .. } => {
            let topic = name.to_owned();
            let created =
                on_mock(move |cluster| cluster.create_topic(&topic, partitions, 1).map_err(|e| e.to_string()));
            created.unwrap_or_else(|e| panic!("create topic {name}: {e}"));
        }
        Broker::External(servers) => {
            let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
                .set("bootstrap.servers", servers)
                .create()
                .unwrap_or_else(|e| panic!("admin client: {e}"));
            // The broker's default replication factor (1 on the suite's broker, 3 on the
            // fleet test's cluster), as idem's own DLQ topics get.
            let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(-1));
            for (key, value) in configs {
                topic = topic.set(key, value);
            }
            let results = admin
                .create_topics([&topic], &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))))
                .await
                .unwrap_or_else(|e| panic!("create topic {name}: {e}"));
            for r in results {
                if let Err((topic, code)) = r {
                    panic!("create topic {topic}: {code}");
                }
            }
        }
    }
}

/// Creates `name` with as many partitions as `like` has, unless it exists:
/// a handler's dead-letter topic made ahead, as an operator whose idem may
/// not create topics does (and as the mock cluster, which has no
/// CreateTopics, needs).
pub fn create_topic_like(name: &str, like: &str) {
    if partitions(name) > 0 {
        return;
    }
    let count = partitions(like).max(1);
    // On a thread of its own: the caller may be inside an async runtime.
    let topic = name.to_owned();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let creating = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
        runtime.unwrap_or_else(|e| panic!("runtime: {e}")).block_on(create_named_topic(&topic, count));
        let _ = done_tx.send(());
    });
    // Bounded: the admin request's own timeouts are the broker's.
    match done_rx.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => {}
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("topic {name} not created within 60 s"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {}
    }
    creating.join().unwrap_or_else(|_| panic!("creating topic {name} failed"));
}

/// The partition count of `topic` (0: it does not exist).
pub fn partitions(topic: &str) -> i32 {
    let consumer: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", brokers()).create().unwrap_or_else(|e| panic!("consumer: {e}"));
    let metadata =
        consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap_or_else(|e| panic!("metadata: {e}"));
    metadata.topics().first().filter(|t| t.error().is_none()).map(|t| t.partitions().len() as i32).unwrap_or(0)
}

/// The harness's producer: it counts its Produce requests, so that a test
/// can show it sent multi-record batches.
pub struct Producer {
    inner: FutureProducer<ProducerStats>,
    stats: ProducerStats,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer").finish_non_exhaustive()
    }
}

/// What librdkafka's statistics say a producer sent.
#[derive(Debug, Default, Clone)]
pub struct ProducerStats {
    produce_requests: Arc<AtomicI64>,
    /// Statistics snapshots received (each interval).
    snapshots: Arc<AtomicI64>,
}

impl ClientContext for ProducerStats {
    fn stats(&self, statistics: Statistics) {
        let requests: i64 = statistics.brokers.values().filter_map(|b| b.req.get("Produce")).sum();
        self.produce_requests.store(requests, Ordering::SeqCst);
        self.snapshots.fetch_add(1, Ordering::SeqCst);
    }
}

/// A producer configured the way users' producers are: idempotent,
/// `acks=all`, lingering so that whatever is queued goes out in
/// multi-record batches.
pub fn producer() -> Producer {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers());
    producer_from(config)
}

/// [`producer`] for another broker: `config` names it and how to reach it.
pub fn producer_from(mut config: ClientConfig) -> Producer {
    let stats = ProducerStats::default();
    let inner = config
        .set("enable.idempotence", "true")
        .set("linger.ms", "20")
        .set("statistics.interval.ms", "100")
        .create_with_context(stats.clone())
        .unwrap_or_else(|e| panic!("producer: {e}"));
    Producer { inner, stats }
}

/// The Produce requests `producer` has sent so far, from a statistics
/// snapshot taken after this call.
pub async fn produce_requests(producer: &Producer) -> i64 {
    let stats = &producer.stats;
    let seen = stats.snapshots.load(Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(10);
    // Two snapshots later, the counts include everything acknowledged now.
    while stats.snapshots.load(Ordering::SeqCst) < seen + 2 {
        assert!(Instant::now() < deadline, "no producer statistics within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stats.produce_requests.load(Ordering::SeqCst)
}

/// Sends one record to `partition` and waits for its acknowledgement.
pub async fn produce(producer: &Producer, topic: &str, partition: i32, key: &str, payload: &[u8]) -> i64 {
    produce_with_headers(producer, topic, partition, key.as_bytes(), payload, &[]).await
}

/// Sends one record with a key and headers and waits for its acknowledgement.
pub async fn produce_with_headers(
    producer: &Producer,
    topic: &str,
    partition: i32,
    key: &[u8],
    payload: &[u8],
    headers: &[(&str, &[u8])],
) -> i64 {
    let mut owned = rdkafka::message::OwnedHeaders::new();
    for (name, value) in headers {
        owned = owned.insert(rdkafka::message::Header { key: name, value: Some(*value) });
    }
    let record = FutureRecord::to(topic).partition(partition).key(key).payload(payload).headers(owned);
    match producer.inner.send(record, Duration::from_secs(10)).await {
        Ok(delivery) => delivery.offset,
        Err((e, _)) => panic!("produce to {topic}/{partition}: {e}"),
    }
}

/// Sends one record with its own timestamp (`ms` since the epoch: a
/// record from the past) and waits for its acknowledgement.
pub async fn produce_at(producer: &Producer, topic: &str, partition: i32, key: &str, payload: &[u8], ms: i64) -> i64 {
    let record = FutureRecord::to(topic).partition(partition).key(key).payload(payload).timestamp(ms);
    match producer.inner.send(record, Duration::from_secs(10)).await {
        Ok(delivery) => delivery.offset,
        Err((e, _)) => panic!("produce to {topic}/{partition}: {e}"),
    }
}

/// Writes one record as given: any key, a value or none, any headers.
pub async fn produce_raw(
    producer: &Producer,
    topic: &str,
    partition: i32,
    key: &[u8],
    value: Option<&[u8]>,
    headers: &[(&str, &[u8])],
) -> i64 {
    let mut owned = rdkafka::message::OwnedHeaders::new();
    for (name, v) in headers {
        owned = owned.insert(rdkafka::message::Header { key: name, value: Some(*v) });
    }
    let mut record = FutureRecord::<[u8], [u8]>::to(topic).partition(partition).key(key).headers(owned);
    if let Some(value) = value {
        record = record.payload(value);
    }
    match producer.inner.send(record, Duration::from_secs(10)).await {
        Ok(delivery) => delivery.offset,
        Err((e, _)) => panic!("produce to {topic}/{partition}: {e}"),
    }
}

/// Deletes `topic` (Apache Kafka only), waiting until the broker's
/// metadata no longer has it.
pub async fn delete_topic(topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap_or_else(|e| panic!("admin client: {e}"));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin.delete_topics(&[topic], &options).await.unwrap_or_else(|e| panic!("delete {topic}: {e}"));
    for r in results {
        if let Err((t, code)) = r {
            panic!("delete topic {t}: {code}");
        }
    }
    crate::wait_until(&format!("{topic} deleted"), || partitions(topic) == 0).await;
}

/// Writes a record into a DLQ as idem would: the headers given, then the
/// seal under the suite's key ([`crate::DLQ_KEY`]).
pub async fn produce_sealed(
    producer: &Producer,
    topic: &str,
    partition: i32,
    key: &[u8],
    payload: &[u8],
    headers: &[(&str, &[u8])],
) -> i64 {
    let keys = idem::pipeline::DlqKeys::from_hex(crate::DLQ_KEY, None).unwrap_or_else(|e| panic!("key: {e}"));
    let seal = keys.seal(Some(key), Some(payload), headers.iter().map(|(n, v)| (*n, Some(*v))));
    let mut all = headers.to_vec();
    all.push((idem::pipeline::dlq_headers::SEAL, seal.as_bytes()));
    produce_with_headers(producer, topic, partition, key, payload, &all).await
}

/// Every record of `topic`, partition by partition, from the beginning to
/// the high watermark at the time of the call.
pub fn read_all(topic: &str) -> Vec<rdkafka::message::OwnedMessage> {
    use rdkafka::Message as _;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", crate::unique_name("reader"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap_or_else(|e| panic!("consumer: {e}"));
    let metadata =
        consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap_or_else(|e| panic!("metadata: {e}"));
    let partitions = metadata.topics().first().map(|t| t.partitions().len() as i32).unwrap_or(0);
    let mut out = Vec::new();
    for p in 0..partitions {
        let (low, high) =
            consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).unwrap_or_else(|e| panic!("watermarks: {e}"));
        if high <= low {
            continue;
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, p, Offset::Offset(low)).unwrap_or_else(|e| panic!("offset: {e}"));
        consumer.assign(&tpl).unwrap_or_else(|e| panic!("assign: {e}"));
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut next = low;
        while next < high {
            assert!(Instant::now() < deadline, "reading {topic}/{p}: stuck at {next} of {high}");
            if let Some(message) = consumer.poll(Duration::from_millis(200)) {
                let message = message.unwrap_or_else(|e| panic!("read {topic}: {e}"));
                next = message.offset() + 1;
                out.push(message.detach());
            }
        }
    }
    out
}

/// Sends every `(partition, payload)` at once, so that the producer packs
/// them into multi-record batches, and waits for all acknowledgements.
/// Records of one partition keep their order (the producer is idempotent).
pub async fn produce_all(producer: &Producer, topic: &str, records: &[(i32, Vec<u8>)]) -> Vec<i64> {
    let keyed: Vec<(i32, &str, &[u8])> = records.iter().map(|(p, payload)| (*p, "k", &payload[..])).collect();
    produce_all_keyed(producer, topic, &keyed).await
}

/// As [`produce_all`], each record `(partition, key, payload)` with its own key.
pub async fn produce_all_keyed(
    producer: &Producer,
    topic: &str,
    records: &[(i32, impl AsRef<str>, impl AsRef<[u8]>)],
) -> Vec<i64> {
    let mut offsets = Vec::with_capacity(records.len());
    // Chunks bound the producer's queue (100,000 messages by default).
    for chunk in records.chunks(10_000) {
        let sends = chunk.iter().map(|(p, key, payload)| produce(producer, topic, *p, key.as_ref(), payload.as_ref()));
        offsets.extend(futures::future::join_all(sends).await);
    }
    offsets
}

/// The group's committed offset of each partition (`None`: nothing committed).
pub fn committed(group: &str, topic: &str, partitions: i32) -> Vec<Option<i64>> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers());
    committed_from(config, group, topic, partitions)
}

/// [`committed`] on another broker: `config` names it and how to reach it.
pub fn committed_from(mut config: ClientConfig, group: &str, topic: &str, partitions: i32) -> Vec<Option<i64>> {
    let consumer: BaseConsumer = config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap_or_else(|e| panic!("consumer: {e}"));
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed =
        consumer.committed_offsets(tpl, Duration::from_secs(10)).unwrap_or_else(|e| panic!("committed offsets: {e}"));
    (0..partitions)
        .map(|p| match committed.find_partition(topic, p).map(|e| e.offset()) {
            Some(Offset::Offset(n)) => Some(n),
            _ => None,
        })
        .collect()
}

/// Each partition's high watermark: the offset after its last record.
pub fn high_watermarks(topic: &str, partitions: i32) -> Vec<i64> {
    let consumer: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", brokers()).create().unwrap_or_else(|e| panic!("consumer: {e}"));
    (0..partitions)
        .map(|p| {
            consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).unwrap_or_else(|e| panic!("watermarks: {e}")).1
        })
        .collect()
}

/// Commits `offset` for `group` on one partition, as an operator's tool would.
pub fn commit(group: &str, topic: &str, partition: i32, offset: i64) {
    let consumer = group_consumer(group);
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(offset)).unwrap_or_else(|e| panic!("offset: {e}"));
    consumer.commit(&tpl, rdkafka::consumer::CommitMode::Sync).unwrap_or_else(|e| panic!("commit: {e}"));
}

/// A consumer of `group` with auto-commit off, for offset look-ups and
/// commits, and for tests that consume as a plain group member.
pub fn group_consumer(group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .create()
        .unwrap_or_else(|e| panic!("consumer: {e}"))
}

/// Deletes the records of `topic`/`partition` before `offset` (Kafka's
/// DeleteRecords, as `kafka-delete-records.sh` or retention would), and
/// returns the partition's new low watermark.
pub async fn delete_records(topic: &str, partition: i32, offset: i64) -> i64 {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap_or_else(|e| panic!("admin client: {e}"));
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(offset)).unwrap_or_else(|e| panic!("offset: {e}"));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let result = admin.delete_records(&tpl, &options).await.unwrap_or_else(|e| panic!("delete records: {e}"));
    let entry = result.find_partition(topic, partition).unwrap_or_else(|| panic!("delete records: no answer"));
    if let Err(e) = entry.error() {
        panic!("delete records of {topic}/{partition} before {offset}: {e}");
    }
    match entry.offset() {
        Offset::Offset(low) => low,
        other => panic!("delete records: low watermark {other:?}"),
    }
}

/// The test broker's TLS listeners (scripts/kafka/broker): `SSL` and
/// `SASL_SSL` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 for one user), with the
/// CA that signed their certificate and one that did not.
#[derive(Debug, Clone)]
pub struct TlsListeners {
    /// Bootstrap address of the TLS-only listener.
    pub ssl: String,
    /// Bootstrap address of the TLS + SASL listener.
    pub sasl_ssl: String,
    pub ca_file: String,
    /// A CA that signed nothing the broker presents.
    pub other_ca_file: String,
    pub user: String,
    pub password: String,
}

impl TlsListeners {
    /// Read from the variables scripts/test exports; panics naming the
    /// missing one (another cluster at `KAFKA_BROKERS` has none of them).
    pub fn from_env() -> Self {
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| {
                panic!(
                    "{name} is not set: the TLS and SASL tests need the test broker's SSL and SASL_SSL listeners \
                     (scripts/test starts it and sets {name})"
                )
            })
        };
        Self {
            ssl: var("KAFKA_SSL_BROKERS"),
            sasl_ssl: var("KAFKA_SASL_SSL_BROKERS"),
            ca_file: var("KAFKA_TLS_CA"),
            other_ca_file: var("KAFKA_TLS_OTHER_CA"),
            user: var("KAFKA_SASL_USER"),
            password: var("KAFKA_SASL_PASSWORD"),
        }
    }

    /// `[kafka.properties]` for the SASL_SSL listener with `mechanism`
    /// (the password is not among them: it goes through `properties_env`).
    pub fn sasl_properties(&self, mechanism: &str) -> Vec<(&'static str, String)> {
        vec![
            ("security.protocol", "SASL_SSL".to_owned()),
            ("sasl.mechanism", mechanism.to_owned()),
            ("sasl.username", self.user.clone()),
            ("ssl.ca.location", self.ca_file.clone()),
        ]
    }

    /// A client of the SASL_SSL listener (SCRAM-SHA-512), password included.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.sasl_ssl);
        for (key, value) in self.sasl_properties("SCRAM-SHA-512") {
            config.set(key, value);
        }
        config.set("sasl.password", &self.password);
        config
    }
}

/// What the classic DescribeGroups says of `group`: its state and its
/// protocol (the assignor) when it is a classic group, the error when the
/// broker has no classic group of that name (a KIP-848 group is not one).
pub fn describe_classic_group(group: &str) -> Result<(String, String), String> {
    classic_group(group, |g| (g.state().to_owned(), g.protocol().to_owned()))
}

/// The state of classic `group` (`Stable`, `PreparingRebalance`, …) and
/// how many members it has.
pub fn classic_group_members(group: &str) -> Result<(String, usize), String> {
    classic_group(group, |g| (g.state().to_owned(), g.members().len()))
}

fn classic_group<T>(group: &str, read: impl FnOnce(&rdkafka::groups::GroupInfo) -> T) -> Result<T, String> {
    let consumer: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", brokers()).create().unwrap_or_else(|e| panic!("consumer: {e}"));
    let list = consumer.fetch_group_list(Some(group), Duration::from_secs(10)).map_err(|e| e.to_string())?;
    list.groups().first().map(read).ok_or_else(|| "no such group".into())
}
