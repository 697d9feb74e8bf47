//! Variant s: the seed's own stack (`bench/seed-node/consumer.js`: kafkajs,
//! TypeORM, zod, one transaction per event, commitOffsets after it) on the
//! same events, database and broker as idem's variants. It writes the same
//! `billing.charge` rows, so the same check and the same span apply.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;
use sqlx::Executor as _;

use super::{PARTITIONS, Row, Tuning, admin_drop, check, config, fresh_database, measure, workload};

/// The consumer's folder, its `node_modules` installed by `scripts/bench`.
fn folder() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/seed-node")
}

pub(crate) async fn variant(name: &'static str, http: bool, orders: i64) -> anyhow::Result<Row> {
    let dir = folder();
    if !dir.join("node_modules/kafkajs").is_dir() {
        bail!("{name}: {} has no node_modules (scripts/bench runs npm ci there)", dir.display());
    }
    let provider = PaymentProvider::start().await;
    let topic = kafka::create_topic(PARTITIONS).await;
    let db = format!("idem_bench_{}", std::process::id());
    let db_url = idem_tests::db::with_database(&idem_tests::db::server_url(), &db);
    // `idem migrate` creates billing.charge as for the other variants.
    let config = config("unused", &provider, &db_url, Tuning { max_events: 1, ..super::PLAIN }, false, http, None);
    let mut conn = fresh_database(&db, &config).await?;
    let schema = std::fs::read_to_string(dir.join("schema.sql")).context("bench/seed-node/schema.sql")?;
    conn.execute(schema.as_str()).await.context("the seed's processed_event")?;
    let records = workload(orders);
    kafka::produce_all_keyed(&kafka::producer(), &topic, &records).await;

    let group = idem_tests::unique_name("seed");
    let mut command = Command::new("node");
    command
        .arg(dir.join("consumer.js"))
        .env("SEED_BROKERS", kafka::brokers())
        .env("SEED_DATABASE_URL", &db_url)
        .env("SEED_TOPIC", &topic)
        .env("SEED_GROUP", &group)
        .stdout(Stdio::null());
    if http {
        command.env("SEED_CHARGE_URL", provider.base_url());
    }
    let child = command.spawn().context("node (Node 20) runs the seed's consumer")?;
    let pid = child.id();
    let watching = tokio::spawn({
        let child = child;
        async move {
            let cost = measure::watch(&child).await;
            (child, cost)
        }
    });
    let drained = drained(&mut conn, &group, &topic, orders).await;
    // Stopped whatever happened, so that no consumer outlives the benchmark.
    let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
    let (mut child, cost) = watching.await?;
    let _ = child.wait();
    drained?;
    let span = check(&mut conn, &provider, orders, http).await?;
    admin_drop(&db).await;
    Ok(Row::drained(name, http, records.len(), span, cost.cpu_s, Some(cost.peak_rss_mib)))
}

/// Waits until every order is charged and the group committed every
/// partition to its end (the seed commits after each transaction).
async fn drained(conn: &mut sqlx::PgConnection, group: &str, topic: &str, orders: i64) -> anyhow::Result<()> {
    let ends: Vec<Option<i64>> = kafka::high_watermarks(topic, PARTITIONS).into_iter().map(Some).collect();
    let deadline = Instant::now() + Duration::from_secs(1_800);
    loop {
        let charged: i64 = sqlx::query_scalar("SELECT count(*) FROM billing.charge").fetch_one(&mut *conn).await?;
        if charged >= orders && kafka::committed(group, topic, PARTITIONS) == ends {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the seed's consumer charged {charged} of {orders} orders in 30 minutes");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
