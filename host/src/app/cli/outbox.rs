//! `idem outbox`: the transactional outbox per producer (pending, oldest,
//! published, failed, the relay's holder), its failed rows, and a redrive —
//! through a running host's admin API (`--url`, as every operator command),
//! or with `--config` from the database itself, for when no host runs.

use serde_json::{Value, json};

use super::actions::config_and_pool;
use crate::admin::client;
use crate::output::outln;

/// What `idem outbox` was asked.
pub(super) struct OutboxQuery {
    pub(super) producer: Option<String>,
    pub(super) failed: bool,
    pub(super) redrive: bool,
    pub(super) ids: Vec<i64>,
    pub(super) json: bool,
}

/// Failed rows listed at most.
const FAILED_LISTED: i64 = 100;

/// Through the host at `target`.
pub(super) async fn via_host(target: &client::Target, q: OutboxQuery) -> anyhow::Result<()> {
    let redriven = if q.redrive {
        let body = match q.ids.is_empty() {
            true => json!({ "producer": q.producer, "all": true }),
            false => json!({ "producer": q.producer, "ids": q.ids }),
        };
        Some(client::redrive_outbox(target, &body).await?["redriven"].as_u64().unwrap_or(0))
    } else {
        None
    };
    let mut answer = client::outbox(target, q.producer.as_deref()).await?;
    if !q.failed {
        answer["failed"] = json!([]);
    }
    answer["redriven"] = json!(redriven);
    print(&answer, q.json)
}

/// From the database of the config at `path`.
pub(super) async fn from_database(path: &std::path::Path, q: OutboxQuery) -> anyhow::Result<()> {
    let (config, pool) = config_and_pool(path).await?;
    let producer = q.producer.as_deref();
    let redriven = if q.redrive { Some(crate::outbox::store::redrive(&pool, producer, &q.ids).await?) } else { None };
    let mut summary = crate::outbox::store::summary(&pool, &crate::outbox::producers(&config)).await?;
    summary.retain(|s| producer.is_none_or(|p| p == s.producer));
    let failed =
        if q.failed { crate::outbox::store::failed(&pool, producer, FAILED_LISTED).await? } else { Vec::new() };
    print(&json!({ "producers": summary, "failed": failed, "redriven": redriven }), q.json)
}

/// The answer as one JSON line, or for people.
fn print(answer: &Value, as_json: bool) -> anyhow::Result<()> {
    if as_json {
        outln!("{answer}")?;
        return Ok(());
    }
    if let Some(n) = answer["redriven"].as_u64() {
        outln!("idem: outbox: {n} failed row(s) made pending again")?;
    }
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    for s in answer["producers"].as_array().into_iter().flatten() {
        let oldest = s["oldest_pending_s"].as_f64().map_or(String::new(), |a| format!(" (oldest {a:.1} s)"));
        let holder = s["holder"].as_str().unwrap_or("no relay");
        outln!(
            "{}: {} pending{oldest}, {} published, {} failed; relay: {holder}",
            text(&s["producer"]),
            s["pending"],
            s["published"],
            s["failed"]
        )?;
    }
    for f in answer["failed"].as_array().into_iter().flatten() {
        let reason = crate::text::shown(f["failure"].as_str().unwrap_or(""), 500);
        outln!(
            "  failed #{} {} key {} event {} at {}: {reason}",
            f["id"],
            crate::text::shown(&text(&f["topic"]), 200),
            crate::text::shown(&text(&f["key"]), 100),
            text(&f["event_id"]),
            text(&f["failed_at"])
        )?;
    }
    Ok(())
}
