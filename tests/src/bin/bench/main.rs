//! `scripts/bench`: one run that races idem against itself per event, a
//! native (no wasm) handler and the SQL ceiling, on this machine, with and without the payment
//! call. See the README's "Benchmark".
//!
//! Per variant: a fresh database (`idem migrate`), a fresh topic, N orders
//! on 6 partitions plus 10% redelivered duplicates produced up front; the
//! host drains them (`idem run --exit-when-drained`, a child process, so
//! its CPU time and peak RSS are its own). Throughput is records over the
//! span between the first and the last transaction (start-up and the
//! group's join excluded). Then, on the same host config, a paced stream at
//! half that rate for a few seconds gives the end-to-end latency (record
//! timestamp to commit, as the host measures it). Every variant is checked:
//! charges = distinct orders, provider charges = distinct keys.

mod ceiling;
mod compare;
mod emit;
mod formats;
mod measure;
mod restarts;
mod seed;
mod skewed;
mod viewers;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use idem_tests::host::{self, HandlerSpec, order_payload};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;
use serde::Serialize;
use sqlx::{Connection as _, Executor as _, PgConnection, PgPool};

const PARTITIONS: i32 = 6;
const CONCURRENCY: usize = 3;
const BATCH: usize = 100;
/// How long the paced stream for latency lasts.
const PACED_FOR: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Serialize)]
struct Row {
    variant: &'static str,
    http: bool,
    records: u64,
    events_per_s: f64,
    p50_ms: Option<u64>,
    p99_ms: Option<u64>,
    /// The CPU seconds of the consumer (idem's whole process, start-up
    /// included; for d and i the ceiling's client in this process).
    cpu_s: f64,
    /// `cpu_s` per record, in microseconds.
    cpu_us_per_event: f64,
    peak_rss_mib: Option<f64>,
}

impl Row {
    /// A drain without a paced latency run: `records` over `span` seconds.
    fn drained(variant: &'static str, http: bool, records: usize, span: f64, cpu_s: f64, rss: Option<f64>) -> Self {
        Row {
            variant,
            http,
            records: records as u64,
            events_per_s: records as f64 / span.max(1e-3),
            p50_ms: None,
            p99_ms: None,
            cpu_s,
            cpu_us_per_event: cpu_s * 1e6 / (records.max(1) as f64),
            peak_rss_mib: rss,
        }
    }
}

