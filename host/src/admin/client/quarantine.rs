//! `idem quarantine`: a handler's parked keys, or one released or
//! dead-lettered, through the admin API (`admin::quarantine`).

use std::fmt::Write as _;

use serde_json::Value;

use super::{Target, client};

/// The handler's parked keys, oldest first (at most `limit`).
pub async fn list(target: &Target, handler: &str, limit: u32) -> anyhow::Result<Value> {
    let url = target.url(&format!("/handlers/{handler}/quarantine"));
    target.send(client()?.get(url).query(&[("limit", limit)])).await
}

/// `POST /handlers/{handler}/quarantine/{action}` (`release` or
/// `dead-letter`) with `body` (the API's request).
pub async fn act(target: &Target, handler: &str, action: &str, body: &Value) -> anyhow::Result<Value> {
    target.send(client()?.post(target.url(&format!("/handlers/{handler}/quarantine/{action}"))).json(body)).await
}

/// The listing for people: one line per key, then its first failure.
pub fn render_list(listed: &Value) -> String {
    let mut out = String::new();
    let totals = &listed["totals"];
    if listed["quarantines"].as_bool() == Some(false) {
        out.push_str("idem: this handler does not quarantine ([handler.failure] on_exhausted = \"dlq\")\n");
    }
    let keys = listed["keys"].as_array().map(Vec::as_slice).unwrap_or_default();
    if keys.is_empty() {
        out.push_str("idem: no key parked\n");
        return out;
    }
    let _ = writeln!(out, "{:<24}  {:>9}  {:<8}  {:>6}  {:<20}", "key", "partition", "state", "events", "parked at");
    for k in keys {
        let s = |f: &str| k[f].as_str().unwrap_or("").to_owned();
        let key: String = s("key").chars().flat_map(char::escape_default).take(24).collect();
        let _ = writeln!(
            out,
            "{key:<24}  {:>9}  {:<8}  {:>6}  {:<20}\n    first failure: {}",
            k["partition"],
            s("state"),
            k["events"],
            s("parked_at"),
            s("first_failure").chars().take(200).collect::<String>()
        );
    }
    let _ = writeln!(out, "idem: {} key(s), {} event(s) parked", totals["keys"], totals["events"]);
    out
}
