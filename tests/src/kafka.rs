//! The broker: `KAFKA_BROKERS` when set (any Kafka cluster), otherwise
//! librdkafka's mock cluster, started once per test process.
//!
//! Why the mock cluster and not Tansu (the broker the suite used before):
//! Tansu 0.6.0 with memory storage cannot serve a fetch that starts inside
//! a multi-record batch, and every real producer batches. The mock cluster
//! is the in-memory Kafka that librdkafka's own test suite runs against: it
//! stores produce batches whole and serves a fetch from the batch that
//! holds the requested offset (the client skips what lies before it), as
//! Apache Kafka does; it keeps watermarks, consumer groups (join, sync,
//! heartbeats, session timeouts, the 3 s initial rebalance delay) and
//! committed offsets. It lives inside the process that starts it, so `idem
//! run` child processes reach it over loopback TCP like any broker. It has
//! no CreateTopics: topics are created through its own API here (and
//! through the admin API on a real cluster). It costs nothing to install:
//! it is part of the librdkafka that the rdkafka crate already builds.

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

fn broker() -> &'static Broker {
    static BROKER: OnceLock<Result<Broker, String>> = OnceLock::new();
    let found = BROKER.get_or_init(|| match std::env::var("KAFKA_BROKERS") {
        Ok(brokers) if !brokers.is_empty() => Ok(Broker::External(brokers)),
        _ => start_mock(),
    });
    match found {
        Ok(b) => b,
        Err(e) => panic!("{e}"),
    }
}

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
    let servers = ready_rx.recv().map_err(|e| format!("mock cluster: {e}"))??;
    Ok(Broker::Mock { servers, commands: command_tx })
}

/// Runs `f` with the mock cluster and returns its answer; panics when the
/// tests run against `KAFKA_BROKERS` (fault injection needs the mock).
pub fn on_mock<T: Send + 'static>(
    f: impl FnOnce(&MockCluster<'static, rdkafka::producer::DefaultProducerContext>) -> T + Send + 'static,
) -> T {
    let Broker::Mock { commands, .. } = broker() else {
        panic!("this test injects broker faults and needs librdkafka's mock cluster (unset KAFKA_BROKERS)");
    };
    let (tx, rx) = mpsc::channel();
    let command: MockCommand = Box::new(move |cluster| {
        let _ = tx.send(f(cluster));
    });
    commands.send(command).unwrap_or_else(|e| panic!("mock cluster gone: {e}"));
    rx.recv().unwrap_or_else(|e| panic!("mock cluster gone: {e}"))
}

/// Whether the tests run against the in-process mock cluster.
pub fn is_mock() -> bool {
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
            let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
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
/// a handler's dead-letter topic, which idem refuses to start without (the
/// mock cluster has no CreateTopics for idem to create it itself).
pub fn create_topic_like(name: &str, like: &str) {
    let consumer: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", brokers()).create().unwrap_or_else(|e| panic!("consumer: {e}"));
    let partitions = |topic: &str| {
        let metadata =
            consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap_or_else(|e| panic!("metadata: {e}"));
        metadata.topics().first().filter(|t| t.error().is_none()).map(|t| t.partitions().len() as i32).unwrap_or(0)
    };
    if partitions(name) > 0 {
        return;
    }
    let count = partitions(like).max(1);
    // On a thread of its own: the caller may be inside an async runtime.
    let topic = name.to_owned();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
        runtime.unwrap_or_else(|e| panic!("runtime: {e}")).block_on(create_named_topic(&topic, count));
    })
    .join()
    .unwrap_or_else(|_| panic!("creating topic {name} failed"));
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
    let record = FutureRecord::to(topic).partition(partition).key(key).payload(payload);
    match producer.inner.send(record, Duration::from_secs(10)).await {
        Ok(delivery) => delivery.offset,
        Err((e, _)) => panic!("produce to {topic}/{partition}: {e}"),
    }
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
    let mut offsets = Vec::with_capacity(records.len());
    // Chunks bound the producer's queue (100,000 messages by default).
    for chunk in records.chunks(10_000) {
        let sends = chunk.iter().map(|(p, payload)| produce(producer, topic, *p, "k", payload));
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
