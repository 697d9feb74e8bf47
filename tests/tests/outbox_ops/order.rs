//! A key's emitted events reach the topic in the order of their source
//! events when the source handler runs keys side by side: under key lanes
//! (`ordering = "key"`, `max_in_flight`) and under `[handler.batch]
//! max_concurrent > 1`. The billing example emits `payment.requested.v1`
//! keyed by customer (`payment_requests_key = "customer"`).

use std::collections::{BTreeMap, HashSet};

use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;

use super::{Env, key, published, value};

/// An `order.confirmed.v1` of `customer`; `slow` ones (currency `SLO`)
/// are answered 2 s late by the provider.
fn order(id: i64, customer: i64, slow: bool) -> Vec<u8> {
    serde_json::json!({
        "eventId": uuid::Uuid::now_v7().to_string(), "eventType": "order.confirmed.v1",
        "occurredAt": "2026-11-30T12:00:00Z", "aggregateType": "Order", "orderId": id,
        "customerId": customer, "totalAmount": 10.5, "currency": if slow { "SLO" } else { "EUR" },
    })
    .to_string()
    .into_bytes()
}

/// Sends `per_key` orders of each of `customers` on partition 0, the
/// customers' orders interleaved, order ids rising with the offsets, each
/// record keyed by its customer (`by_customer`) or by its order; the
/// `slow` ones by (customer's index, its order's place). Runs them through
/// billing tuned by `tune`, through `idem run`, until every request is
/// published; checks each request is published once and each customer's
/// in the order of their orders. Returns the most charges the provider
/// was answering at once.
async fn each_key_in_source_order(
    tune: impl Fn(HandlerSpec) -> HandlerSpec,
    by_customer: bool,
    customers: &[i64],
    per_key: i64,
    slow: &[(usize, i64)],
) -> usize {
    let env = Env::new(1).await;
    let requests = kafka::create_topic(1).await;
    let mut sent: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut records = Vec::new();
    for place in 0..per_key {
        for (index, customer) in customers.iter().enumerate() {
            let id = records.len() as i64 + 1;
            let key = if by_customer { customer.to_string() } else { format!("order-{id}") };
            records.push((0, key, order(id, *customer, slow.contains(&(index, place)))));
            sent.entry(customer.to_string()).or_default().push(id);
        }
    }
    kafka::produce_all_keyed(&env.producer, &env.topic, &records).await;
    let mut spec = HandlerSpec::billing_announcing(&env.topic, &env.provider.base_url(), &requests);
    spec.config.push(("payment_requests_key".into(), "customer".into()));
    let spec = tune(spec);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    env.db.allow_emits(&config).await;

    let child = host::spawn(&config, false, &[]);
    let out = published(&requests, records.len());
    host::signal(&child, "TERM");
    let (status, reports) = host::wait_report(child);
    assert!(status.success(), "{status}");
    assert_eq!(reports[0].processed as usize, records.len(), "{reports:?}");

    let ids: HashSet<String> = out.iter().filter_map(|m| value(m)["eventId"].as_str().map(str::to_owned)).collect();
    assert_eq!((out.len(), ids.len()), (records.len(), records.len()), "each request published once");
    let mut got: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for m in &out {
        got.entry(key(m)).or_default().push(value(m)["orderId"].as_i64().unwrap_or_default());
    }
    assert_eq!(got, sent, "each customer's requests in the order of their orders");
    let at_once = env.provider.most_at_once();
    env.finish().await;
    at_once
}

/// README, "The outbox", *Order per key, in commit order*: "That holds
/// whatever the source handler's `ordering` (with `"key"` lanes …)", and
/// "Lanes": "one key's records keep their order while different keys run
/// concurrently". Five customers' orders, keyed by customer, interleaved
/// on one partition, in 4 lanes (four customers each in a lane of its own, a fifth sharing the
/// first's), the first and the second customer's second orders held 2 s
/// by the provider: the requests are published once each, each customer's
/// in its orders' order, while lanes ran side by side. Were a key's
/// records spread over lanes, a fast later order would commit, and be
/// published, before its customer's slow earlier one.
///
/// The held orders are second ones because each lane's first execution
/// waits its turn (a handler runs one execution at a time until its lane
/// has committed an event: pipeline/attempts.rs); two lanes' second
/// executions overlap whatever the timing, held 2 s each, where a first
/// order held (an earlier version) left the other lanes nothing to run
/// beside it once they were through their few fast orders.
#[tokio::test(flavor = "multi_thread")]
async fn under_key_lanes_each_keys_emitted_events_are_published_in_the_order_of_their_sources() {
    let lanes = 4;
    let lane = |c: i64| idem::config::key_lane(Some(c.to_string().as_bytes()), lanes);
    let mut customers: Vec<i64> = Vec::new();
    for c in 1..1000 {
        if !customers.iter().any(|k| lane(*k) == lane(c)) {
            customers.push(c);
        }
    }
    assert_eq!(customers.len(), lanes, "a customer in each lane");
    let sharing = (customers[lanes - 1] + 1..).find(|c| lane(*c) == lane(customers[0])).unwrap_or_default();
    customers.push(sharing);
    let tune = |spec: HandlerSpec| spec.with_lanes("key", lanes as u32);
    let at_once = each_key_in_source_order(tune, true, &customers, 6, &[(0, 1), (1, 1)]).await;
    assert!(at_once > 1, "lanes charged side by side ({at_once} at most at once)");
}

/// README, "The outbox", *Order per key, in commit order*: "That holds
/// whatever the source handler's `ordering` (… or events of a batch
/// running at once, two events writing one key still commit in turn)".
/// Orders keyed by order (so under `ordering = "key"` a customer's orders
/// may run at once) through one lane, batches of up to 40 events running 8
/// at once: five customers' orders interleaved, the second customer's third
/// order held 2 s by the provider while its batch-mates, its customer's
/// next orders among them, run. The requests are published once each,
/// each customer's in its orders' order, and events did run at once. Were
/// a batch's emits written in the order its events finished, the slow
/// order's request would follow its customer's next ones.
#[tokio::test(flavor = "multi_thread")]
async fn under_max_concurrent_each_keys_emitted_events_are_published_in_the_order_of_their_sources() {
    let tune =
        |spec: HandlerSpec| HandlerSpec { batch: Some((40, 200)), ..spec.with_lanes("key", 1).with_max_concurrent(8) };
    let at_once = each_key_in_source_order(tune, false, &[11, 12, 13, 14, 15], 6, &[(1, 2)]).await;
    assert!(at_once > 1, "events of a batch charged at once ({at_once} at most at once)");
}
