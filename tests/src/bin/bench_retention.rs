//! What retention costs: the claim on a partitioned `idem.processed_event`
//! against the same claim on a plain one, and dropping one window of a
//! 1,000,000-row, 30-window table while claims run.
//!
//! `cargo run --release -p idem-tests --bin bench-retention [-- ROWS]`
//!
//! Two databases, migrated in partition mode and in delete mode (a plain
//! table, with the indexes it had before partitioning), each filled with ROWS claim rows (default 1,000,000) spread over
//! the last 30 days. On each, on the handler's own role and connection:
//! - single claims: BEGIN, `idem_api.claim_events` of one new event, COMMIT;
//! - batched claims: the same with 100 new events, plus 10 of them again
//!   (duplicates, which read the table);
//!
//! then, on the partitioned one, a maintenance pass that drops the oldest
//! window (the recorded retention is set so that exactly one expires)
//! while single claims run back to back: the pass's time, and the slowest
//! claim during it against the slowest claim of the same loop before it.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use idem::config::{RetentionConfig, RetentionMode};
use idem::dedup::claim_many;
use idem::{Event, retention::Maintenance};
use idem_tests::db::TestDb;
use sqlx::{Acquire as _, Executor as _, PgPool};

const DAY_MS: i64 = 86_400_000;

fn event(id: uuid::Uuid) -> Event {
    idem_tests::event(id, serde_json::json!({ "eventType": "test.scenario.v1", "scenario": "ok" }), "bench", 0)
}

async fn now_ms(pool: &PgPool) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT floor(extract(epoch FROM now()) * 1000)::bigint").fetch_one(pool).await?)
}

/// `rows` claim rows of `scenarios`, spread evenly from the start of the
/// UTC day 29 days ago to now: 30 windows.
async fn fill(db: &TestDb, rows: i64) -> anyhow::Result<()> {
    let now = now_ms(&db.pool).await? - 60_000;
    // From today's day (the migration made its windows from it), not the
    // day of a minute ago, which is yesterday's in the first minute.
    let start = ((now + 60_000).div_euclid(DAY_MS) - 29) * DAY_MS;
    sqlx::query(
        "INSERT INTO idem.processed_event (event_id, consumer, topic, \"partition\", \"offset\", payload_sha256) \
         SELECT (lpad(to_hex($1::bigint - (g * $2::bigint / $3::bigint)), 12, '0') || '7' \
                 || substr(md5(g::text), 1, 3) || '8' || substr(md5(g::text), 4, 15))::uuid, \
                'scenarios', 'bench', 0, g, decode(md5(g::text), 'hex') \
         FROM generate_series(1, $3) g",
    )
    .bind(now)
    .bind(now - start)
    .bind(rows)
    .execute(&db.pool)
    .await
    .context("failed to fill idem.processed_event")?;
    db.pool.execute("ANALYZE idem.processed_event").await?;
    Ok(())
}

/// Claims in transactions of `size` new events (plus `dups` already claimed
/// ones); µs per new event.
async fn claims(pool: &PgPool, transactions: usize, size: usize, dups: usize) -> anyhow::Result<f64> {
    let mut conn = pool.acquire().await?;
    let mut claimed: Vec<Event> = Vec::new();
    let started = Instant::now();
    for _ in 0..transactions {
        let mut batch: Vec<Event> = (0..size).map(|_| event(uuid::Uuid::now_v7())).collect();
        batch.extend(claimed.iter().rev().take(dups).cloned());
        let mut tx = conn.begin().await?;
        claim_many(&mut tx, &batch, None, false).await?;
        tx.commit().await?;
        claimed.extend(batch.into_iter().take(size));
    }
    Ok(started.elapsed().as_secs_f64() * 1e6 / (transactions * size) as f64)
}

