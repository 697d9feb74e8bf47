//! Regression tests for a broker that serves batching producers the way
//! Kafka does. Every real producer packs queued records into multi-record
//! batches; a fetch that starts inside one (a group member resuming at a
//! committed offset, a partition resumed after backpressure, a host
//! restarted after a crash) must still deliver the records from that offset.
//! Tansu 0.6.0 delivered nothing in each of these cases, forever.

use std::time::{Duration, Instant};

use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;
use rdkafka::Message as _;
use rdkafka::consumer::{CommitMode, Consumer as _};

use super::{CHARGES, DISTINCT_ORDERS, Env};

/// Sends `n` orders and asserts that they left in multi-record batches, so
/// that the test runs in the world users have.
async fn send_batched_orders(env: &Env, n: i64) -> Vec<Vec<u8>> {
    let before = kafka::produce_requests(&env.producer).await;
    let sent = env.send_orders(n).await;
    let requests = kafka::produce_requests(&env.producer).await - before;
    assert!(requests * 10 <= n, "{n} records went out in {requests} Produce requests: expected multi-record batches");
    sent
}

/// The committed offset of every partition is its high watermark.
fn assert_committed_to_the_end(group: &str, env: &Env) {
    let ends: Vec<Option<i64>> = kafka::high_watermarks(&env.topic, env.partitions).into_iter().map(Some).collect();
    assert_eq!(kafka::committed(group, &env.topic, env.partitions), ends, "every partition committed to its end");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_member_resumes_at_a_committed_offset_inside_a_batch() {
    let env = Env::new(1).await;
    send_batched_orders(&env, 500).await;
    assert_eq!(kafka::high_watermarks(&env.topic, 1), vec![500], "the high watermark counts every batched record");
    let group = idem_tests::unique_name("member");

    // The first member of the group reads 100 records, commits offset 100
    // (inside a batch) and leaves.
    let first = kafka::group_consumer(&group);
    first.subscribe(&[&env.topic]).expect("subscribe");
    let read = poll_offsets(&first, 100).await;
    assert_eq!(read, (0..100).collect::<Vec<_>>());
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(&env.topic, 0, rdkafka::Offset::Offset(100)).expect("offset");
    first.commit(&tpl, CommitMode::Sync).expect("commit");
    drop(first);

    // The next member resumes there and receives the other 400.
    let next = kafka::group_consumer(&group);
    next.subscribe(&[&env.topic]).expect("subscribe");
    assert_eq!(poll_offsets(&next, 400).await, (100..500).collect::<Vec<_>>());
    env.finish().await;
}

/// Polls until `n` records arrived (at most 60 s); returns their offsets.
async fn poll_offsets(consumer: &rdkafka::consumer::BaseConsumer, n: usize) -> Vec<i64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut offsets = Vec::new();
    while offsets.len() < n {
        assert!(Instant::now() < deadline, "only {} of {n} records within 60 s", offsets.len());
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => offsets.push(m.offset()),
            Some(Err(e)) => panic!("consumer error: {e}"),
            None => tokio::task::yield_now().await,
        }
    }
    offsets
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partition_paused_for_backpressure_resumes_inside_a_batch_and_drains() {
    let env = Env::new(6).await;
    // Well over the 10,000 records a partition of six queues before it is
    // paused (a handler's queues hold 60,000 in all).
    let per_partition: i64 = 15_000;
    send_batched_orders(&env, 6 * per_partition).await;
    let mut spec = HandlerSpec::notification(&env.topic);
    spec.concurrency = 2;
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let reports = tokio::time::timeout(Duration::from_secs(600), host::run_until_drained(&config))
        .await
        .expect("the host drained the topic within 10 minutes");
    let r = &reports[0];
    assert!(r.pauses >= 1, "partitions were paused for backpressure and resumed: {r:?}");
    let total = 6 * per_partition;
    assert_eq!((r.delivered as i64, r.processed as i64), (total, total), "{r:?}");
    assert_eq!(env.count("SELECT count(*) FROM notification.sent").await, total);
    assert_committed_to_the_end(&spec.group_id, &env);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_restarted_after_sigkill_resumes_inside_batches_and_finishes() {
    restarted_after_sigkill(HandlerSpec::billing).await;
}

/// Under KIP-848 the dead member's partitions come back when the broker's
/// session timeout (`group.consumer.session.timeout.ms`) ends it.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_restarted_after_sigkill_under_kip_848_resumes_inside_batches_and_finishes() {
    restarted_after_sigkill(|topic, url| HandlerSpec::billing(topic, url).with_consumer_protocol()).await;
}

/// The same with the partitions' records in key lanes, each lane's batch
/// running 4 events at once: several batches of one partition in flight
/// when the host dies, each lane's crash mark its own, and invocations
/// dropped mid-flight.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_restarted_after_sigkill_with_key_lanes_resumes_inside_batches_and_finishes() {
    restarted_after_sigkill(|topic, url| HandlerSpec::billing(topic, url).with_lanes("key", 4).with_max_concurrent(4))
        .await;
}

async fn restarted_after_sigkill(billing: fn(&str, &str) -> HandlerSpec) {
    let env = Env::new(6).await;
    env.provider.set_latency(Duration::from_millis(2));
    send_batched_orders(&env, 3_000).await;
    let spec = billing(&env.topic, &env.provider.base_url());
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));

    let first = host::spawn(&config, false, &[]);
    let deadline = Instant::now() + Duration::from_secs(120);
    // Past at least one offset commit (every 200 ms), mid-stream.
    while env.provider.charges() < 600 {
        assert!(Instant::now() < deadline, "the first host charged {} orders in 120 s", env.provider.charges());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    host::signal(&first, "KILL");
    let (status, _) = tokio::task::spawn_blocking(move || host::wait_report(first)).await.expect("wait");
    assert!(!status.success(), "killed: {status}");
    let at_kill = env.count(CHARGES).await;
    assert!(at_kill < 3_000, "killed mid-stream ({at_kill} charged)");
    let committed: i64 = kafka::committed(&spec.group_id, &env.topic, 6).iter().flatten().sum();
    assert!(committed > 0, "offsets were committed before the kill, inside batches");

    let (status, reports) =
        tokio::task::spawn_blocking(move || host::wait_report(host::spawn(&config, true, &[]))).await.expect("wait");
    assert!(status.success(), "{status}");
    let r = &reports[0];
    assert_eq!(r.offset_resets, 0, "every partition resumed at its committed offset: {r:?}");
    assert_eq!(r.delivered as i64, 3_000 - committed, "delivery resumed at the committed offsets: {r:?}");
    assert_eq!(env.count(CHARGES).await, 3_000, "0 lost");
    assert_eq!(env.count(DISTINCT_ORDERS).await, 3_000, "0 double charges");
    assert_eq!(env.provider.charges(), 3_000, "the provider charged each order once");
    assert_committed_to_the_end(&spec.group_id, &env);
    env.finish().await;
}
