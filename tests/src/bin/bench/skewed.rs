//! Variant k: a skewed stream, the case lanes are for. 3,000 orders, 90% of
//! them on one partition, spread over 200 customers (the key); the provider
//! answers each charge in 20 ms. Run under `ordering = "partition"` (one
//! record of the hot partition at a time) and `"key"` (its customers side
//! by side), with the same concurrency; k_key / k_partition is the gain.

use std::time::Duration;

use anyhow::bail;
use idem_tests::host::{self, HandlerSpec, order_payload};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;

use super::{PARTITIONS, Row, admin_drop, check, config_of, fresh_database, measure};

const ORDERS: i64 = 3_000;
const KEYS: i64 = 200;
const LANES: u32 = 16;

pub(crate) async fn variant(name: &'static str, ordering: &'static str) -> anyhow::Result<Row> {
    let provider = PaymentProvider::start().await;
    provider.set_latency(Duration::from_millis(20));
    let topic = kafka::create_topic(PARTITIONS).await;
    let db = format!("idem_bench_{}", std::process::id());
    let db_url = idem_tests::db::with_database(&idem_tests::db::server_url(), &db);
    let mut spec = HandlerSpec::billing(&topic, &provider.base_url());
    spec.batch = Some((100, 5));
    spec.concurrency = LANES as usize;
    if ordering != "partition" {
        spec = spec.with_lanes(ordering, LANES);
    }
    let config = config_of(&[spec], &db_url, false, true);
    let mut conn = fresh_database(&db, &config).await?;
    let payloads: Vec<(i32, String, Vec<u8>)> = (0..ORDERS)
        .map(|i| {
            let partition = if i % 10 < 9 { 0 } else { 1 + (i % i64::from(PARTITIONS - 1)) as i32 };
            (partition, format!("customer-{}", i % KEYS), order_payload(i + 1).1)
        })
        .collect();
    kafka::produce_all_keyed(&kafka::producer(), &topic, &payloads).await;

    let child = host::spawn(&config, true, &[("IDEM_LOG", "error")]);
    let cost = measure::watch(&child).await;
    let (status, _) = tokio::task::spawn_blocking(move || host::wait_report(child)).await?;
    if !status.success() {
        bail!("{name}: idem run failed: {status}");
    }
    let span = check(&mut conn, &provider, ORDERS, true).await?;
    admin_drop(&db).await;
    Ok(Row::drained(name, true, ORDERS as usize, span, cost.cpu_s, Some(cost.peak_rss_mib)))
}
