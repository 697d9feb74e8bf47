//! `idem run` against a real broker and real PostgreSQL: offsets, duplicates,
//! invalid records, crashes, rebalances.

#![expect(clippy::expect_used, reason = "test helpers state their expectations with expect, like the tests")]

use std::time::Duration;

use idem_tests::db::TestDb;
use idem_tests::host::{self, HandlerSpec, order_payload};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;
use idem_tests::wait_until;

mod batching;
mod canary;
mod capture;
mod dead_letter_actions;
mod dead_letter_index;
mod dead_letters;
mod failures;
mod first_run;
mod fleet;
mod formats;
mod guest_text;
mod hostile_records;
mod lanes;
mod languages;
mod ledger_audit;
mod modules;
mod observability;
mod operate;
mod outbox;
mod outbox_rules;
mod pauses;
mod quarantine;
mod restarts;
mod retention;
mod revocation;
mod rewinds;
mod security;
mod shadow;
mod spanning;
mod throttles;
mod transactions;

struct Env {
    db: TestDb,
    provider: PaymentProvider,
    topic: String,
    partitions: i32,
    producer: kafka::Producer,
}

impl Env {
    async fn new(partitions: i32) -> Self {
        idem_tests::init_logging();
        let db = TestDb::new().await.unwrap_or_else(|e| panic!("test database: {e:#}"));
        let provider = PaymentProvider::start().await;
        let topic = kafka::create_topic(partitions).await;
        Self { db, provider, topic, partitions, producer: kafka::producer() }
    }

    fn billing(&self) -> HandlerSpec {
        HandlerSpec::billing(&self.topic, &self.provider.base_url())
    }

    async fn send(&self, partition: i32, payload: &[u8]) -> i64 {
        kafka::produce(&self.producer, &self.topic, partition, "k", payload).await
    }

    /// `n` distinct orders round-robin over the partitions, sent at once (in
    /// multi-record batches, as real producers send); returns their payloads.
    /// Each order is keyed by its customer, one of 50, as a producer keys
    /// by aggregate (so `ordering = "key"` has keys to tell apart).
    async fn send_orders(&self, n: i64) -> Vec<Vec<u8>> {
        let records: Vec<(i32, String, Vec<u8>)> = (0..n)
            .map(|i| ((i % i64::from(self.partitions)) as i32, format!("customer-{}", i % 50), order_payload(i + 1).1))
            .collect();
        kafka::produce_all_keyed(&self.producer, &self.topic, &records).await;
        records.into_iter().map(|(_, _, payload)| payload).collect()
    }

    /// A proxy to the test database that the test can cut, and the
    /// database URL through it.
    async fn database_proxy(&self) -> (idem_tests::proxy::Proxy, String) {
        let mut url = reqwest::Url::parse(&self.db.url).expect("database URL");
        let (host, port) = (url.host_str().unwrap_or("127.0.0.1").to_owned(), url.port().unwrap_or(5432));
        let server =
            tokio::net::lookup_host((host.as_str(), port)).await.ok().and_then(|mut a| a.next()).expect("server");
        let proxy = idem_tests::proxy::Proxy::start(server).await;
        url.set_host(Some("127.0.0.1")).expect("host");
        url.set_port(Some(proxy.addr.port())).expect("port");
        (proxy, url.to_string())
    }

    async fn count(&self, sql: &str) -> i64 {
        self.db.count(sql).await
    }

