//! Handlers written with the Python and TypeScript SDKs through the real
//! pipeline, checked as the Rust billing example is: each event charged
//! once with its id as the key under redelivery, a charge the provider
//! rejects dead-lettered as permanent, one it cannot take yet retried, and
//! a deploy from one language to another mid-stream.

use std::collections::HashSet;
use std::time::Duration;

use idem_tests::host::{self, HandlerSpec, InProcess};
use idem_tests::provider::Fault;
use idem_tests::{guests, kafka};
use rdkafka::Message as _;
use rdkafka::message::Headers as _;
use serde_json::Value;

use super::modules::{Api, idem};
use super::{CHARGES, DISTINCT_ORDERS, Env};

/// The billing handler as `component` (an SDK example), keeping instances.
fn billing(env: &Env, component: &'static str) -> HandlerSpec {
    let mut spec = env.billing();
    spec.component = component;
    spec.extra.push_str("events_per_instance = 100\n");
    spec
}

fn event_id(payload: &[u8]) -> String {
    let value: Value = serde_json::from_slice(payload).expect("an order");
    value["eventId"].as_str().expect("its eventId").to_owned()
}

async fn the_billing_example_in(component: &'static str) {
    let env = Env::new(6).await;
    let sent = env.send_orders(300).await;
    let again: Vec<(i32, Vec<u8>)> =
        sent.iter().enumerate().filter(|(i, _)| i % 10 < 3).map(|(i, p)| (((i + 1) % 6) as i32, p.clone())).collect();
    kafka::produce_all(&env.producer, &env.topic, &again).await;
    let spec = billing(&env, component);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.delivered, r.processed, r.duplicates, r.failed), (390, 300, 90, 0), "{r:?}");
    assert_eq!(env.count(CHARGES).await, 300);
    assert_eq!(env.count(DISTINCT_ORDERS).await, 300, "no order charged twice");
    assert_eq!(env.provider.charges(), 300);
    let ids: HashSet<String> = sent.iter().map(|p| event_id(p)).collect();
    let keys: HashSet<String> = env.provider.keys().into_iter().map(|k| k.expect("an Idempotency-Key")).collect();
    assert_eq!(keys, ids, "each charge carried its own event's id as Idempotency-Key");

    // A charge the provider refuses for good: permanent, dead-lettered.
    env.provider.set_fault(Fault::RejectTimes(1));
    env.send(0, &host::order_payload(1_000).1).await;
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.dead_lettered, r.retries), (0, 1, 0), "{r:?}");
    let dlq = kafka::read_all(&format!("{}.billing.dlq", env.topic));
    assert_eq!(dlq.len(), 1);
    let headers: Vec<String> = dlq[0]
        .headers()
        .map(|h| h.iter().map(|h| String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned()).collect())
        .unwrap_or_default();
    let headers = headers.join(" | ");
    assert!(headers.contains("HTTP 422") && headers.contains("permanent"), "the reason names the answer: {headers}");

    // A provider down for a while: retryable, retried until it is back.
    // The host re-sends nothing itself here (`[handler.http.retry]`), so
    // the 503 reaches the guest, whose SDK calls it retryable.
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str("[handler.http.retry]\nmax_attempts = 1\n");
    std::fs::write(&config, text).expect("config");
    env.provider.set_fault(Fault::Unavailable);
    env.send(1, &host::order_payload(1_001).1).await;
    let seen_before = env.provider.seen().len();
    let heal = async {
        while env.provider.seen().len() < seen_before + 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        env.provider.set_fault(Fault::None);
    };
    let (reports, ()) = tokio::join!(host::run_until_drained(&config), heal);
    let r = &reports[0];
    assert_eq!((r.processed, r.dead_lettered), (1, 0), "{r:?}");
    assert!(r.retries >= 1, "a 503 is retryable: the event ran again ({r:?})");
    assert_eq!(env.count(CHARGES).await, 301);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_billing_example_charges_once_with_its_key_and_classifies_failures() {
    the_billing_example_in("billing-python").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_billing_example_charges_once_with_its_key_and_classifies_failures() {
    the_billing_example_in("billing-ts").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deploy_mid_stream_moves_billing_from_rust_to_python_to_typescript_each_event_once() {
    let env = Env::new(6).await;
    let mut spec = env.billing();
    spec.batch = Some((20, 5));
    spec.extra.push_str("events_per_instance = 100\n");
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let host = InProcess::start(&config);
    let api = Api::of(&config);
    api.ready("billing").await;

    let chunk = async |from: i64| {
        let records: Vec<(i32, Vec<u8>)> =
            (from..from + 1_000).map(|order| ((order % 6) as i32, host::order_payload(order + 1).1)).collect();
        kafka::produce_all(&env.producer, &env.topic, &records).await;
    };
    let charged = async |n: i64| env.charged(n, Duration::from_secs(120)).await;
    chunk(0).await;
    charged(500).await;
    // `idem deploy` of each language's build, while the stream runs.
    for (version, component, from) in [(2, "billing-python", 1_000), (3, "billing-ts", 2_000)] {
        let path = guests::component(component);
        let said = idem(&["deploy", "--url", &api.url, "--handler", "billing", path.to_str().expect("path")]);
        assert!(said.contains(&format!("stored as version {version} and activated")), "{said}");
        api.runs("billing", version, Duration::from_secs(60)).await;
        chunk(from).await;
        charged(from + 500).await;
    }
    charged(3_000).await;
    host.stop().await;

    assert_eq!(env.count(CHARGES).await, 3_000, "no event processed twice");
    assert_eq!(env.count(DISTINCT_ORDERS).await, 3_000, "none lost");
    assert_eq!(env.provider.charges(), 3_000);
    let rows: Vec<(i32, i64, Option<i32>)> = sqlx::query_as(
        "SELECT \"partition\", \"offset\", module_version FROM idem.processed_event ORDER BY \"partition\", \"offset\"",
    )
    .fetch_all(&env.db.pool)
    .await
    .expect("claims");
    for pair in rows.windows(2) {
        let ((p1, _, v1), (p2, offset, v2)) = (pair[0], pair[1]);
        assert!(p1 != p2 || v2 >= v1, "partition {p2} went back from {v1:?} to {v2:?} at offset {offset}");
    }
    for version in 1..=3 {
        let n = rows.iter().filter(|r| r.2 == Some(version)).count();
        assert!(n > 0, "version {version} processed no event");
    }
    env.finish().await;
}
