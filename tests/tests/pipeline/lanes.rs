//! `ordering = "key"` and `"none"`: a partition's records in lanes, on a
//! real broker. What a user relies on: the records of one key keep their
//! order, different keys run side by side, a record waiting out its
//! backoff holds only its own lane, and the committed offset never passes a
//! record that has not been resolved.

use std::time::{Duration, Instant};

use idem_tests::host::{self, HandlerSpec};
use idem_tests::{kafka, wait_until};

use super::Env;
use super::failures::scenario;

/// One row of `scenario.lane_log`, in the order the rows were written.
#[derive(Debug)]
struct Ran {
    key: String,
    seq: i64,
    began: f64,
    ended: f64,
}

async fn lane_log(env: &Env) -> Vec<Ran> {
    let rows: Vec<(String, i64, f64, Option<f64>)> = sqlx::query_as(
        "SELECT key, seq, extract(epoch FROM began)::float8, extract(epoch FROM ended)::float8 \
         FROM scenario.lane_log ORDER BY id",
    )
    .fetch_all(&env.db.pool)
    .await
    .expect("lane log");
    rows.into_iter().map(|(key, seq, began, ended)| Ran { key, seq, began, ended: ended.unwrap_or(began) }).collect()
}

/// Pairs of records of different keys whose executions overlapped.
fn overlapping(log: &[Ran]) -> usize {
    let mut pairs = 0;
    for (i, a) in log.iter().enumerate() {
        for b in &log[i + 1..] {
            if a.key != b.key && a.began < b.ended && b.began < a.ended {
                pairs += 1;
            }
        }
    }
    pairs
}

/// How [`run_interleaved`] orders its records on the partition.
#[derive(Clone, Copy)]
enum Interleave {
    /// Every key's first record, then every key's second, …
    Keys,
    /// One key's records one after another, then the next key's.
    None,
}

/// `keys` × `per_key` records on partition 0, in `interleave`'s order,
/// each holding its transaction `sleep_ms`.
async fn send_interleaved(env: &Env, keys: &[String], per_key: i64, sleep_ms: u32, interleave: Interleave) {
    let record = |key: &String, seq: i64| {
        let payload = scenario("lane", serde_json::json!({ "seq": seq, "sleep_ms": sleep_ms })).1;
        (0, key.clone(), payload)
    };
    let payloads: Vec<(i32, String, Vec<u8>)> = match interleave {
        Interleave::Keys => (0..per_key).flat_map(|seq| keys.iter().map(move |key| record(key, seq))).collect(),
        Interleave::None => keys.iter().flat_map(|key| (0..per_key).map(move |seq| record(key, seq))).collect(),
    };
    kafka::produce_all_keyed(&env.producer, &env.topic, &payloads).await;
}

/// Runs 6 keys × 8 records through `spec` and returns the log.
async fn run_interleaved(interleave: Interleave, spec: impl Fn(&Env) -> HandlerSpec) -> Vec<Ran> {
    let env = Env::new(1).await;
    let keys: Vec<String> = (0..6).map(|k| format!("customer-{k}")).collect();
    send_interleaved(&env, &keys, 8, 20, interleave).await;
    let spec = spec(&env);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!(r.processed, 48, "{r:?}");
    let log = lane_log(&env).await;
    assert_eq!(log.len(), 48, "each record's effect once");
    assert_eq!(env.count("SELECT count(*) FROM idem.processed_event").await, 48);
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(48)]);
    env.finish().await;
    log
}