    /// Waits until `billing.charge` holds `n` rows, failing past `within`.
    async fn charged(&self, n: i64, within: std::time::Duration) {
        let deadline = std::time::Instant::now() + within;
        while self.count(CHARGES).await < n {
            assert!(std::time::Instant::now() < deadline, "not all charged: {} of {n}", self.count(CHARGES).await);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Asserts that `scenario.effect` holds the effects of exactly the
    /// events `ok`, each once (a failed event's writes rolled back).
    async fn assert_effects_once(&self, ok: &[uuid::Uuid]) {
        let effects: Vec<(uuid::Uuid, i64)> =
            sqlx::query_as("SELECT event_id, count(*) FROM scenario.effect GROUP BY event_id")
                .fetch_all(&self.db.pool)
                .await
                .expect("effects");
        assert_eq!(effects.len(), ok.len(), "the failed events left nothing: {effects:?}");
        assert!(effects.iter().all(|(id, n)| *n == 1 && ok.contains(id)), "each effect once: {effects:?}");
    }

    async fn finish(self) {
        self.db.drop_database().await;
    }
}

pub(crate) const CHARGES: &str = "SELECT count(*) FROM billing.charge";
pub(crate) const DISTINCT_ORDERS: &str = "SELECT count(DISTINCT order_id) FROM billing.charge";

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_events_with_redelivered_duplicates_are_charged_once_each() {
    let env = Env::new(6).await;
    let sent = env.send_orders(1000).await;
    // 30% redelivered: the same payload (same eventId) at new offsets, half
    // on the same partition, half on another one.
    let redelivered: Vec<(i32, Vec<u8>)> = sent
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 10 < 3)
        .map(|(i, payload)| ((if i % 2 == 0 { i % 6 } else { (i + 1) % 6 }) as i32, payload.clone()))
        .collect();
    kafka::produce_all(&env.producer, &env.topic, &redelivered).await;
    let spec = env.billing();
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let reports = host::run_until_drained(&config).await;
    let r = &reports[0];

    assert_eq!(env.count(CHARGES).await, 1000);
    assert_eq!(env.count(DISTINCT_ORDERS).await, 1000, "no order charged twice");
    assert_eq!(env.count("SELECT count(*) FROM idem.processed_event WHERE consumer = 'billing'").await, 1000);
    assert_eq!(env.provider.charges(), 1000, "the provider saw 1000 distinct keys");
    assert_eq!(env.provider.keys().len(), 1000, "and no duplicate ever reached it");
    assert_eq!((r.delivered, r.processed, r.duplicates, r.invalid, r.failed), (1300, 1000, 300, 0, 0), "{r:?}");
    assert_eq!(r.offset_resets, 0, "a new group starting at auto.offset.reset is no reset (logged at info)");
    assert_eq!(
        kafka::committed(&spec.group_id, &env.topic, 6),
        kafka::high_watermarks(&env.topic, 6).into_iter().map(Some).collect::<Vec<_>>(),
        "every partition is committed to its end"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_payload_at_two_offsets_is_processed_once() {
    let env = Env::new(1).await;
    let (_, payload) = order_payload(1);
    let first = env.send(0, &payload).await;
    let second = env.send(0, &payload).await;
    assert_ne!(first, second);
    let config = host::write_config(&env.db.url, &[env.billing()]);
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.duplicates), (1, 1), "{r:?}");
    assert_eq!(env.count(CHARGES).await, 1);
    assert_eq!(env.provider.charges(), 1);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_records_are_counted_and_skipped_and_the_partition_keeps_flowing() {
    let env = Env::new(1).await;
    env.send_orders(3).await;
    let v4 = serde_json::json!({
        "eventId": "0b7f1d2e-8f9a-4c3b-9d2e-1f0a2b3c4d5e", "eventType": "order.confirmed.v1", "occurredAt": "2026-11-30T12:00:00Z",
        "aggregateType": "Order", "orderId": 1, "customerId": 1, "totalAmount": 1.0, "currency": "EUR",
    });
    let (_, good) = order_payload(99);
    let mut unknown_type: serde_json::Value = serde_json::from_slice(&good).expect("json");
    unknown_type["eventType"] = "order.cancelled.v1".into();
    unknown_type["eventId"] = uuid::Uuid::now_v7().to_string().into();
    let mut schema_violation: serde_json::Value = serde_json::from_slice(&good).expect("json");
    schema_violation["currency"] = "euro".into();
    schema_violation["eventId"] = uuid::Uuid::now_v7().to_string().into();
    let invalid: Vec<Vec<u8>> = vec![
        b"not json at all".to_vec(),
        br#"{"eventType":"order.confirmed.v1","occurredAt":"2026-11-30T12:00:00Z"}"#.to_vec(),
        v4.to_string().into_bytes(),
        unknown_type.to_string().into_bytes(),
        schema_violation.to_string().into_bytes(),
    ];
    for payload in &invalid {
        env.send(0, payload).await;
    }
    let after = env.send_orders(3).await;
    let spec = env.billing();
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.invalid, r.processed, r.failed), (5, 6, 0), "{r:?}");
    assert_eq!(env.count(CHARGES).await, 6, "valid events before and after the invalid ones were charged");
    assert_eq!(after.len(), 3);
    assert_eq!(
        kafka::committed(&spec.group_id, &env.topic, 1),
        vec![Some(11)],
        "the invalid records were committed past"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_handlers_in_different_groups_each_process_an_event_once() {
    let env = Env::new(3).await;
    let sent = env.send_orders(60).await;
    for payload in sent.iter().take(20) {
        env.send(1, payload).await;
    }
    let config = host::write_config(&env.db.url, &[env.billing(), HandlerSpec::notification(&env.topic)]);
    let reports = host::run_until_drained(&config).await;
    assert_eq!(env.count(CHARGES).await, 60);
    assert_eq!(env.count("SELECT count(*) FROM notification.sent").await, 60);
    assert_eq!(env.count("SELECT count(*) FROM idem.processed_event WHERE consumer = 'billing'").await, 60);
    assert_eq!(env.count("SELECT count(*) FROM idem.processed_event WHERE consumer = 'notification'").await, 60);
    for r in &reports {
        assert_eq!((r.processed, r.duplicates), (60, 20), "{r:?}");
    }
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_clean_stop_the_committed_offsets_are_the_end_and_nothing_is_redelivered() {
    let env = Env::new(3).await;
    env.send_orders(90).await;
    let spec = env.billing();
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!(r.processed, 90);
    let ends: Vec<Option<i64>> = kafka::high_watermarks(&env.topic, 3).into_iter().map(Some).collect();
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 3), ends);

    // Restarted (the `idem` binary this time), the host is assigned every
    // partition, finds each committed at its end and leaves without
    // receiving a record.
    let (status, reports) =
        tokio::task::spawn_blocking(move || host::wait_report(host::spawn(&config, true, &[]))).await.expect("wait");
    assert!(status.success(), "{status}");
    let r = &reports[0];
    assert!(r.rebalances >= 1, "the restarted host was assigned the partitions: {r:?}");
    assert_eq!(r.delivered, 0, "nothing was redelivered after the restart: {r:?}");
    assert_eq!(r.offset_resets, 0, "each partition resumed at its committed offset: {r:?}");
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 3), ends);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_the_transaction_and_the_offset_commit_causes_no_double_charge() {
    let env = Env::new(3).await;
    env.send_orders(150).await;
    let mut spec = env.billing();
    spec.batch = Some((10, 5));
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));

    // The fault point aborts the process right after the 6th transaction
    // committed (each partition's first event runs alone, then batches of
    // up to 10), before its offset can be committed.
    let crashing = host::spawn(&config, false, &[("IDEM_TEST_CRASH_AFTER_COMMITS", "6")]);
    let (status, _) = host::wait_report(crashing);
    assert!(!status.success(), "the host died at the fault point: {status}");
    // Or a little more: other partitions' transactions may commit in the
    // instant before the abort.
    let at_crash = env.count(CHARGES).await;
    assert!((6..150).contains(&at_crash), "{at_crash} charged before the crash");

    let (status, reports) = host::wait_report(host::spawn(&config, true, &[]));
    assert!(status.success(), "{status}");
    let r = &reports[0];
    assert!(r.duplicates >= 1, "the events committed before the crash came back and were skipped: {r:?}");
    assert_eq!(r.processed as i64, 150 - at_crash, "{r:?}");
    assert_eq!(env.count(CHARGES).await, 150, "0 lost");
    assert_eq!(env.count(DISTINCT_ORDERS).await, 150, "0 double charges");
    assert_eq!(env.provider.charges(), 150, "one charge per order: repeated requests carried the same key");
    // Events in flight on other partitions at the abort had sent their
    // requests but not committed: they run again and send the same keys
    // (the provider's dedup makes that one charge each). At most the other
    // `concurrency - 1` partitions' batches can be in that state.
    let repeats = env.provider.keys().len() - 150;
    assert!(repeats < spec.concurrency * 10, "{repeats} requests repeated; only in-flight events may repeat");
    env.finish().await;
}

