//! Variant g: what restarts and shutdowns cost (README, "Benchmark").
//!
//! Two hosts in one group (static identities, Kafka's default 45 s
//! session), the billing handler without HTTP, a paced stream of orders
//! throughout. In turn: each host is stopped with SIGTERM and started
//! again (a rolling restart), then one is SIGKILLed and started again.
//! Measured: SIGTERM to exit; a new process's start to every partition
//! processing again (each partition's committed offset moving past where
//! it stood at the start); and, from the charges, the longest time each
//! partition went without a charge while the stream flowed. Checked: every
//! order charged once.

use std::path::PathBuf;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use idem_tests::host::{self, HandlerSpec, order_payload};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;
use sqlx::PgConnection;

use super::{CONCURRENCY, PARTITIONS};

/// Orders per second of the paced stream.
const RATE: i64 = 300;

/// The figures of one run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Restarts {
    /// SIGTERM to exit, each stop.
    pub exit_s: Vec<f64>,
    /// Start to every partition processing, after each SIGTERM.
    pub resume_after_term_s: Vec<f64>,
    /// The same after the SIGKILL.
    pub resume_after_kill_s: f64,
    /// The longest gap between two charges of one partition, per partition.
    pub idle_s: Vec<f64>,
}

struct Run {
    group: String,
    topic: String,
    configs: [PathBuf; 2],
}

impl Run {
    fn start(&self, host: usize) -> Child {
        let id = format!("bench-{host}");
        host::spawn(&self.configs[host], false, &[("IDEM_INSTANCE_ID", id.as_str()), ("IDEM_LOG", "error")])
    }

    fn positions(&self) -> Vec<Option<i64>> {
        kafka::committed(&self.group, &self.topic, PARTITIONS)
    }

    /// From now until every partition's committed offset moved.
    async fn resumed(&self, began: Instant) -> anyhow::Result<f64> {
        let before = self.positions();
        loop {
            let now = self.positions();
            if now.iter().zip(&before).all(|(n, b)| n.unwrap_or(-1) > b.unwrap_or(-1)) {
                return Ok(began.elapsed().as_secs_f64());
            }
            if began.elapsed() > Duration::from_secs(120) {
                bail!("partitions not processing again within 120 s: {before:?} → {now:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn stop(child: Child, signal: &str) -> anyhow::Result<f64> {
    let began = Instant::now();
    host::signal(&child, signal);
    let (status, _) = tokio::task::spawn_blocking(move || host::wait_report(child)).await?;
    if signal == "TERM" && !status.success() {
        bail!("a host stopped by SIGTERM exited with {status}");
    }
    Ok(began.elapsed().as_secs_f64())
}

pub async fn run(provider: &PaymentProvider) -> anyhow::Result<Restarts> {
    let topic = kafka::create_topic(PARTITIONS).await;
    let db = format!("idem_bench_{}", std::process::id());
    let db_url = idem_tests::db::with_database(&idem_tests::db::server_url(), &db);
    let mut spec = HandlerSpec::billing(&topic, &provider.base_url());
    spec.concurrency = CONCURRENCY;
    spec.batch = Some((super::BATCH, 5));
    let config = || {
        let path = super::config_of(std::slice::from_ref(&spec), &db_url, false, false);
        // Kafka's default session, as users run it.
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        std::fs::write(&path, text.replace("\"session.timeout.ms\" = \"6000\"", "\"session.timeout.ms\" = \"45000\""))
            .map(|()| path)
    };
    let run = Run { group: spec.group_id.clone(), topic, configs: [config()?, config()?] };
    let mut conn = super::fresh_database(&db, &run.configs[0]).await?;

    let (flowing, sent) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicI64::new(0)));
    let load = tokio::spawn(pace(run.topic.clone(), flowing.clone(), sent.clone()));
    let mut hosts = vec![run.start(0), run.start(1)];
    run.resumed(Instant::now()).await.context("the first start")?;
    let (mut exit_s, mut resume_after_term_s) = (Vec::new(), Vec::new());
    for i in 0..2 {
        exit_s.push(stop(hosts.remove(i), "TERM").await?);
        let began = Instant::now();
        hosts.insert(i, run.start(i));
        resume_after_term_s.push(run.resumed(began).await?);
    }
    stop(hosts.remove(0), "KILL").await?;
    let began = Instant::now();
    hosts.insert(0, run.start(0));
    let resume_after_kill_s = run.resumed(began).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    flowing.store(false, Ordering::SeqCst);
    load.await?;
    let sent = sent.load(Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(120);
    while charges(&mut conn).await? < sent {
        if Instant::now() > deadline {
            bail!("the stream was not all charged within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for child in hosts {
        exit_s.push(stop(child, "TERM").await?);
    }
    let idle_s = idle(&mut conn).await?;
    let (rows, distinct): (i64, i64) =
        sqlx::query_as("SELECT count(*), count(DISTINCT order_id) FROM billing.charge").fetch_one(&mut conn).await?;
    if rows != sent || distinct != sent {
        bail!("wrong answer: {rows} charges for {distinct} distinct orders, {sent} sent");
    }
    super::admin_drop(&db).await;
    Ok(Restarts { exit_s, resume_after_term_s, resume_after_kill_s, idle_s })
}

/// [`RATE`] orders a second, order `n` on partition `n % PARTITIONS`,
/// while `flowing`.
async fn pace(topic: String, flowing: Arc<AtomicBool>, sent: Arc<AtomicI64>) {
    let producer = kafka::producer();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while flowing.load(Ordering::SeqCst) {
        tick.tick().await;
        let from = sent.load(Ordering::SeqCst);
        let records: Vec<(i32, Vec<u8>)> =
            (from + 1..=from + RATE / 10).map(|n| ((n % i64::from(PARTITIONS)) as i32, order_payload(n).1)).collect();
        kafka::produce_all(&producer, &topic, &records).await;
        sent.fetch_add(RATE / 10, Ordering::SeqCst);
    }
}

async fn charges(conn: &mut PgConnection) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM billing.charge").fetch_one(conn).await?)
}

/// Per partition, the longest gap between consecutive charges.
async fn idle(conn: &mut PgConnection) -> anyhow::Result<Vec<f64>> {
    Ok(sqlx::query_scalar(
        "SELECT coalesce(extract(epoch FROM max(gap))::float8, 0) FROM ( \
           SELECT order_id % $1 AS p, charged_at - lag(charged_at) OVER (PARTITION BY order_id % $1 ORDER BY charged_at) AS gap \
           FROM billing.charge) g GROUP BY p ORDER BY p",
    )
    .bind(i64::from(PARTITIONS))
    .fetch_all(conn)
    .await?)
}

/// The report's lines.
pub fn render(r: &Restarts) -> String {
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let list = |v: &[f64]| v.iter().map(|x| format!("{x:.1}")).collect::<Vec<_>>().join(", ");
    format!(
        "\ng: restarts (2 hosts, 45 s sessions, {RATE} orders/s): SIGTERM to exit {} s (max {:.1}, goal ≤ 10); \
         start to every partition processing again {} s after SIGTERM, {:.1} s after SIGKILL (goal ≤ 10); \
         longest idle per partition {} s\n",
        list(&r.exit_s),
        max(&r.exit_s),
        list(&r.resume_after_term_s),
        r.resume_after_kill_s,
        list(&r.idle_s),
    )
}