/// Single claims back to back until `stop`; the slowest one.
async fn slowest_claim_until(
    pool: PgPool,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<(Duration, usize)> {
    let mut conn = pool.acquire().await?;
    let (mut slowest, mut n) = (Duration::ZERO, 0);
    while !*stop.borrow() {
        let started = Instant::now();
        let mut tx = conn.begin().await?;
        claim_many(&mut tx, &[event(uuid::Uuid::now_v7())], None, false).await?;
        tx.commit().await?;
        slowest = slowest.max(started.elapsed());
        n += 1;
    }
    Ok((slowest, n))
}

/// The slowest of the single claims run back to back while `during` runs.
async fn stall_during<F: std::future::Future<Output = anyhow::Result<T>>, T>(
    pool: &PgPool,
    during: F,
) -> anyhow::Result<(T, Duration, usize)> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let loop_ = tokio::spawn(slowest_claim_until(pool.clone(), stop_rx));
    let out = during.await?;
    let _ = stop_tx.send(true);
    let (slowest, n) = loop_.await??;
    Ok((out, slowest, n))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let rows: i64 = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(1_000_000);
    let mut figures = Vec::new();
    let mut single = Vec::new();
    let mut batched = Vec::new();
    for mode in [RetentionMode::Delete, RetentionMode::Partition] {
        let db = TestDb::new_for(mode).await?;
        // The plain table as it was before partitioning (delete mode adds
        // an index of its own for its deletes).
        db.pool.execute("DROP INDEX IF EXISTS idem.processed_event_consumer").await?;
        // The windows of the 30 days (partition mode): the retention recorded, a pass.
        sqlx::query(
            "INSERT INTO idem.consumer_retention (consumer, retention, future_skew, recorded_by) \
             VALUES ('scenarios', interval '29 days', interval '1 hour', 'bench')",
        )
        .execute(&db.pool)
        .await?;
        Maintenance::new(db.pool.clone(), RetentionConfig { mode, ..RetentionConfig::default() }).pass().await?;
        let started = Instant::now();
        fill(&db, rows).await?;
        eprintln!(
            "bench-retention: {} filled with {rows} rows in {:.1} s",
            mode.as_str(),
            started.elapsed().as_secs_f64()
        );
        let pool = db.handler_pool("scenarios", "scenario").await;
        claims(&pool, 500, 1, 0).await?; // warm-up
        single.push(claims(&pool, 5_000, 1, 0).await?);
        batched.push(claims(&pool, 200, 100, 10).await?);

        if mode == RetentionMode::Partition {
            let windows =
                db.count("SELECT count(*) FROM pg_inherits WHERE inhparent = 'idem.processed_event'::regclass").await;
            let (_, idle, idle_n) = stall_during(&pool, async {
                tokio::time::sleep(Duration::from_secs(3)).await;
                Ok(())
            })
            .await?;
            // Exactly the oldest day (29 days ago) expires at 28 days.
            sqlx::query("UPDATE idem.consumer_retention SET retention = interval '28 days'").execute(&db.pool).await?;
            let maintenance = Maintenance::new(db.pool.clone(), RetentionConfig::default());
            let (report, during, during_n) = stall_during(&pool, async {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let started = Instant::now();
                let report = maintenance.pass().await?;
                Ok((report, started.elapsed()))
            })
            .await?;
            let (report, took) = report;
            let dropped: Vec<String> = report.dropped.iter().map(|d| format!("{} (~{} rows)", d.day, d.rows)).collect();
            figures.push(format!("windows before the pass: {windows}; dropped: {}", dropped.join(", ")));
            figures.push(format!("maintenance pass (drop included): {:.1} ms", took.as_secs_f64() * 1e3));
            figures.push(format!(
                "slowest single claim: {:.1} ms during the pass ({during_n} claims), {:.1} ms in 3 s before it \
                 ({idle_n} claims); ratio {:.2}",
                during.as_secs_f64() * 1e3,
                idle.as_secs_f64() * 1e3,
                during.as_secs_f64() / idle.as_secs_f64().max(1e-9)
            ));
        }
        pool.close().await;
        db.drop_database().await;
    }
    println!("# bench-retention: {rows} rows over 30 days, one handler role, one connection");
    println!();
    println!("| claim | plain table µs/event | partitioned µs/event | partitioned / plain |");
    println!("|---|---|---|---|");
    println!(
        "| single (1 event per transaction) | {:.1} | {:.1} | {:.2} |",
        single[0],
        single[1],
        single[1] / single[0]
    );
    println!(
        "| batched (100 new + 10 duplicates) | {:.1} | {:.1} | {:.2} |",
        batched[0],
        batched[1],
        batched[1] / batched[0]
    );
    println!();
    for line in figures {
        println!("- {line}");
    }
    Ok(())
}
