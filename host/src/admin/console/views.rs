//! The live pages' JSON, rendered once per sample from the histories (see
//! `history`): the overview, each handler's own page, and its charts.

use std::collections::HashMap;

use axum::body::Bytes;
use serde_json::{Value, json};

use super::history::{History, Sample};
use super::series::Range;
use crate::telemetry::HandlerTelemetry;

/// Samples a rate is taken over (seconds, at one sample a second).
const RATE_OVER: usize = 5;
/// Samples latency percentiles are taken over.
const LATENCY_OVER: usize = 10;

/// What a viewer's request is answered with, until the next sample.
#[derive(Debug, Default, Clone)]
pub(super) struct Rendered {
    pub overview: Bytes,
    pub handlers: HashMap<String, Bytes>,
    /// Each handler's charts, one per `series::Range::ALL`.
    pub charts: HashMap<String, Vec<Bytes>>,
}

pub(super) fn render(histories: &[(std::sync::Arc<HandlerTelemetry>, History)]) -> Rendered {
    let summaries: Vec<Value> = histories.iter().map(|(h, history)| summary(h, history)).collect();
    let at = chrono::Utc::now().to_rfc3339();
    let overview = json!({ "at": at, "handlers": summaries });
    let handlers = histories
        .iter()
        .zip(&summaries)
        .map(|((h, _), summary)| {
            let page = json!({ "at": at, "summary": summary, "detail": detail(h) });
            (h.name.clone(), Bytes::from(page.to_string()))
        })
        .collect();
    let charts = histories
        .iter()
        .map(|(h, history)| {
            let charts = Range::ALL.iter().map(|r| chart_bytes(&history.series.chart(*r))).collect();
            (h.name.clone(), charts)
        })
        .collect();
    Rendered { overview: Bytes::from(overview.to_string()), handlers, charts }
}

fn chart_bytes(chart: &super::series::Chart) -> Bytes {
    Bytes::from(serde_json::to_vec(chart).unwrap_or_default())
}

/// A handler as the overview shows it.
fn summary(h: &HandlerTelemetry, history: &History) -> Value {
    let latest = history.samples.back();
    let rate = |f: fn(&super::history::Counts) -> u64| round(history.rate(RATE_OVER, f));
    let bounds = h.stats.latency.bounds();
    let sparks = lag_histories(history);
    let partitions: Vec<Value> = latest
        .map(|s| {
            s.partitions
                .iter()
                .map(|p| {
                    json!({
                        "topic": p.topic, "partition": p.partition, "assigned": p.assigned, "paused": p.paused, "held": p.held,
                        "position": p.position, "end": (p.high_watermark >= 0).then_some(p.high_watermark),
                        "lag": Sample::lag(p), "queued": p.queued,
                        "lag_history": sparks.get(&(p.topic.as_str(), p.partition)),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let mut failures: serde_json::Map<String, Value> =
        h.stats.failures().into_iter().map(|(class, n)| (class.as_str().to_owned(), json!(n))).collect();
    // Invalid records are counted apart (they never ran): a final failure
    // all the same, and dead-lettered like the others.
    let invalid = h.stats.invalid.load(std::sync::atomic::Ordering::Relaxed);
    let counted = failures.get("invalid").and_then(Value::as_u64).unwrap_or(0);
    failures.insert("invalid".into(), json!(counted + invalid));
    json!({
        "name": h.name,
        "version": h.slot.version(),
        "ready": latest.is_some_and(|s| s.joined),
        "rates": {
            "processed": rate(|c| c.processed), "duplicates": rate(|c| c.duplicates),
            "skipped": rate(|c| c.skipped), "failed": rate(|c| c.failed),
            "dead_lettered": rate(|c| c.dead_lettered), "retries": rate(|c| c.retries),
        },
        "totals": latest.map(|s| json!({
            "processed": s.counts.processed, "duplicates": s.counts.duplicates, "failed": s.counts.failed,
            "dead_lettered": s.counts.dead_lettered,
        })),
        "lag": latest.map(Sample::total_lag),
        "lag_history": history.samples.iter().map(Sample::total_lag).collect::<Vec<_>>(),
        "processed_history": rates(history),
        "failures": failures,
        "latency_ms": {
            "p50": history.latency_ms(LATENCY_OVER, 0.50, bounds),
            "p99": history.latency_ms(LATENCY_OVER, 0.99, bounds),
        },
        "partitions": partitions,
        "audit": h.audit(),
    })
}

/// Each partition's lag at every sample (`None` where it was not known),
/// in one pass over the samples.
fn lag_histories(history: &History) -> HashMap<(&str, i32), Vec<Option<i64>>> {
    let n = history.samples.len();
    let mut sparks: HashMap<(&str, i32), Vec<Option<i64>>> = HashMap::new();
    for (i, sample) in history.samples.iter().enumerate() {
        for p in &sample.partitions {
            sparks.entry((p.topic.as_str(), p.partition)).or_insert_with(|| vec![None; n])[i] = Sample::lag(p);
        }
    }
    sparks
}

/// Records processed per second between consecutive samples.
fn rates(history: &History) -> Vec<f64> {
    let s = &history.samples;
    s.iter()
        .zip(s.iter().skip(1))
        .map(|(a, b)| {
            let seconds = (b.at_ms - a.at_ms) as f64 / 1e3;
            if seconds <= 0.0 {
                0.0
            } else {
                round(b.counts.processed.saturating_sub(a.counts.processed) as f64 / seconds)
            }
        })
        .collect()
}

fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// What only a handler's own page shows.
fn detail(h: &HandlerTelemetry) -> Value {
    let (buckets, count, sum) = h.stats.batch_size.snapshot();
    let mut previous = 0;
    let batches: Vec<Value> = buckets
        .into_iter()
        .map(|(le, cumulative)| {
            let n = cumulative - previous;
            previous = cumulative;
            json!({ "up_to": le, "transactions": n })
        })
        .collect();
    let http: Vec<Value> = h
        .stats
        .http_requests()
        .into_iter()
        .map(|((host, class), n)| json!({ "host": crate::text::shown(&host, 200), "status": class, "requests": n }))
        .collect();
    let retries: Vec<Value> = h
        .stats
        .http_retries()
        .into_iter()
        .map(|((host, reason), n)| json!({ "host": crate::text::shown(&host, 200), "reason": reason, "retries": n }))
        .collect();
    let versions: Vec<Value> = h
        .slot
        .counts()
        .into_iter()
        .rev()
        .map(|(v, c)| json!({ "version": v, "processed": c.processed, "duplicates": c.duplicates, "failed": c.failed }))
        .collect();
    json!({
        "recent_failures": h.stats.recent_failures(),
        "batches": { "histogram": batches, "transactions": count, "mean": if count > 0 { round(sum / count as f64) } else { 0.0 } },
        "http": http,
        "http_retries": retries,
        "versions": versions,
    })
}
