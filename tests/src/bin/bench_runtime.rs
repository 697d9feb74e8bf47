//! Per-event cost of the handler runtime on the examples.
//!
//! `cargo run --release -p idem-tests --bin bench-runtime [-- EVENTS]`
//!
//! For the billing example (INSERT + POST), the notification example (the
//! INSERT alone: the runtime's cost without HTTP) and the same effect from
//! a Python guest (componentize-py), runs the same work
//! two ways, one event at a time on one connection, in the same process
//! against the same PostgreSQL and local provider:
//! - baseline: hand-written Rust doing what the seed does per event (BEGIN,
//!   claim INSERT … RETURNING, the business INSERT, for billing the POST
//!   with Idempotency-Key, COMMIT);
//! - idem: `Executor::execute` with the example's component on the
//!   handler's own pool and role (pinned settings at BEGIN, claim through
//!   `idem_api.claim_events`, an instance as the component declares — the
//!   examples are reusable, so kept for 1000 events —, guest code,
//!   savepoint per statement, the same SQL and POST, connection reset on
//!   release). Every event must come back `Processed` (each is new), or the
//!   run stops: a figure from events that did nothing would be no figure.
//!
//! Prints µs/event and events/s for each and the ratio idem/baseline, and
//! the executor's cost with the metrics `idem run` keeps (on/off, the off
//! run taken before and after it).

use std::time::Instant;

use anyhow::Context as _;
use idem::executor::Pins;
use idem::{Event, Executor, Handler, HandlerSettings, Runtime};
use idem_tests::db::TestDb;
use idem_tests::guests;
use idem_tests::provider::PaymentProvider;
use serde_json::json;

fn order(i: i64) -> Event {
    let payload = json!({
        "eventType": "order.confirmed.v1", "occurredAt": "2026-11-30T00:00:00Z",
        "aggregateType": "Order", "orderId": i + 1, "customerId": 7, "totalAmount": 10.25, "currency": "EUR",
    });
    idem_tests::event(uuid::Uuid::now_v7(), payload, "orders.confirmed", i)
}