#[derive(Clone, Copy)]
enum Kind {
    /// `native`: the billing logic compiled into the host
    /// (`idem_tests::native`), not the component.
    /// `noisy`: beside a hostile handler (see [`hostile`]).
    /// `drops`: the provider resets one connection in 25 after charging
    /// (only with HTTP).
    /// `concurrent`: a batch's events up to that many at once
    /// (`ordering = "key"`, one lane per partition, `[handler.batch]
    /// max_concurrent`).
    Idem(Shape),
    /// The SQL ceiling, a batch's events up to that many at once (their
    /// INSERTs taking the transaction in turn, their POSTs together).
    Ceiling { concurrent: usize },
    /// The seed's own Node consumer (`seed`).
    Seed,
    /// The skewed stream under an `ordering` (`skewed`; only with HTTP).
    Skewed(&'static str),
    /// Billing emitting one event per order through the outbox, taken by a
    /// second handler (`emit`; only without HTTP).
    Emit,
    /// a on records of a registry format (`formats`).
    Format(&'static str),
}

struct Variant {
    name: &'static str,
    kind: Kind,
}

const VARIANTS: &[Variant] = &[
    Variant { name: "a: idem, batched", kind: Kind::Idem(BATCHED) },
    Variant { name: "b: idem, max_events = 1", kind: Kind::Idem(Shape { max_events: 1, ..BATCHED }) },
    Variant { name: "c: idem, native handler", kind: Kind::Idem(Shape { native: true, ..BATCHED }) },
    Variant {
        name: "n: a, a fresh instance per event (events_per_instance = 1)",
        kind: Kind::Idem(Shape { events_per_instance: 1, ..BATCHED }),
    },
    Variant {
        name: "l: a, the host on one worker thread (IDEM_WORKER_THREADS = 1)",
        kind: Kind::Idem(Shape { one_worker: true, ..BATCHED }),
    },
    Variant { name: "d: SQL ceiling", kind: Kind::Ceiling { concurrent: 1 } },
    Variant { name: "e: a, beside a hostile handler", kind: Kind::Idem(Shape { noisy: true, ..BATCHED }) },
    Variant { name: "f: a, provider resetting 1 charge in 25", kind: Kind::Idem(Shape { drops: true, ..BATCHED }) },
    Variant {
        name: "h: a, ordering = key, 8 events of a batch at once",
        kind: Kind::Idem(Shape { concurrent: AT_ONCE, ..BATCHED }),
    },
    Variant { name: "i: SQL ceiling, 8 events of a batch at once", kind: Kind::Ceiling { concurrent: AT_ONCE } },
    Variant { name: "o: a, each order emitting an event a second handler takes", kind: Kind::Emit },
    Variant { name: "k: skewed stream, ordering = partition", kind: Kind::Skewed("partition") },
    Variant { name: "k: skewed stream, ordering = key", kind: Kind::Skewed("key") },
    Variant {
        name: "p: a, the billing handler in Python, events_per_instance = 1000, concurrency = 6",
        kind: Kind::Idem(Shape { component: "billing-python", events_per_instance: 1000, concurrency: 6, ..BATCHED }),
    },
    Variant {
        name: "t: a, the billing handler in TypeScript, events_per_instance = 1000, concurrency = 6",
        kind: Kind::Idem(Shape { component: "billing-ts", events_per_instance: 1000, concurrency: 6, ..BATCHED }),
    },
    Variant { name: "r: a on Avro records (schema registry)", kind: Kind::Format("avro") },
    Variant { name: "q: a on Protobuf records (schema registry)", kind: Kind::Format("protobuf") },
    Variant { name: "s: the seed's stack (kafkajs, TypeORM, zod)", kind: Kind::Seed },
    Variant {
        name: "v: a, watched by 10 console viewers refreshing every second",
        kind: Kind::Idem(Shape { viewers: true, ..BATCHED }),
    },
    Variant {
        name: "w: a, with a shadow version beside it (the same code, always rolled back)",
        kind: Kind::Idem(Shape { shadow: true, ..BATCHED }),
    },
    Variant {
        name: "x: a, its ledger audit sweeping every second (5000 records/s)",
        kind: Kind::Idem(Shape { audited: true, ..BATCHED }),
    },
];

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().is_some_and(|a| a == "compare") {
        args.next();
        return compare_main(args).await;
    }
    let orders: i64 = args.next().map(|s| s.parse()).transpose().context("N: a number of orders")?.unwrap_or(100_000);
    let out = PathBuf::from(args.next().unwrap_or_else(|| "bench-out".into()));
    std::fs::create_dir_all(&out)?;
    // `BENCH_VARIANTS=afg` runs only those (by letter); all by default.
    let only = std::env::var("BENCH_VARIANTS").unwrap_or_else(|_| "abcdefghilnoptksvrqwx".into());
    let chosen = |name: &str| name.chars().next().is_some_and(|c| only.contains(c));
    // `BENCH_ROUNDS=4`: the chosen variants four times, in turn and every
    // other round backwards (a v v a a v v a, so that a drift of the
    // machine over the run favours neither), each shown by its median
    // round: two variants close in speed are compared over more than one
    // run's luck.
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(1).max(1);
    let mut rows = Vec::new();
    let mut relayed = None;
    for http in [false, true] {
        let order = |round: usize| -> Vec<&Variant> {
            if round.is_multiple_of(2) { VARIANTS.iter().collect() } else { VARIANTS.iter().rev().collect() }
        };
        for variant in (0..rounds).flat_map(order) {
            let http_only = matches!(variant.kind, Kind::Idem(Shape { drops: true, .. }) | Kind::Skewed(_));
            let without_only = matches!(variant.kind, Kind::Emit);
            if (http_only && !http) || (without_only && http) || !chosen(variant.name) {
                continue;
            }
            eprintln!("bench: {} ({}), {orders} orders", variant.name, if http { "with HTTP" } else { "no HTTP" });
            let row = match variant.kind {
                Kind::Idem(shape) => idem_variant(variant.name, shape, http, orders).await?,
                Kind::Ceiling { concurrent } => ceiling_variant(variant.name, http, orders, concurrent).await?,
                Kind::Seed => seed::variant(variant.name, http, orders).await?,
                Kind::Format(format) => formats::variant(variant.name, format, http, orders).await?,
                Kind::Skewed(ordering) => skewed::variant(variant.name, ordering).await?,
                Kind::Emit => {
                    let (row, figures) = emit::variant(variant.name, orders).await?;
                    relayed = Some(figures);
                    row
                }
            };
            eprintln!("bench:   {:.0} records/s", row.events_per_s);
            rows.push(row);
        }
    }
    let (rows, spread) = medians(rows);
    let mut report = render(&rows);
    if rounds > 1 {
        report.push_str(&format!("\nMedians of {rounds} rounds; records/s in each: {spread}\n"));
    }
    report.push_str(&formats::render(&rows));
    if chosen("r") || chosen("q") {
        report.push_str(&formats::decode_costs().await?);
    }
    if let Some(r) = &relayed {
        let a = rows.iter().find(|r| !r.http && r.variant.starts_with('a')).map_or(f64::NAN, |r| r.events_per_s);
        let o = rows.iter().find(|r| r.variant.starts_with('o')).map_or(f64::NAN, |r| r.events_per_s);
        // o/a only when this run measured a.
        let o_a = if a.is_nan() {
            String::new()
        } else {
            format!("o/a = {:.2} (goal ≥ 0.5: two handlers' work per order); ", o / a)
        };
        report.push_str(&format!(
            "\no: {o_a}the relay published {:.0} rows/s against {:.0} emitted/s (goal ≥ 1: {:.2}); \
             charge to request at half o's throughput: p50 {:.0} ms, p99 {:.0} ms (goal ≤ 250)\n",
            r.relay_per_s,
            r.emit_per_s,
            r.relay_per_s / r.emit_per_s,
            r.p50_ms,
            r.p99_ms
        ));
        std::fs::write(out.join("emit.json"), serde_json::to_string_pretty(r)?)?;
    }
    for http in [false, true] {
        let of = |letter: char| rows.iter().find(|r| r.http == http && r.variant.starts_with(letter));
        let with = if http { " (HTTP)" } else { "" };
        if let (Some(a), Some(w)) = (of('a'), of('w')) {
            let ratio = w.events_per_s / a.events_per_s;
            report.push_str(&format!(
                "\nw{with}: w/a = {ratio:.2} (goal ≥ 0.8: a shadow costs the active version at most its share)\n"
            ));
        }
        if let (Some(a), Some(x)) = (of('a'), of('x')) {
            let ratio = x.events_per_s / a.events_per_s;
            report.push_str(&format!("\nx{with}: x/a = {ratio:.2} (goal ≥ 0.95: the ledger audit costs at most 5%)\n"));
        }
    }
    if chosen("g") {
        eprintln!("bench: g: restarts");
        let figures = restarts::run(&PaymentProvider::start().await).await?;
        report.push_str(&restarts::render(&figures));
        std::fs::write(out.join("restarts.json"), serde_json::to_string_pretty(&figures)?)?;
    }
    println!("{report}");
    std::fs::write(out.join("bench.md"), &report)?;
    std::fs::write(out.join("bench.json"), serde_json::to_string_pretty(&rows)?)?;
    eprintln!("bench: wrote {0}/bench.md and {0}/bench.json", out.display());
    Ok(())
}

/// Each variant's median row over its rounds (in first-run order), and
/// every round's records/s per variant.
fn medians(rows: Vec<Row>) -> (Vec<Row>, String) {
    let mut groups: Vec<Vec<Row>> = Vec::new();
    for row in rows {
        match groups.iter_mut().find(|g| g[0].variant == row.variant && g[0].http == row.http) {
            Some(group) => group.push(row),
            None => groups.push(vec![row]),
        }
    }
    let mut spread = Vec::new();
    let medians = groups
        .into_iter()
        .filter_map(|mut group| {
            let each: Vec<String> = group.iter().map(|r| format!("{:.0}", r.events_per_s)).collect();
            let (letter, http) = (group[0].variant.split(':').next().unwrap_or(""), group[0].http);
            spread.push(format!("{letter}{} {}", if http { " (HTTP)" } else { "" }, each.join(", ")));
            group.sort_by(|a, b| a.events_per_s.total_cmp(&b.events_per_s));
            let middle = group.len() / 2;
            group.into_iter().nth(middle)
        })
        .collect();
    (medians, spread.join("; "))
}

/// `bench compare BASE_BIN LABEL SEALED N ROUNDS OUT` (scripts/bench-compare);
/// `BENCH_VARIANTS` picks the variants as for the whole run (a by default).
async fn compare_main(mut args: impl Iterator<Item = String>) -> anyhow::Result<()> {
    let mut next = |what: &str| args.next().with_context(|| format!("compare: {what} missing"));
    let bin = PathBuf::from(next("the base binary")?);
    let label = next("the base's label")?;
    let sealed = next("whether the base seals dead letters")? == "sealed";
    let orders: i64 = next("N")?.parse().context("N: a number of orders")?;
    let rounds: usize = next("ROUNDS")?.parse().context("ROUNDS: a number")?;
    let out = PathBuf::from(next("OUT")?);
    std::fs::create_dir_all(&out)?;
    let letters = std::env::var("BENCH_VARIANTS").unwrap_or_else(|_| "a".into());
    let comparison = compare::run(&compare::Base { label, bin, sealed }, &letters, orders, rounds).await?;
    let report = compare::render(&comparison);
    println!("{report}");
    std::fs::write(out.join("compare.md"), &report)?;
    std::fs::write(out.join("compare.json"), serde_json::to_string_pretty(&comparison)?)?;
    eprintln!("bench: wrote {0}/compare.md and {0}/compare.json", out.display());
    Ok(())
}

/// One record of the workload: its partition, its key (the order id, the
/// aggregate's, as the design notes' producers key), its payload.
type Record = (i32, String, Vec<u8>);

/// N orders round-robin over the partitions, then 10% of them again (same
/// payload, same eventId), half on their partition and half on the next.
fn workload(orders: i64) -> Vec<Record> {
    let originals: Vec<Record> = (1..=orders)
        .map(|order| (((order - 1) % i64::from(PARTITIONS)) as i32, order.to_string(), order_payload(order).1))
        .collect();
    let again: Vec<Record> = originals
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 10 == 0)
        .map(|(i, (p, key, payload))| {
            (if i % 20 == 0 { *p } else { (*p + 1) % PARTITIONS }, key.clone(), payload.clone())
        })
        .collect();
    originals.into_iter().chain(again).collect()
}

