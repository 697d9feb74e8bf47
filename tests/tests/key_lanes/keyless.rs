//! Records without a Kafka key under `ordering = "key"`: processed once
//! each, and kept in their order among themselves, across lanes and within
//! a batch whose events run at once.

use std::collections::HashSet;
use std::time::Duration;

use idem_tests::host::{self, HandlerSpec, order_payload};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;

use super::{Env, keys_in_distinct_lanes, lane_of, run_to_exit, send, send_lane_records};

const LANES: usize = 4;

/// README ("Lanes"): under `"key"` "records **without a key** share one
/// lane and keep their order among themselves".
///
/// Sixteen keyless records interleaved with eight of each of three keys
/// whose lanes are not the keyless records' lane (five records a round, so
/// that lanes taken in turn would spread the keyless ones), every record
/// 100 ms: each record's effect once, the keyless ones one after another in
/// their order, while they ran side by side with the keyed ones (so the
/// check can tell). Were keyless records spread over the lanes (as `"none"`
/// does: the test fails with it), several would run at once.
#[tokio::test(flavor = "multi_thread")]
async fn under_key_ordering_records_without_a_key_share_one_lane_in_their_order_each_once() {
    let env = Env::new().await;
    let keys = keys_in_distinct_lanes(LANES, 3, &[lane_of(None, LANES)]);
    let record = |key: Option<&String>, seq: i64| (key.cloned(), seq, serde_json::json!({ "sleep_ms": 100 }));
    let records: Vec<_> = (0..8)
        .flat_map(|round| {
            [None, Some(&keys[0].0), None, Some(&keys[1].0), Some(&keys[2].0)]
                .into_iter()
                .enumerate()
                .map(move |(i, key)| record(key, if key.is_none() { 2 * round + i64::from(i > 0) } else { round }))
        })
        .collect();
    let sent = send_lane_records(&env, &records).await;
    let spec = HandlerSpec { batch: Some((4, 5)), ..env.scenarios() }.with_lanes("key", LANES as u32);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let (status, reports) = run_to_exit(&config, &[]).await;
    assert!(status.success(), "{status}");
    let r = &reports[0];
    assert_eq!((r.processed, r.failed, r.invalid), (40, 0, 0), "{r:?}");

    let log = env.lane_log().await;
    let ids: HashSet<uuid::Uuid> = log.iter().map(|r| r.id).collect();
    assert_eq!((log.len(), ids), (40, sent.iter().map(|s| s.id).collect()), "each record's effect once");
    let (keyless, keyed): (Vec<_>, Vec<_>) = log.iter().partition(|r| r.key.is_empty());
    assert_eq!(keyless.iter().map(|r| r.seq).collect::<Vec<_>>(), (0..16).collect::<Vec<_>>(), "in their order");
    for (i, a) in keyless.iter().enumerate() {
        for b in &keyless[i + 1..] {
            assert!(!a.overlaps(b), "keyless records ran at the same time: {a:?} and {b:?}");
        }
    }
    let beside = keyless.iter().filter(|a| keyed.iter().any(|b| a.overlaps(b))).count();
    assert!(beside > 0, "keyless records ran beside keyed ones of other lanes");
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(40)]);
    env.finish().await;
}

/// 12 orders, keyless or keyed by one of 4 customers, through one lane
/// whose batches run up to 4 events at once, the provider answering in
/// 100 ms: each charged once; returns the provider.
async fn charge_twelve(keyed: bool) -> PaymentProvider {
    let env = Env::new().await;
    let provider = PaymentProvider::start().await;
    provider.set_latency(Duration::from_millis(100));
    let records: Vec<(Option<String>, Vec<u8>)> =
        (1..=12).map(|i| (keyed.then(|| format!("customer-{}", i % 4)), order_payload(i).1)).collect();
    send(&env.topic, &records).await;
    let spec = HandlerSpec { batch: Some((16, 200)), ..HandlerSpec::billing(&env.topic, &provider.base_url()) }
        .with_lanes("key", 1)
        .with_max_concurrent(4);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let (status, reports) = run_to_exit(&config, &[]).await;
    assert!(status.success(), "{status}");
    assert_eq!((reports[0].processed, reports[0].failed), (12, 0), "{:?}", reports[0]);
    assert_eq!(env.count("SELECT count(DISTINCT order_id) FROM billing.charge").await, 12);
    assert_eq!(env.count("SELECT count(*) FROM billing.charge").await, 12, "each order charged once");
    assert_eq!(provider.charges(), 12);
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(12)]);
    env.finish().await;
    provider
}

/// README ("Events of a batch at once"): under `ordering = "key"` a key's
/// events are a chain "(keyless records share one)": with
/// `max_concurrent = 4` keyless orders still reach the provider one at a
/// time, in their order. The same stream keyed by four customers sends
/// several at once, so the check can tell; were each keyless record a
/// chain of its own, four would go out together.
#[tokio::test(flavor = "multi_thread")]
async fn keyless_records_of_a_batch_run_one_at_a_time_in_order_under_max_concurrent() {
    let keyless = charge_twelve(false).await;
    assert_eq!(keyless.most_at_once(), 1, "keyless orders' requests went out one at a time");
    let orders: Vec<i64> = keyless
        .seen()
        .iter()
        .filter_map(|s| serde_json::from_str::<serde_json::Value>(&s.body).ok()?["orderId"].as_i64())
        .collect();
    assert_eq!(orders, (1..=12).collect::<Vec<_>>(), "in their order, each once");

    let keyed = charge_twelve(true).await;
    assert!(keyed.most_at_once() >= 2, "keyed ones of different keys at once: {}", keyed.most_at_once());
}