/// The seed's per-event work by hand; `post_to` adds the charge request
/// (billing), without it the row is the whole effect (notification).
async fn baseline(db: &TestDb, http: &reqwest::Client, post_to: Option<&str>, events: &[Event]) -> anyhow::Result<f64> {
    let start = Instant::now();
    for (i, e) in events.iter().enumerate() {
        let mut tx = db.pool.begin().await?;
        let claimed: Option<uuid::Uuid> = sqlx::query_scalar(
            "INSERT INTO idem.processed_event (event_id, consumer, topic, \"partition\", \"offset\") \
             VALUES ($1, 'baseline', $2, 0, $3) ON CONFLICT DO NOTHING RETURNING event_id",
        )
        .bind(e.id)
        .bind(&e.topic)
        .bind(e.offset)
        .fetch_optional(&mut *tx)
        .await?;
        if claimed.is_none() {
            continue;
        }
        if post_to.is_some() {
            sqlx::query(
                "INSERT INTO billing.charge (event_id, order_id, customer_id, amount, currency) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(uuid::Uuid::now_v7())
            .bind(i as i64)
            .bind(7i64)
            .bind(10.25f64)
            .bind("EUR")
            .execute(&mut *tx)
            .await?;
        } else {
            sqlx::query("INSERT INTO notification.sent (event_id, customer_id, message) VALUES ($1, $2, $3)")
                .bind(uuid::Uuid::now_v7())
                .bind(7i64)
                .bind(format!("Your order {i} is confirmed."))
                .execute(&mut *tx)
                .await?;
        }
        if let Some(url) = post_to {
            http.post(format!("{url}/v1/charges"))
                .header("Idempotency-Key", e.id.to_string())
                .header("content-type", "application/json")
                .body(json!({"orderId": i, "amount": 10.25, "currency": "EUR"}).to_string())
                .send()
                .await?
                .error_for_status()?;
        }
        tx.commit().await?;
    }
    Ok(start.elapsed().as_secs_f64())
}

async fn idem_run(exec: &Executor, events: &[Event]) -> anyhow::Result<f64> {
    let start = Instant::now();
    for e in events {
        let outcome = exec.execute(e, 1).await.with_context(|| format!("event {}", e.id))?;
        if outcome != idem::Outcome::Processed {
            anyhow::bail!("event {} was {outcome:?}, not processed: the figures would not measure the work", e.id);
        }
    }
    Ok(start.elapsed().as_secs_f64())
}

/// `name`'s component: an example's, or a guest's (`guests::component`
/// builds the SDK ones with their build scripts).
fn component(name: &str) -> std::path::PathBuf {
    guests::component(name)
}

fn load(runtime: &Runtime, name: &str, provider: &PaymentProvider) -> anyhow::Result<(Handler, f64)> {
    let mut settings = HandlerSettings::new(name);
    settings.caps.http.allow = vec![provider.base_url()];
    settings.caps.http.allow_private = vec![provider.base_url()];
    settings.caps.config.insert("payment_base_url".into(), provider.base_url());
    let started = Instant::now();
    let handler = Handler::load(runtime, &component(name), settings)?;
    Ok((handler, started.elapsed().as_secs_f64() * 1e3))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(2000);
    let db = TestDb::new().await?;
    let provider = PaymentProvider::start().await;
    let runtime = Runtime::new()?;
    let http = reqwest::Client::new();
    let url = provider.base_url();
    println!("{n} events per run (a tenth for Python), one at a time, one connection");

    // billing: INSERT + POST; notification: the INSERT alone, which shows
    // the runtime's own cost without the HTTP round trip.
    // python-notification: the notification effect from a Python guest
    // (componentize-py: a whole CPython instantiated per event), against
    // the same baseline; it runs a tenth of the events.
    let handlers =
        [("billing", Some(url.as_str()), n), ("notification", None, n), ("python-notification", None, n / 10)];
    for (name, post_to, n) in handlers {
        let per = |secs: f64| secs * 1e6 / n as f64;
        let (handler, load_ms) = load(&runtime, name, &provider)?;
        // The handler's own pool and role, as `idem run` opens them.
        let schema = name.trim_start_matches("python-");
        let pins = Pins { schema: schema.into(), synchronous_commit: "on".into() };
        let client = idem::http_client(&handler.settings().caps.http)?;
        let exec = Executor::new(handler, db.handler_pool(schema, schema).await, client, pins);
        // Warm both paths (connections, prepared statements, code).
        baseline(&db, &http, post_to, &(0..50).map(order).collect::<Vec<_>>()).await?;
        idem_run(&exec, &(0..50).map(order).collect::<Vec<_>>()).await?;

        let base = baseline(&db, &http, post_to, &(0..n as i64).map(order).collect::<Vec<_>>()).await?;
        let ours = idem_run(&exec, &(0..n as i64).map(order).collect::<Vec<_>>()).await?;
        // The same executor counting into a handler's metrics, as `idem run`
        // does: timings, statements, HTTP calls (tracing stays off).
        let counted = exec.with_stats(std::sync::Arc::new(idem::stats::Stats::default()));
        idem_run(&counted, &(0..50).map(order).collect::<Vec<_>>()).await?;
        let metered = idem_run(&counted, &(0..n as i64).map(order).collect::<Vec<_>>()).await?;
        // And without again, so that drift of the database shows.
        let again = idem_run(&exec, &(0..n as i64).map(order).collect::<Vec<_>>()).await?;
        println!();
        println!("{name} (component load: {load_ms:.0} ms)");
        println!(
            "  baseline, hand-written sqlx{}: {:>8.1} µs/event {:>7.0} events/s",
            if post_to.is_some() { " + reqwest" } else { "" },
            per(base),
            n as f64 / base
        );
        println!("  idem executor, {name} component: {:>8.1} µs/event {:>7.0} events/s", per(ours), n as f64 / ours);
        println!("  ratio idem/baseline (time per event): {:.2}", ours / base);
        println!(
            "  idem with metrics: {:>8.1} µs/event; ratio metrics on/off: {:.3} (off again: {:.1} µs/event)",
            per(metered),
            metered / ((ours + again) / 2.0),
            per(again)
        );
    }
    for name in ["billing-python", "billing-ts"] {
        start(&provider, name)?;
    }
    db.drop_database().await;
    Ok(())
}

/// An SDK component's load as a host start does it: compiled, and then in
/// a fresh runtime from the compiled-artifact cache `idem run` keeps
/// (`[runtime] cache_dir`), the same file.
fn start(provider: &PaymentProvider, name: &str) -> anyhow::Result<()> {
    use idem::runtime::{ArtifactCache, PoolSize};
    let dir = std::env::temp_dir().join(idem_tests::unique_name("bench_artifacts"));
    std::fs::create_dir_all(&dir)?;
    let runtime = || -> anyhow::Result<Runtime> {
        let cache = ArtifactCache::open(&dir).map_err(anyhow::Error::msg)?;
        Runtime::with_pool_and_cache(PoolSize::default(), Some(cache))
    };
    let size = std::fs::metadata(component(name))?.len() as f64 / (1 << 20) as f64;
    let (_, compiled_ms) = load(&runtime()?, name, provider)?;
    let (_, cached_ms) = load(&runtime()?, name, provider)?;
    let _ = std::fs::remove_dir_all(&dir);
    println!();
    println!(
        "{name} start ({size:.1} MiB): compiled {compiled_ms:.0} ms, from the artifact cache {cached_ms:.0} ms \
         (ratio {:.3}, goal ≤ 0.1)",
        cached_ms / compiled_ms
    );
    Ok(())
}