/// A fresh database `name`, migrated for `config` by `idem migrate`.
async fn fresh_database(name: &str, config: &Path) -> anyhow::Result<PgConnection> {
    let server = idem_tests::db::server_url();
    let mut admin = PgConnection::connect(&server).await.context("failed to connect to PostgreSQL")?;
    admin.execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str()).await?;
    admin.execute(format!("CREATE DATABASE {name}").as_str()).await?;
    // As an administrator of `name` itself: a DATABASE_URL in the
    // environment names the server's database, which migrate refuses.
    let admin_url = idem_tests::db::with_database(&server, name);
    let migrate = Command::new(idem_tests::idem_bin())
        .arg("migrate")
        .arg("--database-url")
        .arg(&admin_url)
        .arg("--config")
        .arg(config)
        .status()?;
    if !migrate.success() {
        bail!("idem migrate failed");
    }
    Ok(PgConnection::connect(&idem_tests::db::with_database(&server, name)).await?)
}

/// The noisy neighbour: a handler whose every event sends the largest
/// statement the caps allow (a 60 KB ARRAY literal, the guard's most
/// expensive kind) in a loop until its 1 s budget ends, then fails for
/// good (one attempt) and is dead-lettered; enough of them to outlast
/// billing's drain. Billing's throughput beside it is variant e.
fn hostile(topic: &str, provider: &PaymentProvider, orders: i64) -> (HandlerSpec, Vec<Vec<u8>>) {
    let mut spec = HandlerSpec::scenarios(topic, &provider.base_url());
    spec.max_attempts = 1;
    spec.extra = "timeout_ms = 1000\n".into();
    let sql = format!("SELECT ARRAY[{}]", vec!["1"; 30_000].join(","));
    // At 1 s each, enough to outlast billing's drain (10,000 events a
    // second or less at this benchmark's settings) twice over.
    let events = (0..(orders / 5_000).max(15))
        .map(|_| {
            serde_json::json!({
                "eventId": uuid::Uuid::now_v7().to_string(), "eventType": "test.scenario.v1",
                "occurredAt": "2026-11-30T12:00:00Z", "scenario": "statement-loop", "sql": sql,
            })
            .to_string()
            .into_bytes()
        })
        .collect();
    (spec, events)
}

