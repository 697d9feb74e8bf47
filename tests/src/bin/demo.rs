//! The billing example end to end: `scripts/demo` runs this.
//!
//! Creates a fresh `idem_demo` database (migrated by `idem migrate`), a
//! 6-partition topic, and a local payment provider; produces a burst of
//! `order.confirmed.v1` events with redelivered duplicates (same eventId,
//! new offsets, some on other partitions) and a few invalid records; runs
//! `idem run` until every order is charged and its payment request taken,
//! deploying a v2 of the module mid-stream with `idem deploy`; prints a
//! summary with the events each version processed, and the steady-state
//! throughput: records resolved from the first commit to the last, the
//! build profile named (the demo runs the dev build; `scripts/bench`
//! measures release).
//!
//! The chain of the design notes runs in it: billing charges each order and
//! emits `payment.requested.v1` through the outbox, and the payments
//! example takes each request once, from a topic of its own.
//!
//! The broker is the one `KAFKA_BROKERS` names (`scripts/demo` starts
//! Apache Kafka when it is unset); `--embedded-broker` runs on librdkafka's
//! mock cluster in this process instead, for a machine without Java.

use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, bail};
use idem_tests::host::{self, HandlerSpec, order_payload};
use idem_tests::provider::PaymentProvider;
use idem_tests::{guests, kafka};
use sqlx::{Connection as _, Executor as _, PgConnection};

