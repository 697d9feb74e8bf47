//! The only broker restarted, for real, for 20, 30, 40 and 60 s, twice
//! each in a mixed order (a rejoin races the broker's restart differently
//! each time), with the billing → payments chain running on two hosts: one whose consumers are
//! static members under the classic protocol, one under KIP-848 (both
//! with a named instance id). After each outage every host is still up and
//! processing: none exits, none fences itself for good (a host whose rejoin
//! raced the broker's restart is fenced by its own earlier session; that is
//! its handler's incident, and it joins again: `pipeline::incident`). This
//! binary runs on a broker of its own (`kafka::use_own_broker`): stopping
//! the suite's shared one would fail every test beside it.

use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use idem_tests::db::TestDb;
use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;

/// One chain: its own database, provider, topics and host.
struct Chain {
    what: &'static str,
    db: TestDb,
    provider: PaymentProvider,
    orders: String,
    config: PathBuf,
    child: Child,
}

impl Chain {
    async fn start(what: &'static str, kip848: bool) -> Self {
        let db = TestDb::new().await.unwrap_or_else(|e| panic!("database: {e:#}"));
        let provider = PaymentProvider::start().await;
        let (orders, requests) = (kafka::create_topic(2).await, kafka::create_topic(2).await);
        // A broker just started may answer CreateTopics before its metadata
        // shows the topic; the host refuses an outbox topic it cannot see.
        for topic in [&orders, &requests] {
            let began = Instant::now();
            while kafka::partitions(topic) != 2 {
                assert!(began.elapsed() < Duration::from_secs(30), "topic {topic} not in the metadata within 30 s");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let mut billing = HandlerSpec::billing_announcing(&orders, &provider.base_url(), &requests);
        let mut payments = HandlerSpec::payments(&requests);
        if kip848 {
            (billing, payments) = (billing.with_consumer_protocol(), payments.with_consumer_protocol());
        }
        let config = host::write_config(&db.url, &[billing, payments]);
        db.allow_emits(&config).await;
        let id = idem_tests::unique_name(what);
        let child = host::spawn(&config, false, &[("IDEM_INSTANCE_ID", id.as_str())]);
        Self { what, db, provider, orders, config, child }
    }

    /// Orders `from..from + n`, round-robin over the two partitions.
    async fn send(&self, producer: &kafka::Producer, from: i64, n: i64) {
        let records: Vec<(i32, Vec<u8>)> =
            (from..from + n).map(|i| ((i % 2) as i32, host::order_payload(i).1)).collect();
        kafka::produce_all(producer, &self.orders, &records).await;
    }

    async fn requests(&self) -> i64 {
        self.db.count("SELECT count(*) FROM payments.request").await
    }

    /// Until `n` payment requests are taken, within 120 s.
    async fn flowed(&mut self, n: i64, after: &str) {
        let began = Instant::now();
        while self.requests().await < n {
            self.alive(&format!("waiting for {n} requests {after}"));
            assert!(
                began.elapsed() < Duration::from_secs(120),
                "{}: {} of {n} payment requests taken 120 s {after}",
                self.what,
                self.requests().await
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn alive(&mut self, when: &str) {
        let exited = self.child.try_wait().unwrap_or_else(|e| panic!("{e}"));
        assert!(exited.is_none(), "{}: the host exited {when}: {exited:?}", self.what);
    }

    /// SIGTERM; every order charged once and requested once.
    async fn finish(self, n: i64) {
        // How often the outages made an incident (a self-fence after a
        // rejoin that raced the broker's restart): shown, not asserted.
        let incidents: Vec<String> = host::metrics(&self.config)
            .await
            .into_iter()
            .filter(|l| l.starts_with("idem_handler_incidents_total{") && !l.ends_with(" 0"))
            .collect();
        println!("{}: incidents {incidents:?}", self.what);
        let Self { what, db, provider, child, .. } = self;
        host::signal(&child, "TERM");
        let (status, reports) = host::wait_report(child);
        assert!(status.success(), "{what}: {status}");
        let count = |sql: &'static str| db.count(sql);
        assert_eq!(count("SELECT count(*) FROM billing.charge").await, n, "{what}: each order charged once");
        assert_eq!(count("SELECT count(DISTINCT order_id) FROM billing.charge").await, n, "{what}");
        assert_eq!(provider.charges(), n as usize, "{what}: one charge per order at the provider");
        assert_eq!(count("SELECT count(*) FROM payments.request").await, n, "{what}: each request taken once");
        for r in &reports {
            assert_eq!((r.failed, r.dead_lettered), (0, 0), "{what}: {r:?}");
        }
        db.drop_database().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn broker_restarts_of_20_to_60_s_twice_each_leave_every_host_processing_under_both_protocols() {
    let broker = kafka::use_own_broker("stopped for 20 to 60 s, eight times, while the chain runs");
    idem_tests::init_logging();
    let producer = kafka::producer();
    let mut chains = [Chain::start("classic", false).await, Chain::start("kip848", true).await];
    let mut sent = 0;
    for chain in &chains {
        chain.send(&producer, 1, 20).await;
    }
    sent += 20;
    for chain in &mut chains {
        chain.flowed(sent, "after the start").await;
    }
    for outage in [20u64, 40, 30, 60, 40, 20, 60, 30] {
        broker.stop();
        let down = Instant::now();
        while down.elapsed() < Duration::from_secs(outage) {
            for chain in &mut chains {
                chain.alive(&format!("{:?} into a {outage} s outage", down.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        broker.start();
        let up = Instant::now();
        for chain in &chains {
            chain.send(&producer, sent + 1, 20).await;
        }
        sent += 20;
        for chain in &mut chains {
            chain.flowed(sent, &format!("after a {outage} s outage")).await;
            chain.alive(&format!("after a {outage} s outage"));
        }
        println!("after a {outage} s outage both chains flowed again within {:?} of the broker's start", up.elapsed());
    }
    let [classic, kip848] = chains;
    classic.finish(sent).await;
    kip848.finish(sent).await;
    broker.remove();
}
