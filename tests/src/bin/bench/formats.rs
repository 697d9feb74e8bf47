//! Variants r and q: a (the batched Rust billing component) on Avro and
//! on Protobuf records framed for a schema registry (docs/formats.md),
//! the same orders as a's JSON, the registry scripts/bench starts
//! (`IDEM_TEST_REGISTRY`). The report compares each with a: records/s
//! (goal ≥ 0.9 of a) and host CPU per record (decoding's share: goal ≤ 10 µs).

use std::path::PathBuf;

use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;
use idem_tests::provider::PaymentProvider;

use super::{BATCH, CONCURRENCY, PARTITIONS, Row};

/// A drained by the host on `format`'s records.
pub async fn variant(name: &'static str, format: &str, http: bool, orders: i64) -> anyhow::Result<Row> {
    let provider = PaymentProvider::start().await;
    let topic = kafka::create_topic(PARTITIONS).await;
    let base = idem_tests::registry::url();
    let (reader, framer) = idem_tests::registry::order_format(&base, format, &format!("{topic}-value")).await;
    let db = format!("idem_bench_{}", std::process::id());
    let db_url = idem_tests::db::with_database(&idem_tests::db::server_url(), &db);
    let mut spec = HandlerSpec::billing(&topic, &provider.base_url());
    spec.schema = reader;
    spec.extra.push_str(&format!("format = \"{format}\"\n"));
    spec.batch = Some((BATCH, 5));
    spec.concurrency = CONCURRENCY;
    let config = super::config_of(&[spec], &db_url, false, http);
    let mut text = std::fs::read_to_string(&config)?;
    text.push_str(&format!("\n[registry]\nurl = \"{base}\"\n"));
    std::fs::write(&config, text)?;
    let mut conn = super::fresh_database(&db, &config).await?;
    let records: Vec<(i32, String, Vec<u8>)> = super::workload(orders)
        .into_iter()
        .map(|(partition, key, json)| {
            let value: serde_json::Value = serde_json::from_slice(&json).unwrap_or_default();
            (partition, key, framer(&value))
        })
        .collect();
    kafka::produce_all_keyed(&kafka::producer(), &topic, &records).await;
    let child = host::spawn(&config, true, &[("IDEM_LOG", "error")]);
    let cost = super::measure::watch(&child).await;
    let (status, _) = tokio::task::spawn_blocking(move || host::wait_report(child)).await?;
    if !status.success() {
        anyhow::bail!("{name}: idem run failed: {status}");
    }
    let span = super::check(&mut conn, &provider, orders, http).await?;
    super::admin_drop(&db).await;
    Ok(Row::drained(name, http, records.len(), span, cost.cpu_s, Some(cost.peak_rss_mib)))
}

/// r and q against a, with and without HTTP: records/s as a ratio, and
/// the host's CPU per record beyond a's.
pub fn render(rows: &[Row]) -> String {
    let mut out = String::new();
    for http in [false, true] {
        let find = |letter: char| rows.iter().find(|r| r.http == http && r.variant.starts_with(letter));
        let Some(a) = find('a') else { continue };
        for letter in ['r', 'q'] {
            let Some(v) = find(letter) else { continue };
            let extra_us = v.cpu_us_per_event - a.cpu_us_per_event;
            out.push_str(&format!(
                "{letter}{}: {letter}/a = {:.2} (goal ≥ 0.9); host CPU {:.1} µs per record beyond a's (goal ≤ 10)\n",
                if http { " (HTTP)" } else { "" },
                v.events_per_s / a.events_per_s,
                extra_us
            ));
        }
    }
    out
}

/// The host's validation of one order record, per format, measured in
/// this process: JSON as a's, Avro and Protobuf with their writer schema
/// fetched once (the cache's hit, as in a steady stream). What decoding
/// adds per record is the difference.
pub async fn decode_costs() -> anyhow::Result<String> {
    const ROUNDS: u32 = 20_000;
    let base = idem_tests::registry::url();
    let topic = idem_tests::unique_name("decode");
    let registry: idem::config::RegistryConfig = serde_json::from_value(serde_json::json!({ "url": base }))?;
    let registry = std::sync::Arc::new(idem::formats::Registry::new(&registry)?);
    let (_, json) = idem_tests::host::order_payload(7);
    let value: serde_json::Value = serde_json::from_slice(&json)?;
    let mut out = String::from("decoding, host CPU per record (validation included):");
    let mut json_us = f64::NAN;
    for format in ["json", "avro", "protobuf"] {
        let mut h = idem::config::HandlerConfig::named("billing".into());
        h.event_types = vec!["order.confirmed.v1".into()];
        let payload = if format == "json" {
            h.schema = PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../examples/billing/order-confirmed.v1.schema.json"
            ));
            json.clone()
        } else {
            let (reader, framer) =
                idem_tests::registry::order_format(&base, format, &format!("{topic}-{format}-value")).await;
            h.schema = reader;
            h.format = if format == "avro" { idem::config::Format::Avro } else { idem::config::Format::Protobuf };
            framer(&value)
        };
        let validator = idem::validate::Validator::for_handler(&h, Some(&registry))?;
        let record = idem::validate::Record {
            topic: topic.clone(),
            partition: 0,
            offset: 0,
            key: None,
            payload: Some(payload),
            headers: vec![],
            timestamp: None,
        };
        validator.check(&record).await?.map_err(|e| anyhow::anyhow!("{format}: {e}"))?;
        let started = std::time::Instant::now();
        for _ in 0..ROUNDS {
            std::hint::black_box(validator.validate(std::hint::black_box(&record)).is_ok());
        }
        let us = started.elapsed().as_secs_f64() * 1e6 / f64::from(ROUNDS);
        if format == "json" {
            json_us = us;
            out.push_str(&format!(" json {us:.1} µs;"));
        } else {
            out.push_str(&format!(" {format} {us:.1} µs ({:+.1} µs beside JSON, goal ≤ 10);", us - json_us));
        }
    }
    out.pop();
    out.push('\n');
    Ok(out)
}