const PARTITIONS: i32 = 6;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--embedded-broker") {
        kafka::use_mock_cluster("the demo on a machine without Java (--embedded-broker)");
    }
    let orders: i64 = args.iter().find(|a| !a.starts_with("--")).map(|s| s.parse()).transpose()?.unwrap_or(5000);
    let server = idem_tests::db::server_url();
    let db_url = idem_tests::db::with_database(&server, "idem_demo");

    let provider = PaymentProvider::start().await;
    let topic = kafka::create_topic(PARTITIONS).await;
    let requests = kafka::create_topic(PARTITIONS).await;
    let billing = HandlerSpec::billing_announcing(&topic, &provider.base_url(), &requests);
    let config = host::write_config(&db_url, &[billing, HandlerSpec::payments(&requests)]);

    println!("1. database {db_url}: recreate, then `idem migrate --config {}`", config.display());
    println!("   (idem's schema; the billing and payments handlers' roles, schemas, migrations and grants,");
    println!("   and billing's right to publish payment.requested.v1 on {requests})");
    let mut admin = PgConnection::connect(&server).await.context("failed to connect to PostgreSQL")?;
    admin.execute("DROP DATABASE IF EXISTS idem_demo WITH (FORCE)").await?;
    admin.execute("CREATE DATABASE idem_demo").await?;
    let migrate = Command::new(idem_tests::idem_bin())
        .arg("migrate")
        .arg("--database-url")
        .arg(&db_url)
        .arg("--config")
        .arg(&config)
        .status()?;
    if !migrate.success() {
        bail!("idem migrate failed");
    }
    let mut conn = PgConnection::connect(&db_url).await?;

    println!("2. billing component: {}", guests::component("billing").display());
    println!(
        "3. broker {}, topic {topic} ({PARTITIONS} partitions) → billing → topic {requests} → payments",
        kafka::describe()
    );

    let producer = kafka::producer();
    let originals: Vec<(i32, Vec<u8>)> =
        (0..orders).map(|i| ((i % i64::from(PARTITIONS)) as i32, order_payload(i + 1).1)).collect();
    // Redelivered: the same payload at a new offset, on the same partition or another.
    let duplicates: Vec<(i32, Vec<u8>)> = originals
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 10 < 3)
        .map(|(i, (p, payload))| (if i % 2 == 0 { *p } else { (*p + 1) % PARTITIONS }, payload.clone()))
        .collect();
    let invalid: Vec<(i32, Vec<u8>)> = vec![
        (0, b"not json".to_vec()),
        (0, br#"{"eventId":"0b7f1d2e-8f9a-4c3b-9d2e-1f0a2b3c4d5e","eventType":"order.confirmed.v1"}"#.to_vec()),
    ];
    let (duplicates_n, invalid_n) = (duplicates.len(), invalid.len());
    let records: Vec<(i32, Vec<u8>)> = originals.into_iter().chain(duplicates).chain(invalid).collect();
    kafka::produce_all(&producer, &topic, &records).await;
    println!("4. produced {orders} orders, {duplicates_n} redelivered duplicates, {invalid_n} invalid records");

    println!("5. idem run --config {} (stopped with SIGTERM once the chain is done)", config.display());
    let started = Instant::now();
    let admin_url = host::admin_url(&config);
    // The admin API takes a token, as it should wherever it can deploy code.
    let token = uuid::Uuid::now_v7().simple().to_string();
    let child = host::spawn(&config, false, &[("IDEM_ADMIN_TOKEN", &token)]);
    let pid = child.id();
    let running = tokio::task::spawn_blocking(move || host::wait_report(child));

    // A live deploy: once a third of the orders are charged, v2 of the
    // billing module (the same code with a marker section, so that the
    // switch shows in the per-version counts) goes in through the admin API.
    let v2 = std::env::temp_dir().join("idem-demo-billing-v2.wasm");
    std::fs::write(&v2, guests::with_marker(&std::fs::read(guests::component("billing"))?, "demo v2"))?;
    let deadline = Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let charged: i64 = sqlx::query_scalar("SELECT count(*) FROM billing.charge").fetch_one(&mut conn).await?;
        if charged >= orders / 3 || Instant::now() > deadline || running.is_finished() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    println!("6. idem deploy --url {admin_url} --handler billing {} (mid-stream)", v2.display());
    let deploy = Command::new(idem_tests::idem_bin())
        .args(["deploy", "--url", &admin_url, "--handler", "billing", "--note", "demo v2"])
        .env("IDEM_ADMIN_TOKEN", &token)
        .arg(&v2)
        .status()?;
    if !deploy.success() {
        bail!("idem deploy failed");
    }
    // Done when every order is charged and its request taken (the relay
    // publishes requests as their charges commit), and every invalid record
    // is in the dead-letter topic (the index's row follows the broker's
    // acknowledgement; a handler's first dead letter makes its producer).
    let deadline = Instant::now() + std::time::Duration::from_secs(300);
    loop {
        let (charged, taken, dead): (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM billing.charge), (SELECT count(*) FROM payments.request), \
             (SELECT count(*) FROM idem.dead_letter WHERE handler = 'billing')",
        )
        .fetch_one(&mut conn)
        .await?;
        let all_dead = dead >= invalid_n as i64;
        if (charged >= orders && taken >= orders && all_dead) || Instant::now() > deadline || running.is_finished() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
    let (status, reports) = running.await?;
    let elapsed = started.elapsed().as_secs_f64();
    if !status.success() {
        bail!("idem run failed: {status}");
    }
    let report = reports.first().context("idem run printed no report")?;
    let taken: i64 = sqlx::query_scalar("SELECT count(*) FROM payments.request").fetch_one(&mut conn).await?;
    let caused: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM payments.request r JOIN billing.charge c ON c.order_id = r.order_id \
         WHERE r.caused_by = c.event_id",
    )
    .fetch_one(&mut conn)
    .await?;

    let charges: i64 = sqlx::query_scalar("SELECT count(*) FROM billing.charge").fetch_one(&mut conn).await?;
    let doubled: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT order_id FROM billing.charge GROUP BY order_id HAVING count(*) > 1) d",
    )
    .fetch_one(&mut conn)
    .await?;
    let provider_double = provider.keys().len() - provider.charges();
    println!();
    println!("summary");
    println!("  events delivered:     {}", report.delivered);
    println!("  duplicates skipped:   {}", report.duplicates);
    println!("  invalid messages:     {}", report.invalid);
    println!(
        "  charges made:         {charges} rows in billing.charge, {} charges at the provider",
        provider.charges()
    );
    println!("  double charges:       {}", doubled as usize + provider_double);
    println!("  payment requests:     {taken} taken by payments, {caused} naming the charge that caused them");
    println!("  failed events:        {}", report.failed);
    let per_version: Vec<(Option<i32>, i64)> = sqlx::query_as(
        "SELECT module_version, count(*) FROM idem.processed_event WHERE consumer = 'billing' GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(&mut conn)
    .await?;
    let shown: Vec<String> = per_version
        .iter()
        .map(|(v, n)| format!("{n} on {}", v.map_or("no version".to_owned(), |v| format!("v{v}"))))
        .collect();
    println!("  events per version:   {}", shown.join(", "));
    // Steady state: from the first transaction to the last (processed_at is
    // each transaction's time), so that start-up, the group join and the
    // drain check are not in the rate.
    let (first, last): (Option<chrono::DateTime<chrono::Utc>>, Option<chrono::DateTime<chrono::Utc>>) = sqlx::query_as(
        "SELECT min(processed_at), max(processed_at) FROM idem.processed_event WHERE consumer = 'billing'",
    )
    .fetch_one(&mut conn)
    .await?;
    let steady = match (first, last) {
        (Some(a), Some(b)) => (b - a).num_microseconds().unwrap_or(0) as f64 / 1e6,
        _ => 0.0,
    };
    let profile = if cfg!(debug_assertions) { "dev profile, unoptimised" } else { "release profile" };
    println!(
        "  throughput:           {:.0} events/s steady ({charges} orders in {steady:.2} s, first to last \
         transaction; {profile} build: scripts/bench measures release)",
        charges as f64 / steady.max(0.001)
    );
    println!(
        "  wall time:            {elapsed:.1} s for {} records, host start-up and group join included",
        report.delivered
    );
    if per_version.len() != 2 {
        println!("  (the deploy landed after the last batch: only one version processed events)");
    }
    if charges != orders || doubled != 0 || provider_double != 0 || provider.charges() as i64 != orders {
        bail!("the example did not charge every order exactly once");
    }
    if taken != orders || caused != orders {
        bail!("the chain did not take every payment request exactly once ({taken} taken, {caused} caused)");
    }
    let produced = orders as u64 + (duplicates_n + invalid_n) as u64;
    if report.delivered != produced || report.duplicates != duplicates_n as u64 || report.invalid != invalid_n as u64 {
        bail!("the host did not account for every record produced ({produced})");
    }
    Ok(())
}
