//! Batches that span partitions: with more busy partitions than
//! connections, the lanes' batches waiting for one merge into one
//! transaction, and each lane keeps its own order, offsets and failures.

use std::time::Duration;

use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;

use super::Env;
use super::failures::scenario;

#[tokio::test(flavor = "multi_thread")]
async fn with_more_busy_partitions_than_connections_batches_span_partitions() {
    let env = Env::new(12).await;
    env.provider.set_latency(Duration::from_millis(2));
    env.send_orders(240).await;
    let spec = HandlerSpec { concurrency: 1, batch: Some((100, 5)), ..env.billing() };
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!(r.processed, 240, "{r:?}");
    assert_eq!(env.count("SELECT count(DISTINCT order_id) FROM billing.charge").await, 240);
    assert_eq!(env.count("SELECT count(*) FROM billing.charge").await, 240, "each order charged once");
    assert_eq!(env.provider.charges(), 240);
    // Each partition's first event runs alone (12 transactions); a batch per
    // partition would be 12 more. Merged, the 12 batches of 19 take a few.
    assert!(r.transactions < 12 + 12, "{} transactions: the partitions' batches did not merge", r.transactions);
    let ends: Vec<Option<i64>> = kafka::high_watermarks(&env.topic, 12).into_iter().map(Some).collect();
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 12), ends);
    env.finish().await;
}

/// A failure in one partition's share of a merged batch: that partition's
/// event goes through its retries or to the DLQ, the other partitions'
/// run again, and every effect is there once.
#[tokio::test(flavor = "multi_thread")]
async fn a_failure_in_one_partitions_share_of_a_merged_batch_doubles_nothing_elsewhere() {
    let env = Env::new(4).await;
    let mut records = Vec::new();
    let mut ok = Vec::new();
    for i in 0..40 {
        let (partition, n) = (i % 4, i / 4);
        let (name, extra) = match (partition, n) {
            (2, 5) => ("write-then-fail", serde_json::json!({})),
            (3, 3) => ("retry-until", serde_json::json!({ "succeed_at": 2 })),
            _ => ("ok", serde_json::json!({})),
        };
        let (id, payload) = scenario(name, extra);
        if name != "write-then-fail" {
            ok.push(id);
        }
        records.push((partition, format!("k{i}"), payload));
    }
    kafka::produce_all_keyed(&env.producer, &env.topic, &records).await;
    let spec = HandlerSpec {
        concurrency: 1,
        max_attempts: 3,
        batch: Some((100, 5)),
        ..HandlerSpec::scenarios(&env.topic, &env.provider.base_url())
    };
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.dead_lettered, r.retries), (39, 1, 1), "{r:?}");
    env.assert_effects_once(&ok).await;
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 4), vec![Some(10); 4]);
    env.finish().await;
}
