//! The broker: `KAFKA_BROKERS` when set (any Kafka-compatible cluster),
//! otherwise a Tansu broker started once per test process on a free
//! loopback port, with in-memory storage, and stopped when the process ends.

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// The bootstrap servers the tests use.
pub fn brokers() -> String {
    static BROKERS: OnceLock<Result<String, String>> = OnceLock::new();
    let found = BROKERS.get_or_init(|| match std::env::var("KAFKA_BROKERS") {
        Ok(brokers) if !brokers.is_empty() => Ok(brokers),
        _ => start_tansu(),
    });
    match found {
        Ok(b) => b.clone(),
        Err(e) => panic!("{e}"),
    }
}

fn start_tansu() -> Result<String, String> {
    let bin = std::env::var("TANSU_BIN").unwrap_or_else(|_| "tansu".into());
    let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?.port();
    let url = format!("tcp://127.0.0.1:{port}");
    // A shell watchdog stops the broker when this test process is gone.
    let script = format!(
        "{bin} broker --storage-engine memory://tansu/ --listener-url {url} --advertised-listener-url {url} \
         >/dev/null 2>&1 & b=$!; while kill -0 {parent} 2>/dev/null && kill -0 $b 2>/dev/null; do sleep 1; done; kill $b 2>/dev/null",
        parent = std::process::id()
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("failed to start tansu ({bin}): {e}; run scripts/setup or set KAFKA_BROKERS"))?;
    let brokers = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let probe: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", &brokers).create().map_err(|e| e.to_string())?;
    while Instant::now() < deadline {
        if probe.fetch_metadata(None, Duration::from_secs(1)).is_ok() {
            return Ok(brokers);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!("tansu did not answer on {brokers} within 30 s; is it installed (scripts/setup)?"))
}

/// Creates a topic with a random name and `partitions` partitions.
pub async fn create_topic(partitions: i32) -> String {
    let name = crate::unique_name("idem_topic");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap_or_else(|e| panic!("admin client: {e}"));
    let topic = NewTopic::new(&name, partitions, TopicReplication::Fixed(1));
    let results = admin
        .create_topics([&topic], &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))))
        .await
        .unwrap_or_else(|e| panic!("create topic {name}: {e}"));
    for r in results {
        if let Err((topic, code)) = r {
            panic!("create topic {topic}: {code}");
        }
    }
    name
}

pub fn producer() -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        // One record per batch: Tansu 0.6.0 answers ListOffsets with a wrong
        // high watermark after multi-record batches (2,000 records: 1),
        // which would fool every "consumed to the end" check.
        .set("batch.num.messages", "1")
        .create()
        .unwrap_or_else(|e| panic!("producer: {e}"))
}

/// Sends one record to `partition` and waits for its acknowledgement.
pub async fn produce(producer: &FutureProducer, topic: &str, partition: i32, key: &str, payload: &[u8]) -> i64 {
    let record = FutureRecord::to(topic).partition(partition).key(key).payload(payload);
    match producer.send(record, Duration::from_secs(10)).await {
        Ok(delivery) => delivery.offset,
        Err((e, _)) => panic!("produce to {topic}/{partition}: {e}"),
    }
}

/// The group's committed offset of each partition (`None`: nothing committed).
pub fn committed(group: &str, topic: &str, partitions: i32) -> Vec<Option<i64>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
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
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap_or_else(|e| panic!("consumer: {e}"));
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(offset)).unwrap_or_else(|e| panic!("offset: {e}"));
    consumer.commit(&tpl, rdkafka::consumer::CommitMode::Sync).unwrap_or_else(|e| panic!("commit: {e}"));
}
