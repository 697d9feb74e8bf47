//! librdkafka's mock cluster, for the faults the suite's single Apache
//! Kafka broker (no authorizer) cannot be made to give from outside: a
//! topic the producer is not authorised for (`refused.rs`), one topic's
//! partition without a leader while the others have one (`held.rs`), and
//! a fatal error of the idempotent producer (`fatal.rs`).
//!
//! Each test starts a cluster of its own, on a thread that owns it (it is
//! not `Send`), and points its host at it; the harness's broker
//! (`kafka::brokers()`, Apache Kafka) stays the one every other test of
//! this binary uses, so the tests can run in one process, side by side.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use idem_tests::kafka;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::{ClientConfig, Message as _, Offset, TopicPartitionList};

type Cluster = MockCluster<'static, DefaultProducerContext>;
type Command = Box<dyn FnOnce(&Cluster) + Send>;

/// A mock cluster of one broker, until dropped.
pub(crate) struct Mock {
    pub servers: String,
    commands: mpsc::Sender<Command>,
}

impl Mock {
    /// Starts one, for the fault `why` names (printed with the test's output).
    pub(crate) fn start(why: &str) -> Self {
        eprintln!("on librdkafka's mock cluster, for a fault Apache Kafka cannot give: {why}");
        let (ready_tx, ready_rx) = mpsc::channel::<Result<String, String>>();
        let (commands, received) = mpsc::channel::<Command>();
        std::thread::spawn(move || {
            let cluster = match MockCluster::new(1) {
                Ok(cluster) => cluster,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return;
                }
            };
            let _ = ready_tx.send(Ok(cluster.bootstrap_servers()));
            for command in received {
                command(&cluster);
            }
        });
        let servers = ready_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the mock cluster started within 60 s")
            .unwrap_or_else(|e| panic!("mock cluster: {e}"));
        Self { servers, commands }
    }

    /// Runs `f` on the cluster's thread; its answer.
    pub(crate) fn on<T: Send + 'static>(&self, f: impl FnOnce(&Cluster) -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        self.commands
            .send(Box::new(move |cluster| {
                let _ = tx.send(f(cluster));
            }))
            .expect("the mock cluster's thread");
        rx.recv_timeout(Duration::from_secs(60)).expect("the mock cluster answered within 60 s")
    }

    /// A topic of one partition, random name.
    pub(crate) fn topic(&self) -> String {
        let name = idem_tests::unique_name("idem_topic");
        self.create(&name);
        name
    }

    pub(crate) fn create(&self, name: &str) {
        let topic = name.to_owned();
        self.on(move |c| c.create_topic(&topic, 1, 1)).unwrap_or_else(|e| panic!("create topic {name}: {e}"));
    }

    /// The harness's producer, to this cluster.
    pub(crate) fn producer(&self) -> kafka::Producer {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.servers);
        kafka::producer_from(config)
    }

    /// Every record of `topic`'s partition 0 up to its high watermark now.
    pub(crate) fn read_all(&self, topic: &str) -> Vec<rdkafka::message::OwnedMessage> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.servers)
            .set("group.id", idem_tests::unique_name("reader"))
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let (low, high) = consumer.fetch_watermarks(topic, 0, Duration::from_secs(10)).expect("watermarks");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Offset(low)).expect("offset");
        consumer.assign(&tpl).expect("assign");
        let (mut out, mut next) = (Vec::new(), low);
        let deadline = Instant::now() + Duration::from_secs(20);
        while next < high {
            assert!(Instant::now() < deadline, "reading {topic}: stuck at {next} of {high}");
            if let Some(message) = consumer.poll(Duration::from_millis(200)) {
                let message = message.unwrap_or_else(|e| panic!("read {topic}: {e}"));
                next = message.offset() + 1;
                out.push(message.detach());
            }
        }
        out
    }

    /// The keys of `topic`'s records, in order.
    pub(crate) fn keys(&self, topic: &str) -> Vec<String> {
        self.read_all(topic).iter().map(|m| String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned()).collect()
    }
}
