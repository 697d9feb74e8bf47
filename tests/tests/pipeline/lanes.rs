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

/// `keys` × `per_key` records on partition 0, interleaved (every key's
/// first record, then every key's second, …), each holding its transaction
/// `sleep_ms`.
async fn send_interleaved(env: &Env, keys: &[String], per_key: i64, sleep_ms: u32) {
    let payloads: Vec<(i32, String, Vec<u8>)> = (0..per_key)
        .flat_map(|seq| {
            keys.iter().map(move |key| {
                let payload = scenario("lane", serde_json::json!({ "seq": seq, "sleep_ms": sleep_ms })).1;
                (0, key.clone(), payload)
            })
        })
        .collect();
    kafka::produce_all_keyed(&env.producer, &env.topic, &payloads).await;
}

/// Runs 6 keys × 8 records through `spec` and returns the log.
async fn run_interleaved(spec: impl Fn(&Env) -> HandlerSpec) -> Vec<Ran> {
    let env = Env::new(1).await;
    let keys: Vec<String> = (0..6).map(|k| format!("customer-{k}")).collect();
    send_interleaved(&env, &keys, 8, 20).await;
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
    let log = run_interleaved(|env| scenarios(env).with_lanes("key", 4)).await;
    for key in (0..6).map(|k| format!("customer-{k}")) {
        let order: Vec<i64> = log.iter().filter(|r| r.key == key).map(|r| r.seq).collect();
        assert_eq!(order, (0..8).collect::<Vec<_>>(), "{key}'s records ran in their order");
    }
    let overlaps = overlapping(&log);
    assert!(overlaps > 0, "records of different keys ran at the same time under ordering = \"key\"");

    // The same stream under the default ordering: one record of the
    // partition at a time, so the check above can tell.
    let serial = run_interleaved(scenarios).await;
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

#[tokio::test(flavor = "multi_thread")]
async fn under_no_ordering_records_of_one_key_run_side_by_side_each_once() {
    let log = run_interleaved(|env| {
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