/// How a variant batches: `max_events`, and `concurrent` events of a batch
/// at once (above 1: `ordering = "key"` with one lane per partition).
#[derive(Clone, Copy)]
struct Tuning {
    max_events: usize,
    concurrent: usize,
    component: &'static str,
    events_per_instance: u32,
    concurrency: usize,
}

/// The Rust component, batched, events one at a time, instances as the
/// component declares (billing: reusable, so 1000 events each).
const PLAIN: Tuning =
    Tuning { max_events: BATCH, concurrent: 1, component: "billing", events_per_instance: 0, concurrency: CONCURRENCY };

/// A config for the billing handler; without HTTP, the example's switch;
/// `native`: the native billing handler instead of the component;
/// `beside`: another handler in the same host.
fn config(
    topic: &str,
    provider: &PaymentProvider,
    db_url: &str,
    tuning: Tuning,
    native: bool,
    http: bool,
    beside: Option<HandlerSpec>,
) -> PathBuf {
    let mut spec = HandlerSpec::billing(topic, &provider.base_url());
    spec.component = tuning.component;
    if tuning.events_per_instance > 0 {
        spec.extra.push_str(&format!("events_per_instance = {}\n", tuning.events_per_instance));
    }
    spec.batch = Some((tuning.max_events, 5));
    if tuning.concurrent > 1 {
        spec = spec.with_lanes("key", 1).with_max_concurrent(tuning.concurrent);
    }
    spec.concurrency = tuning.concurrency;
    config_of(&std::iter::once(spec).chain(beside).collect::<Vec<_>>(), db_url, native, http)
}

