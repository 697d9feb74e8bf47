//! `idem status`: a running host's `/metrics`, per handler and partition,
//! refreshed in place on a terminal (`--once`: one frame).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::output::out;

/// One sample of the exposition.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// The samples of a text exposition (format 0.0.4); comments skipped.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).filter_map(sample).collect()
}

fn sample(line: &str) -> Option<Sample> {
    let (head, value) = line.rsplit_once(' ')?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    let (name, labels) = match head.split_once('{') {
        Some((name, rest)) => (name, labels(rest.strip_suffix('}')?)?),
        None => (head, BTreeMap::new()),
    };
    Some(Sample { name: name.to_owned(), labels, value })
}

fn labels(mut rest: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break i,
                c => value.push(c),
            }
        };
        out.insert(key.trim_start_matches(',').to_owned(), value);
        rest = after.get(end + 1..)?.trim_start_matches(',');
    }
    Some(out)
}

/// Reads `url`'s `/metrics`.
pub async fn scrape(client: &reqwest::Client, url: &str, token: Option<&str>) -> anyhow::Result<Vec<Sample>> {
    let target = format!("{}/metrics", url.trim_end_matches('/'));
    let mut request = client.get(&target);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.map_err(|e| super::ApiError::unreachable(url, &e))?;
    let status = response.status();
    let body = response.text().await.with_context(|| format!("failed to read {target}"))?;
    if !status.is_success() {
        let message = crate::text::controls_escaped(body.trim(), 500);
        return Err(super::ApiError::Refused { url: target, status: status.as_u16(), message }.into());
    }
    Ok(parse(&body))
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
        .map(|s| s.value)
}

/// Records resolved per handler (every outcome).
fn resolved(samples: &[Sample]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for s in samples.iter().filter(|s| s.name == "idem_records_total") {
        if let Some(h) = s.labels.get("handler") {
            *out.entry(h.clone()).or_default() += s.value;
        }
    }
    out
}

/// One frame: per handler its module, rate since `before` (taken `elapsed`
/// earlier), outcomes; per partition its lag, position, state.
pub fn frame(url: &str, now: &[Sample], before: Option<(&[Sample], Duration)>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "idem status  {url}  {}", chrono::Utc::now().format("%Y-%m-%d %H:%M:%S UTC"));
    let (totals, earlier) = (resolved(now), before.map(|(b, d)| (resolved(b), d)));
    let _ = writeln!(
        out,
        "\n{:<20} {:>7} {:>9} {:>10} {:>10} {:>8} {:>8} {:>7} {:>6}",
        "handler", "module", "rate/s", "processed", "duplicate", "invalid", "skipped", "failed", "dlq"
    );
    for (handler, total) in &totals {
        let h = handler.as_str();
        let rate = earlier.as_ref().and_then(|(b, d)| {
            let then = b.get(handler).copied().unwrap_or(0.0);
            (d.as_secs_f64() > 0.0).then(|| (total - then) / d.as_secs_f64())
        });
        let outcome = |o: &str| value(now, "idem_records_total", &[("handler", h), ("outcome", o)]).unwrap_or(0.0);
        let module = match value(now, "idem_module_version", &[("handler", h)]) {
            Some(v) if v > 0.0 => format!("v{v}"),
            _ => "native".to_owned(),
        };
        let _ = writeln!(
            out,
            "{:<20} {:>7} {:>9} {:>10} {:>10} {:>8} {:>8} {:>7} {:>6}",
            h,
            module,
            rate.map_or_else(|| "-".to_owned(), |r| format!("{r:.1}")),
            outcome("processed"),
            outcome("duplicate"),
            outcome("invalid"),
            outcome("skipped"),
            outcome("failed"),
            value(now, "idem_dead_lettered_total", &[("handler", h)]).unwrap_or(0.0),
        );
        let _ = writeln!(out, "  {}", audit_line(now, h));
        let mut partitions: Vec<&Sample> = now
            .iter()
            .filter(|s| s.name == "idem_partition_assigned" && s.labels.get("handler") == Some(handler))
            .collect();
        partitions.sort_by_key(|s| {
            (s.labels.get("topic").cloned(), s.labels.get("partition").and_then(|p| p.parse::<i32>().ok()))
        });
        for p in partitions {
            let (topic, partition) = (p.labels["topic"].as_str(), p.labels["partition"].as_str());
            let at = [("handler", h), ("topic", topic), ("partition", partition)];
            let lag = value(now, "idem_consumer_lag_records", &at);
            let state = if p.value == 0.0 {
                "revoked"
            } else if value(now, "idem_partition_held", &at) == Some(1.0) {
                "paused by an operator (idem resume)"
            } else if value(now, "idem_partition_paused", &at) == Some(1.0) {
                "paused"
            } else {
                "assigned"
            };
            let _ = writeln!(
                out,
                "  {:<28} lag {:>9}  committed {:>10}  queue {:>5}  {state}",
                format!("{topic}/{partition}"),
                lag.map_or_else(|| "-".to_owned(), |l| l.to_string()),
                value(now, "idem_committed_offset", &at).map_or_else(|| "-".to_owned(), |c| c.to_string()),
                value(now, "idem_partition_queue_depth", &at).unwrap_or(0.0),
            );
        }
    }
    if totals.is_empty() {
        let _ = writeln!(out, "(no handler is consuming yet)");
    }
    out
}