#[tokio::test(flavor = "multi_thread")]
async fn under_key_ordering_each_keys_records_keep_their_order_while_keys_run_side_by_side() {
    let scenarios =
        |env: &Env| HandlerSpec { batch: Some((3, 5)), ..HandlerSpec::scenarios(&env.topic, &env.provider.base_url()) };
    let log = run_interleaved(Interleave::Keys, |env| scenarios(env).with_lanes("key", 4)).await;
    for key in (0..6).map(|k| format!("customer-{k}")) {
        let order: Vec<i64> = log.iter().filter(|r| r.key == key).map(|r| r.seq).collect();
        assert_eq!(order, (0..8).collect::<Vec<_>>(), "{key}'s records ran in their order");
    }
    let overlaps = overlapping(&log);
    assert!(overlaps > 0, "records of different keys ran at the same time under ordering = \"key\"");

    // The same stream under the default ordering: one record of the
    // partition at a time, so the check above can tell.
    let serial = run_interleaved(Interleave::Keys, scenarios).await;
    assert_eq!(overlapping(&serial), 0, "ordering = \"partition\" ran records of one partition at once");
    let offsets: Vec<i64> = serial.iter().map(|r| r.seq).collect();
    assert!(offsets.windows(2).all(|w| w[0] <= w[1]), "and in offset order: {offsets:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_in_its_backoff_holds_its_own_lane_and_the_committed_offset_not_the_other_lanes() {
    let env = Env::new(1).await;
    let lanes = 4;
    let slow_lane = idem::config::key_lane(Some(b"slow"), lanes);
    let (mut free, mut held) = (Vec::new(), Vec::new());
    for key in (0..200).map(|k| format!("customer-{k}")) {
        if idem::config::key_lane(Some(key.as_bytes()), lanes) == slow_lane {
            held.push(key);
        } else {
            free.push(key);
        }
    }
    let (free, held) = (&free[..10], held[0].clone());
    // Offset 0 fails and waits out a long backoff before its last attempt;
    // offset 1 has its key; offset 2 shares its lane; 3.. are other lanes'.
    let failing = scenario("write-then-retryable", serde_json::json!({})).1;
    let lane = |seq: i64| scenario("lane", serde_json::json!({ "seq": seq })).1;
    let mut records =
        vec![(0, "slow".to_owned(), failing), (0, "slow".to_owned(), lane(1)), (0, held.clone(), lane(0))];
    records.extend(free.iter().flat_map(|key| (0..4).map(move |seq| (0, key.clone(), lane(seq)))));
    kafka::produce_all_keyed(&env.producer, &env.topic, &records).await;
    let total = records.len() as i64;

    let backoff = Duration::from_secs(10);
    let spec = HandlerSpec {
        max_attempts: 2,
        backoff_ms: (backoff.as_millis() as u64, backoff.as_millis() as u64),
        batch: Some((5, 5)),
        ..HandlerSpec::scenarios(&env.topic, &env.provider.base_url())
    }
    .with_lanes("key", lanes as u32);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let started = Instant::now();
    let running = host::InProcess::start(&config);

    let done = |key: &str| format!("SELECT count(*) FROM scenario.lane_log WHERE key = '{key}'");
    let mut free_done = 0;
    while free_done < 40 {
        free_done = env.count("SELECT count(*) FROM scenario.lane_log WHERE key LIKE 'customer-%'").await
            - env.count(&done(&held)).await;
        let committed = kafka::committed(&spec.group_id, &env.topic, 1)[0];
        assert!(committed.unwrap_or(0) == 0, "the committed offset {committed:?} passed the record in its backoff");
        assert!(started.elapsed() < Duration::from_secs(60), "the other lanes did {free_done} of 40 in 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        started.elapsed() < backoff,
        "the other lanes' 40 records took longer than the backoff: the test cannot tell a held lane from a slow one"
    );
    assert_eq!(env.count(&done("slow")).await, 0, "the failing record's key waits behind it");
    assert_eq!(env.count(&done(&held)).await, 0, "so does a key that shares its lane");

    wait_until("the failing record is dead-lettered and its lane drains", || {
        kafka::committed(&spec.group_id, &env.topic, 1) == vec![Some(total)]
    })
    .await;
    let r = running.stop().await;
    assert_eq!((r[0].processed, r[0].dead_lettered, r[0].retries), (total as u64 - 1, 1, 1), "{r:?}");
    assert_eq!(env.count(&done("slow")).await, 1);
    assert_eq!(env.count(&done(&held)).await, 1);
    env.finish().await;
}

/// One key's records one after another on the partition: in turn over 4
/// lanes, each key's first four run at once.
#[tokio::test(flavor = "multi_thread")]
async fn under_no_ordering_records_of_one_key_run_side_by_side_each_once() {
    let log = run_interleaved(Interleave::None, |env| {
        HandlerSpec { batch: Some((2, 5)), ..HandlerSpec::scenarios(&env.topic, &env.provider.base_url()) }
            .with_lanes("none", 4)
    })
    .await;
    let same_key_overlaps = log
        .iter()
        .enumerate()
        .flat_map(|(i, a)| log[i + 1..].iter().map(move |b| (a, b)))
        .filter(|(a, b)| a.key == b.key && a.began < b.ended && b.began < a.ended)
        .count();
    assert!(same_key_overlaps > 0, "under ordering = \"none\" even one key's records run at once");
}

/// 8 customers × 5 orders on one partition, interleaved, through one lane
/// whose batches run `max_concurrent` events at once, the provider
/// answering in 100 ms; returns the provider.
async fn charge_interleaved(max_concurrent: usize) -> (Env, HandlerSpec) {
    let env = Env::new(1).await;
    env.provider.set_latency(Duration::from_millis(100));
    let records: Vec<(i32, String, Vec<u8>)> =
        (0..40).map(|i| (0, format!("customer-{}", i % 8), idem_tests::host::order_payload(i + 1).1)).collect();
    kafka::produce_all_keyed(&env.producer, &env.topic, &records).await;
    let spec = HandlerSpec { batch: Some((40, 200)), ..env.billing() }
        .with_lanes("key", 1)
        .with_max_concurrent(max_concurrent);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!(r.processed, 40, "{r:?}");
    assert_eq!(env.count("SELECT count(*) FROM billing.charge").await, 40, "each order charged once");
    let keys: std::collections::HashSet<_> = env.provider.keys().into_iter().collect();
    assert_eq!((env.provider.charges(), keys.len()), (40, 40), "each with its own Idempotency-Key");
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(40)]);
    (env, spec)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_sends_the_requests_of_different_keys_at_once_and_one_keys_in_order() {
    let (env, _) = charge_interleaved(8).await;
    let most = env.provider.most_at_once();
    assert!((2..=8).contains(&most), "{most} requests at once: more than one, never past max_concurrent = 8");
    // Each customer's orders reached the provider in their order (order
    // i + 1 is customer i % 8's).
    let orders: Vec<i64> = env
        .provider
        .seen()
        .iter()
        .filter_map(|s| serde_json::from_str::<serde_json::Value>(&s.body).ok()?["orderId"].as_i64())
        .collect();
    for customer in 0..8 {
        let own: Vec<i64> = orders.iter().copied().filter(|o| (o - 1) % 8 == customer).collect();
        assert!(own.windows(2).all(|w| w[0] < w[1]), "customer-{customer}'s orders out of order: {own:?}");
        assert_eq!(own.len(), 5, "customer-{customer}: {own:?}");
    }
    env.finish().await;

    // The same stream one event at a time: the check above can tell.
    let (serial, _) = charge_interleaved(1).await;
    assert_eq!(serial.provider.most_at_once(), 1, "max_concurrent = 1 sent requests at once");
    serial.finish().await;
}

/// Failures inside a batch whose events run at once: the batch rolls back
/// whatever else was running, the events before the failing one commit
/// again, the failing one goes alone through its retries or to the DLQ,
/// and every effect is there once.
#[tokio::test(flavor = "multi_thread")]
async fn a_failure_among_events_running_at_once_rolls_back_and_nothing_doubles() {
    let env = Env::new(1).await;
    env.provider.set_latency(Duration::from_millis(20));
    let mut records = Vec::new();
    let mut ok = Vec::new();
    for i in 0..30 {
        let (name, extra) = match i {
            7 => ("retry-until", serde_json::json!({ "succeed_at": 3 })),
            15 => ("write-then-fail", serde_json::json!({})),
            23 => ("write-then-trap", serde_json::json!({})),
            _ => ("retry-until", serde_json::json!({})),
        };
        let (id, payload) = scenario(name, extra);
        if !matches!(i, 15 | 23) {
            ok.push(id);
        }
        records.push((0, format!("customer-{}", i % 6), payload));
    }
    kafka::produce_all_keyed(&env.producer, &env.topic, &records).await;
    let spec = HandlerSpec {
        max_attempts: 3,
        batch: Some((30, 200)),
        ..HandlerSpec::scenarios(&env.topic, &env.provider.base_url())
    }
    .with_lanes("key", 1)
    .with_max_concurrent(6);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.dead_lettered, r.retries), (28, 2, 2), "{r:?}");
    env.assert_effects_once(&ok).await;
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(30)]);
    env.finish().await;
}