/// A config of `handlers` (the first the billing one), as [`config`] tunes it.
fn config_of(handlers: &[HandlerSpec], db_url: &str, native: bool, http: bool) -> PathBuf {
    let path = host::write_config(db_url, handlers);
    // No `fetch.*` property: the broker is Apache Kafka, run with the
    // defaults users have.
    let mut text = std::fs::read_to_string(&path).unwrap_or_default();
    if !http {
        text = text.replace("[handler.config]\n", "[handler.config]\ncharge_payment = \"false\"\n");
    }
    if native {
        text = text
            .lines()
            .map(|l| if l.starts_with("component = ") { "native = \"billing\"" } else { l })
            .collect::<Vec<_>>()
            .join("\n");
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("config: {e}"));
    path
}

/// The span between the first and the last charge's transaction, and
/// whether every order was charged once (and, with HTTP, once at the provider).
async fn check(conn: &mut PgConnection, provider: &PaymentProvider, orders: i64, http: bool) -> anyhow::Result<f64> {
    let (rows, distinct, span): (i64, i64, f64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT order_id), \
         coalesce(extract(epoch FROM max(charged_at) - min(charged_at))::float8, 0) FROM billing.charge",
    )
    .fetch_one(&mut *conn)
    .await?;
    if rows != orders || distinct != orders {
        bail!("wrong answer: {rows} charges for {distinct} distinct orders, {orders} expected");
    }
    if http && provider.charges() as i64 != orders {
        bail!("wrong answer: {} provider charges, {orders} expected", provider.charges());
    }
    Ok(span)
}

/// What an idem variant runs (see [`Kind::Idem`]).
#[derive(Clone, Copy)]
struct Shape {
    /// The billing handler's component (see `idem_tests::guests::component`).
    component: &'static str,
    /// `events_per_instance` (1: a fresh instance per event; 0: not set,
    /// as the component declares).
    events_per_instance: u32,
    /// The handler's `concurrency`.
    concurrency: usize,
    max_events: usize,
    native: bool,
    noisy: bool,
    drops: bool,
    concurrent: usize,
    /// Beside [`viewers::VIEWERS`] console viewers.
    viewers: bool,
    /// With a shadow version (the same component under another hash) in
    /// the store: `idem deploy --shadow`'s cost to the active version.
    shadow: bool,
    /// The ledger audit sweeping every second (`[handler.audit] every`,
    /// 10 minutes by default): its cost to the handler.
    audited: bool,
    /// The host on one worker thread (`IDEM_WORKER_THREADS=1`) rather
    /// than one per core.
    one_worker: bool,
}

/// The plain batched shape the variants vary.
const BATCHED: Shape = Shape {
    component: "billing",
    events_per_instance: 0,
    concurrency: CONCURRENCY,
    max_events: BATCH,
    native: false,
    noisy: false,
    drops: false,
    concurrent: 1,
    viewers: false,
    shadow: false,
    audited: false,
    one_worker: false,
};

/// Events of one batch at once in variants h and i.
const AT_ONCE: usize = 8;

