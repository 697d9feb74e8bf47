//! Variant o: the outbox. Billing as in a, plus one `payment.requested.v1`
//! emitted per charged order, published by the relay and taken by a second
//! handler (the payments example) in the same host. Throughput is the
//! orders' (records over the span of the charges, as for a; o/a: what the
//! emit, its row and its publishing cost), the relay's rate is the rows
//! published over the span of their publishing, and the latency, at half
//! o's throughput, is from the charge's transaction to the request's
//! (`billing.charge.charged_at` to `payments.request.taken_at`, the two
//! transactions' times).

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use idem_tests::host::{self, HandlerSpec, order_payload};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;
use serde::Serialize;
use sqlx::PgConnection;

use super::{BATCH, CONCURRENCY, PARTITIONS, Row, admin_drop, config_of, fresh_database, measure, workload};

/// What variant o measured beyond its row.
#[derive(Debug, Clone, Serialize)]
pub struct Relayed {
    /// Rows published per second, first publish to last.
    pub relay_per_s: f64,
    /// Requests emitted per second (one per charge, over the charges' span).
    pub emit_per_s: f64,
    /// Charge to request, at half o's throughput.
    pub p50_ms: f64,
    pub p99_ms: f64,
}

pub(crate) async fn variant(name: &'static str, orders: i64) -> anyhow::Result<(Row, Relayed)> {
    let provider = PaymentProvider::start().await;
    let (topic, requests) = (kafka::create_topic(PARTITIONS).await, kafka::create_topic(PARTITIONS).await);
    let db = format!("idem_bench_{}", std::process::id());
    let db_url = idem_tests::db::with_database(&idem_tests::db::server_url(), &db);
    let mut billing = HandlerSpec::billing_announcing(&topic, &provider.base_url(), &requests);
    let mut payments = HandlerSpec::payments(&requests);
    for spec in [&mut billing, &mut payments] {
        spec.concurrency = CONCURRENCY;
        spec.batch = Some((BATCH, 5));
    }
    let config = config_of(&[billing, payments], &db_url, false, false);
    let mut conn = fresh_database(&db, &config).await?;
    let records = workload(orders);
    kafka::produce_all_keyed(&kafka::producer(), &topic, &records).await;

    let child = host::spawn(&config, false, &[("IDEM_LOG", "error")]);
    let pid = child.id();
    let watching = tokio::spawn(async move {
        let cost = measure::watch(&child).await;
        (child, cost)
    });
    let done = until_taken(&mut conn, orders, Duration::from_secs(600)).await;
    let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
    let (mut child, cost) = watching.await?;
    let _ = child.wait();
    done?;
    let (charges, distinct, span): (i64, i64, f64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT order_id), \
         coalesce(extract(epoch FROM max(charged_at) - min(charged_at))::float8, 0) FROM billing.charge",
    )
    .fetch_one(&mut conn)
    .await?;
    let (taken, published, publishing): (i64, i64, f64) = sqlx::query_as(
        "SELECT (SELECT count(DISTINCT order_id) FROM payments.request), \
                (SELECT count(*) FROM idem.outbox WHERE published_at IS NOT NULL), \
                (SELECT coalesce(extract(epoch FROM max(published_at) - min(published_at))::float8, 0) FROM idem.outbox)",
    )
    .fetch_one(&mut conn)
    .await?;
    if charges != orders || distinct != orders || taken != orders || published != orders {
        bail!(
            "wrong answer: {charges} charges ({distinct} orders), {published} published, {taken} taken; {orders} expected"
        );
    }
    let row = Row::drained(name, false, records.len(), span, cost.cpu_s, Some(cost.peak_rss_mib));
    let rate = (row.events_per_s / 2.0).clamp(100.0, 20_000.0);
    let (p50_ms, p99_ms) = paced(&config, &topic, &mut conn, rate, orders).await?;
    admin_drop(&db).await;
    let relayed = Relayed {
        relay_per_s: published as f64 / publishing.max(1e-3),
        emit_per_s: orders as f64 / span.max(1e-3),
        p50_ms,
        p99_ms,
    };
    Ok((Row { p50_ms: Some(p50_ms as u64), p99_ms: Some(p99_ms as u64), ..row }, relayed))
}

/// Waits until `n` payment requests are taken.
async fn until_taken(conn: &mut PgConnection, n: i64, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let taken: i64 = sqlx::query_scalar("SELECT count(*) FROM payments.request").fetch_one(&mut *conn).await?;
        if taken >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{taken} of {n} payment requests taken in {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A paced stream at `rate` orders per second for 5 s on a running host,
/// once its chain is live: the charge-to-request latency's p50 and p99, in
/// ms (the first order, which shows the chain live, is not counted).
async fn paced(
    config: &std::path::Path,
    topic: &str,
    conn: &mut PgConnection,
    rate: f64,
    already: i64,
) -> anyhow::Result<(f64, f64)> {
    let child = host::spawn(config, false, &[("IDEM_LOG", "error")]);
    let producer = kafka::producer();
    // As for a's paced stream: once the chain is live (both handlers
    // joined, the relay holding its lease: a first order's request is
    // taken), so that the figures are of the stream, not of start-up.
    kafka::produce(&producer, topic, 0, "10000000", &order_payload(10_000_000).1).await;
    if let Err(e) = until_taken(conn, already + 1, Duration::from_secs(60)).await {
        host::signal(&child, "TERM");
        let _ = tokio::task::spawn_blocking(move || host::wait_report(child)).await?;
        return Err(e.context("the chain did not start within 60 s"));
    }
    let sent = super::produce_paced(&producer, topic, rate, |order| order.to_string()).await;
    let waited = until_taken(conn, already + 1 + sent, Duration::from_secs(120)).await;
    host::signal(&child, "TERM");
    let _ = tokio::task::spawn_blocking(move || host::wait_report(child)).await?;
    waited?;
    let (p50, p99): (Option<f64>, Option<f64>) = sqlx::query_as(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) \
         FROM (SELECT extract(epoch FROM r.taken_at - c.charged_at) * 1000 AS ms \
               FROM payments.request r JOIN billing.charge c ON c.order_id = r.order_id \
               WHERE r.order_id > 10000000) d",
    )
    .fetch_one(&mut *conn)
    .await
    .context("the paced stream's latency")?;
    Ok((p50.unwrap_or(f64::NAN), p99.unwrap_or(f64::NAN)))
}
