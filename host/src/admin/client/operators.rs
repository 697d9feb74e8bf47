//! `idem token` and `idem audit`: named operators and the audit trail,
//! through the admin API (`admin::operators`, `admin::audit`).

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::{Target, client};

/// Issues a token for `name` of `scope` (`read` or `operate`).
pub async fn create(target: &Target, name: &str, scope: &str) -> anyhow::Result<Value> {
    let request = client()?.post(target.url("/operators")).json(&json!({ "name": name, "scope": scope }));
    target.send(request).await
}

pub async fn list(target: &Target) -> anyhow::Result<Value> {
    target.send(client()?.get(target.url("/operators"))).await
}

pub async fn revoke(target: &Target, name: &str) -> anyhow::Result<Value> {
    let url = target.url(&format!("/operators/{}", urlencoding(name)));
    target.send(client()?.delete(url)).await
}

/// The trail, newest first, narrowed by `filters` (the API's parameters).
pub async fn audit(target: &Target, filters: &[(&str, String)]) -> anyhow::Result<Value> {
    target.send(client()?.get(target.url("/audit")).query(filters)).await
}

/// `idem token create` for people: the token once, and what to do with it.
pub fn render_created(created: &Value) -> String {
    format!(
        "idem: issued a token of scope {} for {}; it is shown this once (idem keeps only its hash):\n{}\n",
        created["scope"].as_str().unwrap_or("?"),
        created["name"].as_str().unwrap_or("?"),
        created["token"].as_str().unwrap_or("")
    )
}

/// `idem token list` for people.
pub fn render_list(listing: &Value) -> String {
    let mut out = String::new();
    for o in listing["operators"].as_array().into_iter().flatten() {
        let revoked = match o["revoked_at"].as_str() {
            Some(at) => format!("  REVOKED {at} by {}", o["revoked_by"].as_str().unwrap_or("?")),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "{:<24} {:<8} issued {} by {}{revoked}",
            o["name"].as_str().unwrap_or("?"),
            o["scope"].as_str().unwrap_or("?"),
            o["created_at"].as_str().unwrap_or("?"),
            o["created_by"].as_str().unwrap_or("?"),
        );
    }
    if out.is_empty() {
        out.push_str("no named operators yet: `idem token create NAME --scope read|operate`\n");
    }
    out
}

/// `idem audit` for people: a line per change, newest first.
pub fn render_audit(trail: &Value) -> String {
    let mut out = String::new();
    for e in trail["entries"].as_array().into_iter().flatten() {
        let detail = match &e["detail"] {
            Value::Null => String::new(),
            d => format!("  {d}"),
        };
        let _ = writeln!(
            out,
            "{}  {:<20} {:<7} {}  {}  via {} on {}{detail}",
            e["at"].as_str().unwrap_or("?"),
            crate::text::shown(e["actor"].as_str().unwrap_or("?"), 20),
            e["scope"].as_str().unwrap_or("?"),
            crate::text::shown(e["action"].as_str().unwrap_or("?"), 200),
            e["status"],
            e["via"].as_str().unwrap_or("?"),
            e["host"].as_str().unwrap_or("?"),
        );
    }
    if let Some(next) = trail["next"].as_i64() {
        let _ = writeln!(out, "more: --before {next}");
    }
    if out.is_empty() {
        out.push_str("no changes recorded\n");
    }
    out
}

/// `name` as one path segment.
fn urlencoding(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