async fn idem_variant(name: &'static str, shape: Shape, http: bool, orders: i64) -> anyhow::Result<Row> {
    let Shape { max_events, native, noisy, drops, concurrent, viewers, .. } = shape;
    let provider = PaymentProvider::start().await;
    if drops {
        provider.set_fault(idem_tests::provider::Fault::ResetEvery(25));
    }
    let topic = kafka::create_topic(PARTITIONS).await;
    let db = format!("idem_bench_{}", std::process::id());
    let db_url = idem_tests::db::with_database(&idem_tests::db::server_url(), &db);
    let hostile = match noisy {
        true => Some(hostile(&kafka::create_topic(1).await, &provider, orders)),
        false => None,
    };
    let beside = hostile.as_ref().map(|(spec, _)| spec.clone());
    let (component, events_per_instance, concurrency) = (shape.component, shape.events_per_instance, shape.concurrency);
    let tuning = Tuning { max_events, concurrent, component, events_per_instance, concurrency };
    let config = config(&topic, &provider, &db_url, tuning, native, http, beside);
    if shape.audited {
        // The billing handler is the file's last: this table is its own.
        let mut text = std::fs::read_to_string(&config)?;
        text.push_str("\n[handler.audit]\nevery = \"1s\"\n");
        std::fs::write(&config, text)?;
    }
    let mut conn = fresh_database(&db, &config).await?;
    if shape.shadow {
        store_with_shadow(&mut conn, component).await?;
    }
    let records = workload(orders);
    if let Some((spec, events)) = &hostile {
        let events: Vec<(i32, Vec<u8>)> = events.iter().map(|e| (0, e.clone())).collect();
        kafka::produce_all(&kafka::producer(), &spec.topic, &events).await;
    }
    kafka::produce_all_keyed(&kafka::producer(), &topic, &records).await;

    let mut env = vec![("IDEM_LOG", "error")];
    if viewers {
        env.push(("IDEM_ADMIN_TOKEN", viewers::TOKEN));
    }
    if shape.one_worker {
        env.push(("IDEM_WORKER_THREADS", "1"));
    }
    let child = host::spawn(&config, true, &env);
    let watching = viewers.then(|| viewers::Viewers::start(&config));
    let cost = measure::watch(&child).await;
    let (status, reports) = tokio::task::spawn_blocking(move || host::wait_report(child)).await?;
    if let Some(watching) = watching {
        let (ok, failed) = watching.stop().await;
        eprintln!("bench:   {} viewers: {ok} page fetches answered, {failed} not", viewers::VIEWERS);
        if ok == 0 {
            bail!("{name}: no viewer fetched a page");
        }
    }
    if !status.success() {
        bail!("{name}: idem run failed: {status}");
    }
    if let Some(r) = reports.first() {
        // What shaped the drain: full batches are about records / max_events
        // transactions; pauses are the queue reaching its bound.
        eprintln!("bench:   {} transactions, {} pauses", r.transactions, r.pauses);
        if shape.audited {
            eprintln!("bench:   the ledger audit accounted for {} records", r.audit_checked);
            if r.audit_checked == 0 {
                bail!("{name}: the ledger audit swept nothing");
            }
        }
    }
    let span = check(&mut conn, &provider, orders, http).await?;
    let events_per_s = records.len() as f64 / span.max(1e-3);
    if shape.shadow {
        let (agree, differ, skipped): (i64, i64, i64) = sqlx::query_as(
            "SELECT coalesce(sum(agree), 0)::int8, coalesce(sum(differ), 0)::int8, coalesce(sum(skipped), 0)::int8 \
             FROM idem.shadow_tally",
        )
        .fetch_one(&mut conn)
        .await?;
        eprintln!("bench:   the shadow: {agree} agreed, {differ} differed, {skipped} skipped");
        if agree == 0 || differ > 0 {
            bail!("{name}: the shadow compared no event, or the same code differed ({differ})");
        }
    }

    // Latency: a paced stream at half that rate, on a running host.
    let rate = (events_per_s / 2.0).clamp(100.0, 20_000.0);
    let (p50, p99) = paced(&config, &topic, &mut conn, rate, orders).await?;
    admin_drop(&db).await;
    let drained = Row::drained(name, http, records.len(), span, cost.cpu_s, Some(cost.peak_rss_mib));
    Ok(Row { p50_ms: Some(p50), p99_ms: Some(p99), ..drained })
}