/// The ledger audit's line of handler `h` (docs/guarantees.md).
fn audit_line(now: &[Sample], h: &str) -> String {
    let of = |name: &str| value(now, name, &[("handler", h)]).unwrap_or(0.0);
    let (checked, unaccounted) = (of("idem_audit_checked_records_total"), of("idem_audit_unaccounted_total"));
    let clean = match of("idem_audit_clean_at_seconds") as i64 {
        0 => "no clean sweep yet".to_owned(),
        at => chrono::DateTime::from_timestamp(at, 0)
            .map_or_else(String::new, |t| format!("last clean sweep {}", t.format("%H:%M:%S UTC"))),
    };
    let unpublished = of("idem_audit_unpublished");
    let clean = if unpublished > 0.0 {
        format!("{unpublished} emitted row(s) UNPUBLISHED 10 minutes after their commit; {clean}")
    } else {
        clean
    };
    if unaccounted > 0.0 {
        format!("ledger audit: {unaccounted} record(s) UNACCOUNTED (see the log), {checked} accounted for; {clean}")
    } else {
        format!("ledger audit: {checked} record(s) accounted for; {clean}")
    }
}

/// Prints frames until interrupted; with `once` (or when stdout is not a
/// terminal), one frame, with the rate over one second.
pub async fn show(url: &str, token: Option<&str>, once: bool) -> anyhow::Result<()> {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut before = scrape(&client, url, token).await?;
    let mut taken = Instant::now();
    let mut pause = Duration::from_secs(1);
    loop {
        tokio::time::sleep(pause).await;
        let now = scrape(&client, url, token).await?;
        let mut text = readiness(&client, url).await;
        text.push_str(&frame(url, &now, Some((&before, taken.elapsed()))));
        let handlers: Vec<String> = resolved(&now).into_keys().collect();
        text.push_str(&super::shadows::lines(&client, url, token, &handlers).await);
        text.push_str(&super::canaries::lines(&client, url, token, &handlers).await);
        text.push_str(&fleet(&client, url, token).await);
        if once || !terminal {
            out!("{text}")?;
            return Ok(());
        }
        // Home and clear, then the frame: refreshed in place.
        out!("\x1b[H\x1b[2J{text}")?;
        (before, taken, pause) = (now, Instant::now(), Duration::from_secs(2));
    }
}

/// A first line when the host is not ready (`/readyz`): then its lags may
/// be old (a broker it cannot reach reports nothing), and this says why.
async fn readiness(client: &reqwest::Client, url: &str) -> String {
    let target = format!("{}/readyz", url.trim_end_matches('/'));
    let Ok(response) = client.get(&target).send().await else { return String::new() };
    if response.status().is_success() {
        return String::new();
    }
    let answer: serde_json::Value = response.json().await.unwrap_or_default();
    let reasons: Vec<&str> =
        answer["reasons"].as_array().into_iter().flatten().filter_map(serde_json::Value::as_str).collect();
    format!("NOT READY: {} (the figures below may be stale)\n", reasons.join("; "))
}

/// The whole group (`GET /fleet`): each host, and which host owns each
/// partition; a line saying why when the host cannot say.
async fn fleet(client: &reqwest::Client, url: &str, token: Option<&str>) -> String {
    let target = format!("{}/fleet", url.trim_end_matches('/'));
    let mut request = client.get(&target);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let answer = match request.send().await {
        Ok(r) if r.status().is_success() => r.json::<serde_json::Value>().await.ok(),
        _ => None,
    };
    match answer {
        Some(fleet) => fleet_frame(&fleet),
        None => "\nfleet: not available from this host\n".to_owned(),
    }
}

/// The fleet's lines of a frame.
fn fleet_frame(fleet: &serde_json::Value) -> String {
    let mut out = String::new();
    let hosts = fleet["hosts"].as_array().cloned().unwrap_or_default();
    let alive = hosts.iter().filter(|h| h["alive"] == true).count();
    let _ = writeln!(out, "\nfleet: {alive} host(s)");
    for h in &hosts {
        let state = if h["alive"] != true {
            "gone".to_owned()
        } else if h["not_ready"].as_array().is_some_and(|n| !n.is_empty()) {
            format!(
                "not ready: {}",
                h["not_ready"]
                    .as_array()
                    .map(|n| n.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join("; "))
                    .unwrap_or_default()
            )
        } else {
            "ready".to_owned()
        };
        let _ = writeln!(
            out,
            "  {:<30} idem {:<8} {:<22} {state}",
            h["host"].as_str().unwrap_or("-"),
            h["version"].as_str().unwrap_or("-"),
            h["admin"].as_str().unwrap_or("-"),
        );
    }
    for p in fleet["partitions"].as_array().into_iter().flatten() {
        let owner = if p["owned"] == true {
            p["host"].as_str().unwrap_or("-").to_owned()
        } else {
            format!("none (last {})", p["host"].as_str().unwrap_or("-"))
        };
        let _ = writeln!(
            out,
            "  {:<20} {:<28} owned by {owner:<30} lag {}{}",
            p["handler"].as_str().unwrap_or("-"),
            format!("{}/{}", p["topic"].as_str().unwrap_or("-"), p["partition"]),
            p["lag"].as_i64().map_or_else(|| "-".to_owned(), |l| l.to_string()),
            if p["held"] == true { "  paused by an operator" } else { "" },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_with_escaped_labels_parse() {
        let text =
            "# HELP x y\n# TYPE x counter\nx_total{handler=\"a\\\"b\",le=\"+Inf\"} 3\nup 1\nh_sum{a=\"1\"} 0.25\n";
        let samples = parse(text);
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0].labels["handler"], "a\"b");
        assert_eq!(samples[0].labels["le"], "+Inf");
        assert_eq!(samples[0].value, 3.0);
        assert_eq!(samples[1].name, "up");
        assert_eq!(samples[2].value, 0.25);
    }
}
