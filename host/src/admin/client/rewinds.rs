//! `idem rewind`: a handler's group sent back (or only counted, a dry
//! run), its rewinds listed, one's report — through the admin API
//! (`admin::rewinds`).

use std::fmt::Write as _;

use serde_json::Value;

use super::{Target, client};

/// `POST /handlers/{handler}/rewind` with `body` (the API's request).
pub async fn rewind(target: &Target, handler: &str, body: &Value) -> anyhow::Result<Value> {
    target.send(client()?.post(target.url(&format!("/handlers/{handler}/rewind"))).json(body)).await
}

/// The handler's rewinds, newest first.
pub async fn list(target: &Target, handler: &str) -> anyhow::Result<Value> {
    target.send(client()?.get(target.url(&format!("/handlers/{handler}/rewinds")))).await
}

/// Rewind `id` of the handler and its report.
pub async fn report(target: &Target, handler: &str, id: i64) -> anyhow::Result<Value> {
    target.send(client()?.get(target.url(&format!("/handlers/{handler}/rewinds/{id}")))).await
}

/// Per partition, a window's counts as the API gives them (`partitions`
/// of a rewind or its dry run, `report` of a report).
fn render_counts(counts: &Value, report: bool) -> String {
    let mut out = String::new();
    let (before, since) = if report { ("duplicates", "applied anew") } else { ("applied already", "") };
    let _ = write!(out, "{:>9}  {:>21}  {:>8}  {before:>15}", "partition", "window", "records");
    if report {
        let _ = write!(out, "  {since:>12}");
    }
    let _ = writeln!(
        out,
        "  {:>11}  {:>14}  {:>7}",
        if report { "not applied" } else { "to run" },
        "past retention",
        "invalid"
    );
    for c in counts.as_array().into_iter().flatten() {
        let n = |k: &str| c[k].as_u64().unwrap_or(0);
        let window = format!("{}..{}", c["to"].as_i64().unwrap_or(0), c["end"].as_i64().unwrap_or(0));
        let _ = write!(out, "{:>9}  {window:>21}  {:>8}  {:>15}", c["partition"], n("records"), n("applied_before"));
        if report {
            let _ = write!(out, "  {:>12}", n("applied_since"));
        }
        let capped = if c["capped"].as_bool() == Some(true) { "  (counted up to the cap: at least)" } else { "" };
        let _ = writeln!(out, "  {:>11}  {:>14}  {:>7}{capped}", n("not_applied"), n("past_retention"), n("invalid"));
    }
    out
}

/// A rewind's answer (or its dry run's) for people.
pub fn render_asked(answer: &Value) -> String {
    format!("{}idem: {}\n", render_counts(&answer["partitions"], false), answer["message"].as_str().unwrap_or(""))
}

/// A report for people.
pub fn render_report(answer: &Value) -> String {
    let r = &answer["rewind"];
    let mut out = format!(
        "rewind {} of {} to {}, asked by {} at {}{}\n",
        r["id"],
        r["handler"].as_str().unwrap_or("?"),
        r["target"].as_str().unwrap_or("?"),
        r["requested_by"].as_str().unwrap_or("?"),
        r["requested_at"].as_str().unwrap_or("?"),
        if r["forced"].as_bool() == Some(true) { " (forced past the dedup retention)" } else { "" },
    );
    out.push_str(&render_counts(&answer["report"], true));
    let _ = writeln!(out, "idem: {}", answer["message"].as_str().unwrap_or(""));
    out
}

/// The handler's rewinds for people, newest first.
pub fn render_list(answer: &Value) -> String {
    let mut out = String::new();
    for r in answer["rewinds"].as_array().into_iter().flatten() {
        let parts = r["partitions"].as_array().map_or(&[][..], Vec::as_slice);
        let applied = parts.iter().filter(|p| !p["applied_at"].is_null()).count();
        let _ = writeln!(
            out,
            "{:>5}  {}  to {}  by {}  {applied}/{} partition(s) rewound{}",
            r["id"],
            r["requested_at"].as_str().unwrap_or("?"),
            r["target"].as_str().unwrap_or("?"),
            r["requested_by"].as_str().unwrap_or("?"),
            parts.len(),
            r["reason"].as_str().filter(|s| !s.is_empty()).map(|s| format!("  ({s})")).unwrap_or_default(),
        );
    }
    if out.is_empty() {
        out.push_str("idem: no rewinds\n");
    }
    out
}
