//! `idem status`'s shadow lines: each handler's shadow version and its
//! report (`GET /handlers/{name}/shadow`), when it has one.

use std::fmt::Write as _;

use serde_json::Value;

/// The first differing events shown.
const SHOWN: usize = 3;

/// The shadow lines of `handlers` (nothing for one without a shadow, or
/// when the host cannot say).
pub(super) async fn lines(client: &reqwest::Client, url: &str, token: Option<&str>, handlers: &[String]) -> String {
    let mut out = String::new();
    for (handler, answer) in each(client, url, token, handlers, "shadow").await {
        if !answer["shadow"].is_null() {
            out.push_str(&render(&handler, &answer["shadow"]));
        }
    }
    out
}

/// `GET /handlers/{name}/{what}` of each of `handlers`, those answered.
pub(super) async fn each(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    handlers: &[String],
    what: &str,
) -> Vec<(String, Value)> {
    let mut answers = Vec::new();
    for handler in handlers {
        let mut request = client.get(format!("{}/handlers/{handler}/{what}", url.trim_end_matches('/')));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Ok(r) = request.send().await
            && r.status().is_success()
            && let Ok(answer) = r.json::<Value>().await
        {
            answers.push((handler.clone(), answer));
        }
    }
    answers
}

/// One handler's shadow report as lines.
pub(super) fn render(handler: &str, report: &Value) -> String {
    let n = |v: &Value, k: &str| v[k].as_i64().unwrap_or(0);
    let total = &report["total"];
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nshadow of {handler}: version {} since {}: {} agree, {} differ, {} skipped (idem deploy --activate-shadow \
         | --stop-shadow)",
        n(report, "version"),
        report["since"].as_str().unwrap_or("-"),
        n(total, "agree"),
        n(total, "differ"),
        n(total, "skipped"),
    );
    for t in report["types"].as_array().into_iter().flatten() {
        let kind = t["event_type"].as_str().unwrap_or("");
        let (agree, differ, skipped) = (n(t, "agree"), n(t, "differ"), n(t, "skipped"));
        let _ = writeln!(out, "  {kind:<30} {agree:>8} agree {differ:>8} differ {skipped:>8} skipped");
    }
    for d in report["differences"].as_array().into_iter().flatten().take(SHOWN) {
        let fields: Vec<&str> = d["differs"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let _ = writeln!(
            out,
            "  differs in {}: event {} ({}/{}@{})",
            fields.join(", "),
            d["event_id"].as_str().unwrap_or(""),
            d["topic"].as_str().unwrap_or(""),
            n(d, "partition"),
            n(d, "offset"),
        );
        for field in fields.iter().filter(|f| **f != "outcome") {
            let _ = writeln!(out, "    active {field}: {}", d["active"][field]);
            let _ = writeln!(out, "    shadow {field}: {}", d["shadow"][field]);
        }
        if fields.contains(&"outcome") {
            let _ = writeln!(out, "    active: {}   shadow: {}", d["active"]["outcome"], d["shadow"]["outcome"]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_names_the_counts_and_what_differs_with_both_sides() {
        let report = serde_json::json!({
            "version": 3, "since": "2026-12-06T10:00:00Z",
            "total": {"agree": 2, "differ": 1, "skipped": 4},
            "types": [{"event_type": "order.confirmed.v1", "agree": 2, "differ": 1, "skipped": 4}],
            "differences": [{"event_id": "e1", "topic": "orders", "partition": 0, "offset": 7,
                "differs": ["requests"], "active": {"outcome": "ok", "requests": ["POST a body=1"]},
                "shadow": {"outcome": "ok", "requests": ["POST a body=2"]}}],
        });
        let text = render("billing", &report);
        assert!(text.contains("shadow of billing: version 3 since 2026-12-06T10:00:00Z: 2 agree, 1 differ, 4 skipped"));
        assert!(text.contains("order.confirmed.v1"));
        assert!(text.contains("differs in requests: event e1 (orders/0@7)"));
        assert!(text.contains("active requests: [\"POST a body=1\"]"));
        assert!(text.contains("shadow requests: [\"POST a body=2\"]"));
    }
}
