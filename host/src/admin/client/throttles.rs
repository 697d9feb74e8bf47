//! `idem throttle`: a handler's rates, or an operator's change of one,
//! through the admin API (`admin::throttles`).

use std::fmt::Write as _;

use serde_json::Value;

use super::{Target, client};

/// The handler's rates on the host asked, and the operators' changes.
pub async fn list(target: &Target, handler: &str) -> anyhow::Result<Value> {
    target.send(client()?.get(target.url(&format!("/handlers/{handler}/throttles")))).await
}

/// `POST /handlers/{handler}/throttle` with `body` (the API's request).
pub async fn change(target: &Target, handler: &str, body: &Value) -> anyhow::Result<Value> {
    target.send(client()?.post(target.url(&format!("/handlers/{handler}/throttle"))).json(body)).await
}

fn rate(rate: &Value) -> String {
    if rate.is_null() {
        return "no limit".into();
    }
    format!("{}/s (burst {})", rate["per_second"], rate["burst"])
}

/// The rates for people: one line per target.
pub fn render_list(listed: &Value) -> String {
    let mut out = String::new();
    let rows = listed["throttles"].as_array().map(Vec::as_slice).unwrap_or_default();
    if rows.is_empty() {
        return "idem: no rate set: events and requests are not throttled\n".into();
    }
    let _ = writeln!(out, "{:<32}  {:<24}  {:<24}  {:>10}", "target", "in force", "configured", "waited (s)");
    for t in rows {
        let changed = if t["changed"].as_bool() == Some(true) { " (changed)" } else { "" };
        let _ = writeln!(
            out,
            "{:<32}  {:<24}  {:<24}  {:>10.1}",
            t["target"].as_str().unwrap_or(""),
            format!("{}{changed}", rate(&t["in_force"])),
            rate(&t["configured"]),
            t["waited_seconds"].as_f64().unwrap_or(0.0)
        );
    }
    for c in listed["changes"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "changed: {} by {} at {}: {}",
            c["target"].as_str().unwrap_or(""),
            c["set_by"].as_str().unwrap_or(""),
            c["set_at"].as_str().unwrap_or(""),
            c["reason"].as_str().unwrap_or("")
        );
    }
    out
}
