//! Apache Kafka down for 30 s, for real: this binary runs on a broker of its
//! own (`kafka::use_own_broker`), which it stops and starts again on the
//! same port and data; stopping the suite's shared broker would fail every
//! test beside it. `tests/tests/mock_faults.rs` has the faults a stopped
//! broker does not give (a broker that answers but refuses).

use std::time::{Duration, Instant};

use idem_tests::db::TestDb;
use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;

fn order(id: i64) -> serde_json::Value {
    serde_json::json!({ "aggregateType": "Order", "orderId": id, "customerId": 1000 + id % 5,
                        "totalAmount": 12.5, "currency": "EUR" })
}

/// The order service publishes orders `ids` through the outbox, one
/// transaction each, as its own `INSERT INTO orders` transaction would.
async fn publish_orders(service: &sqlx::PgPool, topic: &str, ids: std::ops::RangeInclusive<i64>) {
    for id in ids {
        sqlx::query("SELECT idem_api.publish($1, $2, 'order.confirmed.v1', $3)")
            .bind(topic)
            .bind(format!("customer-{}", id % 5))
            .bind(order(id))
            .execute(service)
            .await
            .unwrap_or_else(|e| panic!("publish order {id}: {e}"));
    }
}

/// How many records on `topic` carry each order id (an order published or
/// announced twice counts 2: duplicates are seen, not merged).
fn per_order(topic: &str) -> std::collections::BTreeMap<i64, usize> {
    let value = |m: &rdkafka::message::OwnedMessage| {
        use rdkafka::Message as _;
        serde_json::from_slice::<serde_json::Value>(m.payload().unwrap_or_default()).unwrap_or_default()
    };
    let mut counts = std::collections::BTreeMap::new();
    for id in kafka::read_all(topic).iter().filter_map(|m| value(m)["orderId"].as_i64()) {
        *counts.entry(id).or_default() += 1;
    }
    counts
}

/// Each of the orders 1..=n exactly once on `topic`.
fn assert_each_once(topic: &str, n: i64, what: &str) {
    let counts = per_order(topic);
    let wrong: Vec<(i64, usize)> =
        (1..=n).map(|id| (id, counts.get(&id).copied().unwrap_or(0))).filter(|(_, c)| *c != 1).collect();
    assert!(wrong.is_empty(), "{what}: orders not exactly once (order, times): {wrong:?}");
    assert_eq!(counts.values().sum::<usize>(), n as usize, "{what}: records for other orders: {counts:?}");
}

/// The whole chain through an outage of the only broker: the order
/// service's outbox → orders → billing (charges, emits a payment request)
/// → its outbox → requests. While the broker is down the order service
/// goes on committing orders (its transactions need PostgreSQL only), the
/// rows wait without failing, the host stays up; once the broker is back
/// every order is published, charged once and announced once.
#[tokio::test(flavor = "multi_thread")]
async fn a_broker_down_for_30_s_holds_the_outbox_loses_nothing_and_everything_flows_once_it_is_back() {
    let broker = kafka::use_own_broker("stopped for 30 s mid-run, then started again on its port and data");
    idem_tests::init_logging();
    let db = TestDb::new().await.unwrap_or_else(|e| panic!("database: {e:#}"));
    let provider = PaymentProvider::start().await;
    let (orders, requests) = (kafka::create_topic(2).await, kafka::create_topic(2).await);
    let spec = HandlerSpec::billing_announcing(&orders, &provider.base_url(), &requests);
    let config = host::write_config(&db.url, std::slice::from_ref(&spec));
    db.allow_emits(&config).await;
    let service = db.order_service(&config, &orders).await;
    let mut child = host::spawn(&config, false, &[]);

    publish_orders(&service, &orders, 1..=20).await;
    let unpublished = "SELECT count(*) FROM idem.outbox WHERE published_at IS NULL";
    let failed = "SELECT count(*) FROM idem.outbox WHERE failed_at IS NOT NULL";
    idem_tests::wait_until_async("the first 20 orders flow through the chain", || async {
        per_order(&requests).len() == 20 && db.count(unpublished).await == 0
    })
    .await;

    broker.stop();
    let down = Instant::now();
    publish_orders(&service, &orders, 21..=40).await;
    // `idem status` says the host is not ready, and why, rather than show
    // lags that stopped at their last value as if all were well.
    let admin = host::admin_url(&config);
    let mut said = String::new();
    while down.elapsed() < Duration::from_secs(30) {
        assert!(child.try_wait().unwrap_or_else(|e| panic!("{e}")).is_none(), "the host outlives the outage");
        assert_eq!(db.count(failed).await, 0, "an outage fails no row");
        assert_eq!(db.count(unpublished).await, 20, "the orders committed during the outage wait in the outbox");
        if down.elapsed() > Duration::from_secs(10) && !said.starts_with("NOT READY") {
            let out = std::process::Command::new(idem_tests::idem_bin())
                .args(["status", "--once", "--url", &admin])
                .output()
                .unwrap_or_else(|e| panic!("idem status: {e}"));
            said = String::from_utf8_lossy(&out.stdout).into_owned();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(said.starts_with("NOT READY:") && said.contains("billing"), "idem status during the outage: {said}");
    broker.start();
    let up = Instant::now();
    idem_tests::wait_until_async("every order flows through once the broker is back", || async {
        per_order(&requests).len() == 40 && db.count(unpublished).await == 0
    })
    .await;
    eprintln!("the 20 held orders charged and announced within {:?} of the broker's start", up.elapsed());
    host::signal(&child, "TERM");
    let (status, reports) = host::wait_report(child);
    assert!(status.success(), "{status}");
    assert_eq!(db.count(failed).await, 0);
    assert_eq!(db.count("SELECT count(*) FROM billing.charge").await, 40, "each order charged once");
    assert_eq!(db.count("SELECT count(DISTINCT order_id) FROM billing.charge").await, 40);
    assert_eq!(provider.charges(), 40, "one charge per order at the provider");
    assert_each_once(&orders, 40, "the order service's outbox published");
    assert_each_once(&requests, 40, "billing's outbox announced");
    let billing = reports.iter().find(|r| r.handler == "billing").unwrap_or_else(|| panic!("{reports:?}"));
    assert_eq!((billing.failed, billing.dead_lettered), (0, 0), "{billing:?}");
    db.drop_database().await;
    broker.remove();
}