/// Two events of one batch at once, each within its budget alone, but one
/// waits for the other's long statement and overruns: the overrun is not
/// counted against it (with one attempt allowed it would be dead-lettered);
/// it runs again alone and commits. That they ran at once and that one
/// overran is shown, not assumed: the batch was split (a serial run of
/// the same records splits nothing, each event being well within its
/// budget), and the quick event's first INSERT (a `lane_log` id, which a
/// rollback does not give back) was undone: the row kept is its second.
#[tokio::test(flavor = "multi_thread")]
async fn waiting_for_another_events_statement_is_not_counted_as_an_events_own_overrun() {
    let env = Env::new(1).await;
    // Alone, each is well within the 1.5 s budget (the slow one by 0.3 s, so
    // that a loaded machine does not make it overrun alone); together the
    // quick one waits 1.2 s for the slow statement, then needs 0.5 s more.
    let slow = scenario("statement", serde_json::json!({ "sql": "SELECT pg_sleep(1.2)" })).1;
    let quick = scenario("lane", serde_json::json!({ "seq": 0, "sleep_ms": 500 })).1;
    // The first record of an assignment runs alone: an ordinary one first.
    let first = scenario("ok", serde_json::json!({})).1;
    kafka::produce_all_keyed(&env.producer, &env.topic, &[(0, "o", first), (0, "a", slow), (0, "b", quick)]).await;
    let spec = HandlerSpec {
        max_attempts: 1,
        batch: Some((2, 200)),
        extra: "timeout_ms = 1500\n".into(),
        ..HandlerSpec::scenarios(&env.topic, &env.provider.base_url())
    }
    .with_lanes("key", 1)
    .with_max_concurrent(2);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.failed, r.dead_lettered), (3, 0, 0), "{r:?}");
    assert_eq!(r.batch_splits, 1, "one event of the batch overran (waiting for the other's statement): {r:?}");
    assert_eq!(r.retries, 0, "and it spent no attempt: {r:?}");
    assert_eq!(env.count("SELECT count(*) FROM scenario.lane_log").await, 1);
    let kept: i64 = sqlx::query_scalar("SELECT id FROM scenario.lane_log").fetch_one(&env.db.pool).await.expect("row");
    assert_eq!(kept, 2, "the quick event's INSERT ran in the batch beside the slow statement and was rolled back");
    env.finish().await;
}