/// Stores `component` as billing's active version 1 and the same code
/// under another hash as its shadow version 2, as `idem deploy` and `idem
/// deploy --shadow` would have.
async fn store_with_shadow(conn: &mut PgConnection, component: &str) -> anyhow::Result<()> {
    let v1 = std::fs::read(idem_tests::guests::component(component))?;
    let v2 = idem_tests::guests::with_marker(&v1, "shadow");
    for (version, bytes, active) in [(1, v1, true), (2, v2, false)] {
        sqlx::query(
            "INSERT INTO idem.handler_module (handler, version, sha256, bytes, size, uploaded_by, active, shadow, \
             shadow_since) VALUES ('billing', $1, encode(sha256($2), 'hex'), $2, length($2), 'bench', $3, NOT $3, \
             CASE WHEN $3 THEN NULL ELSE now() END)",
        )
        .bind(version)
        .bind(&bytes)
        .bind(active)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Runs the host while producing `rate` orders per second for
/// [`PACED_FOR`]; returns its latency percentiles.
async fn paced(
    config: &Path,
    topic: &str,
    conn: &mut PgConnection,
    rate: f64,
    already: i64,
) -> anyhow::Result<(u64, u64)> {
    let child = host::spawn(config, false, &[("IDEM_LOG", "error")]);
    let driven = drive(topic, conn, rate, already).await;
    // Stopped whatever happened, so that no host outlives the benchmark.
    host::signal(&child, "TERM");
    let (_, reports) = tokio::task::spawn_blocking(move || host::wait_report(child)).await?;
    driven?;
    let r = reports.first().context("the paced run printed no report")?;
    Ok((r.latency_p50_ms, r.latency_p99_ms))
}

/// Produces the paced stream once the host consumes, and waits until it
/// is all charged.
async fn drive(topic: &str, conn: &mut PgConnection, rate: f64, already: i64) -> anyhow::Result<()> {
    let producer = kafka::producer();
    // Joined and consuming: a first order is charged.
    kafka::produce(&producer, topic, 0, "k", &order_payload(10_000_000).1).await;
    let charged = async |conn: &mut PgConnection| -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM billing.charge").fetch_one(conn).await.unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while charged(conn).await < already + 1 {
        if Instant::now() > deadline {
            bail!("the host did not start consuming within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let n = produce_paced(&producer, topic, rate, |_| "k".into()).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while charged(conn).await < already + 1 + n {
        if Instant::now() > deadline {
            bail!("the paced stream was not consumed within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Each paced order once, like the drain's.
    let (rows, distinct): (i64, i64) =
        sqlx::query_as("SELECT count(*), count(DISTINCT order_id) FROM billing.charge").fetch_one(&mut *conn).await?;
    if rows != already + 1 + n || distinct != rows {
        bail!(
            "wrong answer in the paced stream: {rows} charges for {distinct} distinct orders, {} expected",
            already + 1 + n
        );
    }
    Ok(())
}

/// Produces orders 10,000,001 on, `rate` a second for [`PACED_FOR`], on
/// the partitions in turn, each keyed by `key(order)`; returns how many.
async fn produce_paced(producer: &kafka::Producer, topic: &str, rate: f64, key: impl Fn(i64) -> String) -> i64 {
    let per_tick = (rate / 100.0).max(1.0) as i64;
    let ticks = (PACED_FOR.as_secs_f64() * 100.0) as i64;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut n = 0;
    for _ in 0..ticks {
        tick.tick().await;
        let sends = (0..per_tick).map(|i| {
            let order = 10_000_001 + n + i;
            let (key, payload) = (key(order), order_payload(order).1);
            async move { kafka::produce(producer, topic, (order % i64::from(PARTITIONS)) as i32, &key, &payload).await }
        });
        futures::future::join_all(sends).await;
        n += per_tick;
    }
    n
}

async fn ceiling_variant(name: &'static str, http: bool, orders: i64, concurrent: usize) -> anyhow::Result<Row> {
    let provider = PaymentProvider::start().await;
    let db = format!("idem_bench_{}", std::process::id());
    let server = idem_tests::db::server_url();
    let db_url = idem_tests::db::with_database(&server, &db);
    // Only for `idem migrate` (the billing role, schema and grants).
    let config = config("unused", &provider, &db_url, PLAIN, false, http, None);
    let mut conn = fresh_database(&db, &config).await?;
    // The claim checks the version it names against the active one.
    sqlx::query(
        "INSERT INTO idem.handler_module (handler, version, sha256, bytes, size, uploaded_by, active) \
         VALUES ('billing', 1, 'ceiling', '\\x00', 1, 'bench', true)",
    )
    .execute(&mut conn)
    .await?;
    let mut partitions = vec![Vec::new(); PARTITIONS as usize];
    let records = workload(orders);
    for (p, _, payload) in &records {
        partitions[*p as usize].push(payload.clone());
    }
    // As the billing handler's own role, like the host.
    let mut role_url = reqwest::Url::parse(&db_url)?;
    role_url.set_username(&format!("{db}_billing")).map_err(|()| anyhow::anyhow!("role in URL"))?;
    let pool: PgPool =
        sqlx::postgres::PgPoolOptions::new().max_connections(CONCURRENCY as u32).connect(role_url.as_str()).await?;
    let cpu = measure::own_cpu_s();
    let url = http.then(|| provider.base_url());
    ceiling::run(
        &pool,
        partitions,
        ceiling::Shape { partitions_at_once: CONCURRENCY, max_events: BATCH, concurrent },
        url,
    )
    .await?;
    let cpu_s = measure::own_cpu_s() - cpu;
    pool.close().await;
    let span = check(&mut conn, &provider, orders, http).await?;
    admin_drop(&db).await;
    Ok(Row::drained(name, http, records.len(), span, cpu_s, None))
}

async fn admin_drop(db: &str) {
    if let Ok(mut admin) = PgConnection::connect(&idem_tests::db::server_url()).await {
        let _ = admin.execute(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)").as_str()).await;
        let _ = admin.execute(format!("DROP ROLE IF EXISTS {db}_billing").as_str()).await;
        let _ = admin.execute(format!("DROP ROLE IF EXISTS {db}_scenario").as_str()).await;
        let _ = admin.execute(format!("DROP ROLE IF EXISTS {db}_payments").as_str()).await;
    }
}

/// The table and the ratios, in Markdown.
fn render(rows: &[Row]) -> String {
    let mut text = String::from(
        "| variant | HTTP | records | records/s | p50 ms | p99 ms | CPU s | CPU µs/event | peak RSS MiB |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    let opt = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
    for r in rows {
        text.push_str(&format!(
            "| {} | {} | {} | {:.0} | {} | {} | {:.1} | {:.0} | {} |\n",
            r.variant,
            if r.http { "yes" } else { "no" },
            r.records,
            r.events_per_s,
            opt(r.p50_ms),
            opt(r.p99_ms),
            r.cpu_s,
            r.cpu_us_per_event,
            r.peak_rss_mib.map_or("-".to_owned(), |m| format!("{m:.0}")),
        ));
    }
    for http in [false, true] {
        let shown = ratios(rows, http);
        if !shown.is_empty() {
            text.push_str(&format!("\n{}: {}", if http { "with HTTP" } else { "without HTTP" }, shown.join(", ")));
        }
    }
    text.push('\n');
    text
}

/// The ratios between the variants this run has (a run of some variants
/// shows only the ratios it measured), each with its goal.
fn ratios(rows: &[Row], http: bool) -> Vec<String> {
    let row = |prefix: &str| rows.iter().find(|r| r.http == http && r.variant.starts_with(prefix));
    let rate = |prefix: &str| row(prefix).map(|r| r.events_per_s);
    let mut shown = Vec::new();
    let mut ratio = |top: &str, bottom: &str, label: &str, digits: usize, what: String| {
        if let (Some(x), Some(y)) = (rate(top), rate(bottom)) {
            let note = if what.is_empty() { String::new() } else { format!(" ({what})") };
            shown.push(format!("{label} = {:.digits$}{note}", x / y));
        }
    };
    let (goal_http, no_http) = (if http { ", goal ≥ 0.8" } else { "" }, !http);
    ratio("a", "b", "a/b", 2, String::new());
    ratio("a", "c", "a/c", 2, String::new());
    ratio("a", "d", "a/d", 2, "goal ≥ 0.8".into());
    ratio("a", "s", "a/s", 1, "the seed's stack, goal ≥ 20 without HTTP".into());
    ratio("e", "a", "e/a", 2, "billing beside a hostile handler, goal ≥ 0.8".into());
    let h =
        format!("ordering = key, {AT_ONCE} events of a batch at once, against the ceiling doing the same{goal_http}");
    ratio("h", "i", "h/i", 2, h);
    ratio("v", "a", "v/a", 2, "10 console viewers refreshing every second, goal ≥ 0.95".into());
    let cpu = |prefix: &str| row(prefix).map_or("-".to_owned(), |r| format!("{:.0}", r.cpu_us_per_event));
    let kept = format!(
        "instances kept as billing declares, against a fresh one per event: {} against {} µs of the host's CPU per \
         event; goal for a ≤ 35 µs without HTTP",
        cpu("a"),
        cpu("n")
    );
    ratio("a", "n", "a/n", 2, kept);
    let one = format!("the host on one worker thread: {} µs of its CPU per event against {} for a", cpu("l"), cpu("a"));
    ratio("l", "d", "l/d", 2, one);
    if no_http {
        ratio("p", "s", "p/s", 1, "Python against the seed's stack, goal ≥ 2".into());
        ratio("t", "s", "t/s", 1, "TypeScript against the seed's stack, goal ≥ 2".into());
        ratio("p", "a", "p/a", 2, "goal ≥ 0.75".into());
        ratio("t", "a", "t/a", 2, "goal ≥ 0.75".into());
    } else {
        ratio("f", "a", "f/a", 2, "a provider resetting 1 charge in 25 after charging it, goal ≥ 0.5".into());
        let k = "a skewed stream in key lanes, goal ≥ 10".to_owned();
        ratio("k: skewed stream, ordering = key", "k: skewed stream, ordering = p", "k_key/k_partition", 1, k);
    }
    if no_http {
        let mib = |prefix: &str| row(prefix).and_then(|r| r.peak_rss_mib).map(|m| format!("{prefix} {m:.0} MiB"));
        let rss: Vec<String> = ["p", "t"].into_iter().filter_map(mib).collect();
        if !rss.is_empty() {
            shown.push(format!("peak RSS {} (goal ≤ 256 MiB)", rss.join(", ")));
        }
    }
    shown
}