/// Two host processes in one group: the second joins mid-stream, the first
/// leaves mid-stream (SIGTERM); every event is charged exactly once.
/// `protocol`: the group protocol, "classic" or "consumer" (KIP-848).
async fn rebalance_mid_stream(protocol: &'static str, assignor: &'static str) {
    rebalance_mid_stream_with(protocol, assignor, |spec| spec).await;
}

/// [`rebalance_mid_stream`] with the handler's spec as `tune` makes it.
async fn rebalance_mid_stream_with(
    protocol: &'static str,
    assignor: &'static str,
    tune: impl Fn(HandlerSpec) -> HandlerSpec,
) {
    let env = Env::new(6).await;
    // Slow charges keep the stream going through both rebalances.
    env.provider.set_latency(Duration::from_millis(50));
    env.send_orders(600).await;
    let mut spec = env.billing();
    spec.group_protocol = protocol;
    spec.assignor = assignor;
    spec.concurrency = 2;
    let spec = tune(spec);
    // Same handler, same group; the key prefix only tells who sent a charge
    // (and would show an event charged by both as two charges).
    let config_a = host::write_config(&env.db.url, &[HandlerSpec { key_prefix: Some("a".into()), ..spec.clone() }]);
    let config_b = host::write_config(&env.db.url, &[HandlerSpec { key_prefix: Some("b".into()), ..spec.clone() }]);
    let by = |prefix: &str| env.provider.keys().iter().flatten().filter(|k| k.starts_with(prefix)).count();

    // Two `idem run` processes in one group.
    let a = host::spawn(&config_a, false, &[]);
    wait_until("a has charged 100 orders", || by("a:") >= 100).await;
    let b = host::spawn(&config_b, false, &[]);
    // The rebalance gave b partitions while a kept working.
    wait_until("b has charged 10 orders", || by("b:") >= 10).await;
    // The group runs the protocol it was configured for: the classic
    // DescribeGroups knows a classic group and its assignor, and has no
    // classic group by a KIP-848 group's name (Kafka 4.4 answers "Dead").
    let described = kafka::describe_classic_group(&spec.group_id);
    if protocol == "classic" {
        assert_eq!(described.map(|(_, p)| p), Ok(assignor.to_owned()), "a classic group, with its assignor");
    } else {
        let classic = described.as_ref().is_ok_and(|(state, p)| state != "Dead" || !p.is_empty());
        assert!(!classic, "a KIP-848 group, not a classic one: {described:?}");
    }
    host::signal(&a, "TERM");
    let (status_a, ra) = tokio::task::spawn_blocking(move || host::wait_report(a)).await.expect("wait a");
    assert!(status_a.success(), "{status_a}");
    let stopped_at = env.count(CHARGES).await;
    assert!(stopped_at < 600, "a stopped mid-stream ({stopped_at} charged)");
    // b takes a's partitions over, finishes the stream and commits it to
    // the end (a commit refused while the group rebalances goes out again).
    wait_until("600 orders are charged", || env.provider.charges() >= 600).await;
    let ends: Vec<Option<i64>> = kafka::high_watermarks(&env.topic, 6).into_iter().map(Some).collect();
    wait_until("b committed every partition to its end", || kafka::committed(&spec.group_id, &env.topic, 6) == ends)
        .await;
    host::signal(&b, "TERM");
    let (status_b, rb) = tokio::task::spawn_blocking(move || host::wait_report(b)).await.expect("wait b");
    assert!(status_b.success(), "{status_b}");

    assert_eq!(env.count(CHARGES).await, 600, "0 lost");
    assert_eq!(env.count(DISTINCT_ORDERS).await, 600, "0 double effects");
    // Every order's request went out. A batch in flight when its partition
    // was revoked (or its host stopped) is rolled back and runs again at
    // the next owner, whose request repeats the key: with one prefix per
    // handler, as in production, the provider charges it once. The
    // prefixes here only tell the hosts apart.
    let mut ids: Vec<String> = env
        .provider
        .keys()
        .into_iter()
        .flatten()
        .filter_map(|k| k.split_once(':').map(|(_, id)| id.to_owned()))
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 600, "every order reached the provider");
    assert!(by("a:") >= ra[0].processed as usize, "{ra:?}");
    assert!(by("b:") >= rb[0].processed as usize, "{rb:?}");
    assert_eq!(ra[0].processed + rb[0].processed, 600, "{ra:?} {rb:?}");
    assert!(rb[0].rebalances >= 2, "b was assigned partitions at its join and at a's departure: {rb:?}");
    assert_eq!(
        kafka::committed(&spec.group_id, &env.topic, 6),
        kafka::high_watermarks(&env.topic, 6).into_iter().map(Some).collect::<Vec<_>>()
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rebalance_mid_stream_with_cooperative_sticky_loses_and_doubles_nothing() {
    rebalance_mid_stream("classic", "cooperative-sticky").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rebalance_mid_stream_with_key_lanes_loses_and_doubles_nothing() {
    rebalance_mid_stream_with("classic", "cooperative-sticky", |spec| spec.with_lanes("key", 4).with_max_concurrent(4))
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rebalance_mid_stream_with_an_eager_assignor_loses_and_doubles_nothing() {
    rebalance_mid_stream("classic", "range").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rebalance_mid_stream_under_kip_848_loses_and_doubles_nothing() {
    rebalance_mid_stream("consumer", "uniform").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_partition_does_not_stall_the_others() {
    let env = Env::new(2).await;
    // Partition 0: five orders the provider answers 2 s late each.
    for i in 0..5 {
        let (_, payload) = order_payload(10_000 + i);
        let mut slow: serde_json::Value = serde_json::from_slice(&payload).expect("json");
        slow["currency"] = "SLO".into();
        env.send(0, slow.to_string().as_bytes()).await;
    }
    // Partition 1: two hundred ordinary ones.
    for i in 0..200 {
        env.send(1, &order_payload(i + 1).1).await;
    }
    let mut spec = env.billing();
    spec.concurrency = 2;
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let host = host::InProcess::start(&config);

    let slow = || env.provider.seen().iter().filter(|s| s.body.contains(idem_tests::provider::SLOW_MARKER)).count();
    wait_until("the fast partition is done", || env.provider.charges() - slow() >= 200).await;
    assert!(slow() < 5, "partition 1 finished while partition 0 was still working through its slow events");
    wait_until("the slow partition is done", || env.provider.charges() >= 205).await;
    let r = host.stop().await;
    assert_eq!(r[0].processed, 205, "{r:?}");
    assert_eq!(env.count(CHARGES).await, 205);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_events_are_retried_then_dead_lettered_counted_and_committed_past() {
    let env = Env::new(1).await;
    for scenario in ["ok", "write-then-fail", "write-then-retryable", "write-then-trap", "ok"] {
        let payload = serde_json::json!({
            "eventId": uuid::Uuid::now_v7().to_string(), "eventType": "test.scenario.v1",
            "occurredAt": "2026-11-30T12:00:00Z", "scenario": scenario,
        });
        env.send(0, payload.to_string().as_bytes()).await;
    }
    let mut spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    spec.max_attempts = 3;
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!(
        (r.processed, r.failed, r.retries, r.dead_lettered),
        (2, 3, 2, 3),
        "the retryable one ran 3 times, then went to the DLQ: {r:?}"
    );
    assert_eq!(kafka::read_all(&format!("{}.scenarios.dlq", env.topic)).len(), 3);
    assert_eq!(env.count("SELECT count(*) FROM scenario.effect").await, 2, "the failed events left nothing");
    assert_eq!(env.count("SELECT count(*) FROM idem.processed_event").await, 2);
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(5)], "and the partition moved past them");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_mid_stream_finishes_in_flight_events_and_commits_them() {
    let env = Env::new(3).await;
    env.provider.set_latency(Duration::from_millis(30));
    env.send_orders(300).await;
    let spec = env.billing();
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));

    let child = host::spawn(&config, false, &[]);
    wait_until("50 charges", || env.provider.charges() >= 50).await;
    host::signal(&child, "TERM");
    let (status, reports) = host::wait_report(child);
    assert!(status.success(), "SIGTERM is a clean exit: {status}");
    let charged = env.count(CHARGES).await;
    assert!(charged < 300, "stopped mid-stream ({charged} charged)");
    assert_eq!(reports[0].processed as i64, charged, "{:?}", reports[0]);
    // Offsets start at 0 and every record is a distinct valid order, so the
    // committed offsets add up to the records processed: every event that
    // was in flight at SIGTERM finished and was committed.
    let committed: i64 = kafka::committed(&spec.group_id, &env.topic, 3).iter().map(|o| o.unwrap_or(0)).sum();
    assert_eq!(committed, charged);

    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed as i64, r.duplicates), (300 - charged, 0), "nothing was redelivered: {r:?}");
    assert_eq!(env.count(CHARGES).await, 300);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_committed_offset_out_of_range_is_reset_logged_and_counted() {
    let env = Env::new(1).await;
    env.send_orders(10).await;
    let spec = env.billing();
    // As if the log had been recreated, or the committed offset were stale.
    kafka::commit(&spec.group_id, &env.topic, 0, 1_000);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!(r.offset_resets, 1, "{r:?}");
    assert_eq!(r.processed, 10, "auto.offset.reset = earliest started over: {r:?}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_outage_mid_stream_delays_events_but_loses_and_doubles_none() {
    let env = Env::new(2).await;
    env.provider.set_latency(Duration::from_millis(20));
    env.send_orders(60).await;
    // The host reaches PostgreSQL through a proxy the test can cut.
    let (proxy, via_proxy) = env.database_proxy().await;
    let config = host::write_config(&via_proxy, std::slice::from_ref(&env.billing()));
    let host = host::InProcess::start(&config);

    wait_until("10 charges", || env.provider.charges() >= 10).await;
    proxy.cut();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = env.count(CHARGES).await;
    assert!(during < 60, "the outage happened mid-stream ({during} charged)");
    proxy.restore();
    wait_until("60 charges at the provider", || env.provider.charges() >= 60).await;
    for _ in 0..200 {
        if env.count(CHARGES).await >= 60 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = host.stop().await;
    assert_eq!(env.count(CHARGES).await, 60, "0 lost: {:?}", r[0]);
    assert_eq!(env.count(DISTINCT_ORDERS).await, 60, "0 double effects");
    assert_eq!(env.provider.charges(), 60, "a retried charge reused its key");
    // The outage (2 s) outlasts the handler's whole retry budget (5
    // attempts, 20 to 200 ms apart): only because it spends no attempts
    // does nothing reach the DLQ.
    assert_eq!(r[0].failed + r[0].dead_lettered, 0, "an outage is not the events' fault: {:?}", r[0]);
    assert!(r[0].unavailable > 0, "events were retried during the outage: {:?}", r[0]);
    assert_eq!(r[0].retries, 0, "without spending attempts: {:?}", r[0]);
    env.finish().await;
}
