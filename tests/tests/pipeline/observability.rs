//! What an operator sees: `/metrics` read with a Prometheus text-format
//! parser, `/healthz` and `/readyz`, JSON logs, `idem status`, and the
//! dashboard's queries against a real scrape.

use std::collections::BTreeSet;
use std::time::Duration;

use idem_tests::host::{self, HandlerSpec};
use idem_tests::{kafka, wait_until, wait_until_async};
use prometheus_parse::{Scrape, Value};

use crate::Env;

async fn get(url: &str) -> (u16, String) {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().expect("client");
    match client.get(url).send().await {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(e) => (0, e.to_string()),
    }
}

async fn scrape(admin: &str) -> Scrape {
    let (status, body) = get(&format!("{admin}/metrics")).await;
    assert_eq!(status, 200, "{body}");
    Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).expect("a Prometheus text exposition")
}

/// The value of the sample `name` whose labels include `labels`.
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .and_then(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(*v),
            Value::Histogram(_) | Value::Summary(_) => None,
        })
}

/// A histogram's count (`_count`) for `handler`.
fn count(scrape: &Scrape, name: &str, handler: &str) -> u64 {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && s.labels.get("handler") == Some(handler))
        .and_then(|s| match &s.value {
            Value::Histogram(buckets) => buckets.iter().map(|b| b.count as u64).max(),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no histogram {name} for {handler}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_match_the_run_lag_drains_to_zero_and_the_dashboard_queries_exist() {
    let env = Env::new(3).await;
    let orders = env.send_orders(30).await;
    for payload in orders.iter().take(5) {
        env.send(1, payload).await;
    }
    env.send(2, b"not json").await;
    // Two charges reset before their answer: each re-sent by the host.
    env.provider.set_fault(idem_tests::provider::Fault::ResetAfterCharge(2));
    let config = host::write_config(&env.db.url, std::slice::from_ref(&env.billing()));
    let admin = host::admin_url(&config);
    let running = host::InProcess::start(&config);
    wait_until("every record resolved", || env.provider.charges() >= 30).await;
    let mut drained = None;
    for _ in 0..100 {
        let s = scrape(&admin).await;
        let lags: Vec<f64> = s
            .samples
            .iter()
            .filter(|x| x.metric == "idem_consumer_lag_records")
            .filter_map(|x| if let Value::Gauge(v) = x.value { Some(v) } else { None })
            .collect();
        let resolved: f64 = ["processed", "duplicate", "invalid"]
            .iter()
            .filter_map(|o| value(&s, "idem_records_total", &[("handler", "billing"), ("outcome", o)]))
            .sum();
        if lags.len() == 3 && lags.iter().all(|l| *l == 0.0) && resolved == 36.0 {
            drained = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let s = drained.expect("lag 0 on all 3 partitions and 36 records resolved");
    let billing = [("handler", "billing")];
    let outcome = |o: &str| value(&s, "idem_records_total", &[("handler", "billing"), ("outcome", o)]);
    assert_eq!(
        (outcome("processed"), outcome("duplicate"), outcome("invalid"), outcome("failed")),
        (Some(30.0), Some(5.0), Some(1.0), Some(0.0))
    );
    assert_eq!(value(&s, "idem_dead_lettered_total", &billing), Some(1.0));
    assert_eq!(value(&s, "idem_failures_total", &[("handler", "billing"), ("class", "permanent")]), Some(0.0));
    assert_eq!(value(&s, "idem_module_version", &billing), Some(1.0));
    assert_eq!(count(&s, "idem_handler_execution_seconds", "billing"), 30, "one invocation per processed event");
    assert_eq!(count(&s, "idem_end_to_end_latency_seconds", "billing"), 36, "every record resolved");
    let transactions = value(&s, "idem_transactions_total", &billing).expect("transactions");
    assert_eq!(count(&s, "idem_transaction_seconds", "billing") as f64, transactions);
    assert_eq!(count(&s, "idem_batch_size_events", "billing") as f64, transactions);
    let http = value(&s, "idem_http_requests_total", &[("handler", "billing"), ("status_class", "2xx")]);
    assert_eq!(http, Some(30.0), "one charge per processed event");
    let reset = value(&s, "idem_http_requests_total", &[("handler", "billing"), ("status_class", "error")]);
    assert_eq!(reset, Some(2.0), "the two resets, each a send without an answer");
    let resent = value(&s, "idem_http_retries_total", &[("handler", "billing"), ("reason", "connection")]);
    assert_eq!(resent, Some(2.0), "each re-sent once");
    assert!(value(&s, "idem_db_statements_total", &billing).is_some_and(|n| n >= 30.0));
    // The broker's answers to the offset commits reach the host: they are
    // how it tells a consumer stuck on its coordinator from a healthy one.
    let commits = |result| value(&s, "idem_offset_commits_total", &[("handler", "billing"), ("result", result)]);
    assert!(commits("confirmed").is_some_and(|n| n >= 1.0), "{:?}", commits("confirmed"));
    assert_eq!(commits("failed"), Some(0.0));
    for p in 0..3 {
        let at = [("handler", "billing"), ("partition", &*p.to_string())];
        assert_eq!(value(&s, "idem_partition_assigned", &at), Some(1.0));
        let committed = value(&s, "idem_committed_offset", &at).expect("committed");
        assert_eq!(Some(committed), value(&s, "idem_partition_high_watermark", &at));
    }
    assert!(value(&s, "idem_process_resident_memory_bytes", &[]).is_some_and(|b| b > 1e6));
    let pool = [("pool", "handler"), ("handler", "billing"), ("state", "idle")];
    assert!(value(&s, "idem_db_pool_connections", &pool).is_some());
    assert!(value(&s, "idem_db_pool_connections", &[("pool", "idem"), ("state", "busy")]).is_some());

    // Every metric a dashboard query names is in this scrape.
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/grafana-dashboard.json")).expect("file"),
    )
    .expect("dashboard JSON");
    let names: BTreeSet<&str> = s.samples.iter().map(|x| x.metric.as_str()).collect();
    let metric = regex::Regex::new(r"idem_[a-z0-9_]+").expect("regex");
    let mut queried = 0;
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            for m in metric.find_iter(expr) {
                queried += 1;
                let family = m.as_str();
                let found = names.contains(family)
                    || ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|suffix| family.strip_suffix(suffix).is_some_and(|base| names.contains(base)));
                assert!(found, "the dashboard queries {family}, which no scrape has");
            }
        }
    }
    assert!(queried >= 12, "{queried}");

    // `idem status --once`: the same host, as an operator reads it, once
    // the host has recorded its partitions in the fleet (every 2 s).
    wait_until_async("the host's three partitions in the fleet", || async {
        let (_, body) = get(&format!("{admin}/fleet")).await;
        body.matches("\"owned\":true").count() == 3
    })
    .await;
    let out = std::process::Command::new(idem_tests::idem_bin())
        .args(["status", "--once", "--url", &admin])
        .output()
        .expect("idem status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("billing") && text.contains("v1"), "{text}");
    // Three partitions in this host's part, three again in the fleet's.
    assert_eq!(text.matches("  committed ").count(), 3, "{text}");
    // Owned by this host, by whichever automatic identity (vm-N) it claimed.
    let owned = text.lines().filter(|l| l.contains(env.topic.as_str()) && l.contains(" owned by vm-")).count();
    assert_eq!(owned, 3, "{text}");
    assert!(text.contains(&format!("{}/0", env.topic)), "{text}");
    eprintln!("idem status --once:\n{text}");
    running.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn readyz_follows_the_group_join_and_the_database() {
    let env = Env::new(1).await;
    let (proxy, via_proxy) = env.database_proxy().await;
    let config = host::write_config(&via_proxy, std::slice::from_ref(&env.billing()));
    // Dynamic membership: a static member of this process rejoining a group
    // can be assigned before the listener's first answer.
    let text =
        std::fs::read_to_string(&config).expect("config").replace("[kafka]\n", "[kafka]\ninstance_id = \"off\"\n");
    std::fs::write(&config, text).expect("config");
    let admin = host::admin_url(&config);
    // The consumer polls (and so completes its join) only once the test has
    // seen the listener's first answer: under load that answer could
    // otherwise come after a one-member group's join.
    let release = std::env::temp_dir().join(idem_tests::unique_name("poll"));
    let hold = release.to_str().expect("a path").to_owned();
    let running = host::spawn(&config, false, &[("IDEM_TEST_HOLD_POLL_UNTIL", &hold)]);
    let mut seen = Vec::new();
    for _ in 0..600 {
        let (status, body) = get(&format!("{admin}/readyz")).await;
        if status != 0 {
            seen.push((status, body));
            if status == 200 {
                break;
            }
            std::fs::write(&release, b"").expect("the release file");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (first, last) = (seen.first().expect("an answer"), seen.last().expect("an answer"));
    let _ = std::fs::remove_file(&release);
    assert_eq!(first.0, 503, "ready before the group join: {seen:?}");
    assert!(first.1.contains("has not joined its group"), "{}", first.1);
    assert_eq!(last.0, 200, "{seen:?}");
    assert_eq!(get(&format!("{admin}/healthz")).await.0, 200);

    proxy.cut();
    let mut down = (0, String::new());
    for _ in 0..40 {
        down = get(&format!("{admin}/readyz")).await;
        if down.0 == 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(down.0, 503, "{}", down.1);
    assert!(down.1.contains("database"), "{}", down.1);
    assert_eq!(get(&format!("{admin}/healthz")).await.0, 200, "alive while the database is down");
    proxy.restore();
    let mut up = 0;
    for _ in 0..80 {
        up = get(&format!("{admin}/readyz")).await.0;
        if up == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(up, 200, "ready again once the database is back");
    host::signal(&running, "TERM");
    let _ = tokio::task::spawn_blocking(move || host::wait_report(running)).await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_are_one_object_per_line_with_the_events_fields() {
    let env = Env::new(1).await;
    let (id, fail) = crate::failures::scenario("write-then-fail", serde_json::json!({}));
    env.send(0, &fail).await;
    let spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let out = std::process::Command::new(idem_tests::idem_bin())
        .args(["run", "--exit-when-drained", "--config", config.to_str().expect("path")])
        .env("IDEM_LOG_FORMAT", "json")
        .env("IDEM_LOG", "info")
        .output()
        .expect("idem run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    assert!(lines.len() > 3, "{stderr}");
    assert!(lines.iter().all(|l| l["level"].is_string() && l["timestamp"].is_string() && l["message"].is_string()));
    let failed = lines
        .iter()
        .find(|l| l["event_id"] == serde_json::json!(id.to_string()))
        .unwrap_or_else(|| panic!("no line names the event: {stderr}"));
    assert_eq!(failed["handler"], "scenarios");
    assert_eq!(failed["topic"], serde_json::json!(env.topic));
    assert_eq!(failed["partition"], 0);
    assert_eq!(failed["offset"], 0);
    assert!(kafka::read_all(&format!("{}.scenarios.dlq", env.topic)).len() == 1);
    env.finish().await;
}

/// The spans an OTLP/JSON export request carries: (name, trace id, span
/// id, parent span id).
fn spans(body: &str) -> Vec<(String, String, String, String)> {
    let Ok(request) = serde_json::from_str::<serde_json::Value>(body) else { return Vec::new() };
    let mut out = Vec::new();
    for resource in request["resourceSpans"].as_array().into_iter().flatten() {
        for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
            for span in scope["spans"].as_array().into_iter().flatten() {
                let field = |k: &str| span[k].as_str().unwrap_or_default().to_ascii_lowercase();
                out.push((field("name"), field("traceId"), field("spanId"), field("parentSpanId")));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_records_traceparent_is_continued_through_the_handler_into_the_providers_request() {
    let env = Env::new(1).await;
    let collector = idem_tests::provider::PaymentProvider::start().await;
    let (trace_id, parent_span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let traceparent = format!("00-{trace_id}-{parent_span}-01");
    let (_, order) = host::order_payload(7);
    kafka::produce_with_headers(&env.producer, &env.topic, 0, b"k", &order, &[("traceparent", traceparent.as_bytes())])
        .await;
    let config = host::write_config(&env.db.url, std::slice::from_ref(&env.billing()));
    let child = host::spawn(
        &config,
        true,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.base_url()), ("OTEL_SERVICE_NAME", "idem-test")],
    );
    let (status, reports) = host::wait_report(child);
    assert!(status.success() && reports[0].processed == 1, "{reports:?}");

    // The provider's request carries this trace.
    let charge = env.provider.seen().into_iter().find(|s| s.path.starts_with("/v1/charges")).expect("the charge");
    let sent = charge.traceparent.expect("a traceparent on the provider's request");
    assert!(sent.starts_with(&format!("00-{trace_id}-")), "{sent}");

    // The spans: idem.event under the producer's span, the steps under it.
    let all: Vec<_> = collector.seen().iter().filter(|s| s.path == "/v1/traces").flat_map(|s| spans(&s.body)).collect();
    let find =
        |name: &str| all.iter().find(|s| s.0 == name).unwrap_or_else(|| panic!("no span {name} among {all:?}")).clone();
    let event = find("idem.event");
    assert_eq!((event.1.as_str(), event.3.as_str()), (trace_id, parent_span), "{event:?}");
    for step in ["idem.validate", "idem.claim", "idem.handler", "idem.commit"] {
        let s = find(step);
        assert_eq!((s.1.as_str(), s.3.as_str()), (trace_id, event.2.as_str()), "{step} under idem.event: {s:?}");
    }
    let handler = find("idem.handler");
    for call in ["idem.db", "idem.http"] {
        let s = find(call);
        assert_eq!((s.1.as_str(), s.3.as_str()), (trace_id, handler.2.as_str()), "{call} under idem.handler: {s:?}");
    }
    let http = find("idem.http");
    assert_eq!(sent, format!("00-{trace_id}-{}-01", http.2), "the request names the idem.http span");
    env.finish().await;
}
