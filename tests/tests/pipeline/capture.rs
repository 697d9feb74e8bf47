//! Replay tests from production (`[handler.capture]`, `idem test
//! --replay`): a sample of live events is captured with what each
//! statement and request got, redacted; replayed against the same code
//! they agree, against a changed one each divergence is named, and no
//! redacted value is kept anywhere.

use std::time::Duration;

use idem_tests::host::{self, HandlerSpec, InProcess};
use idem_tests::{guests, kafka};
use serde_json::Value;

use super::Env;
use super::operate::get;

/// A card number no capture may keep, one per order.
fn card(order: i64) -> String {
    format!("4000-1234-{order:04}-9876")
}

/// A tenant secret sent as a record header, one per order.
fn tenant(order: i64) -> String {
    format!("tenant-secret-{order:04}")
}

/// `idem …` with `args`: its exit status and everything it printed.
fn idem(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(idem_tests::idem_bin()).args(args).output().expect("idem runs");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// The host's captures once it holds `n`.
async fn captures(admin: &str, n: usize) -> Value {
    let mut last = Value::Null;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let text = get(admin, "/handlers/billing/captures?limit=1000").await.unwrap_or_default();
        last = serde_json::from_str::<Value>(&text).unwrap_or_default();
        if last["captures"].as_array().is_some_and(|c| c.len() >= n) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the host did not hold {n} captures within 60 s: {}", last["captures"].as_array().map_or(0, Vec::len));
}

#[tokio::test(flavor = "multi_thread")]
async fn captured_events_replay_without_divergence_on_the_same_code_and_name_each_divergence_of_a_changed_one() {
    let env = Env::new(2).await;
    let requests = kafka::create_topic(1).await;
    let mut spec = HandlerSpec::billing_announcing(&env.topic, &env.provider.base_url(), &requests);
    spec.extra
        .push_str("capture = { sample = 1.0, redact = [\"$.card.number\"], redact_headers = [\"x-tenant-secret\"] }\n");
    let config = host::write_config(&env.db.url, &[spec]);
    env.db.allow_emits(&config).await;
    let running = InProcess::start(&config);
    let admin = host::admin_url(&config);
    idem_tests::wait_until_async("the admin API answers", || async { get(&admin, "/healthz").await.is_some() }).await;
    let n = 500;
    for order in 1..=n {
        let mut payload: Value = serde_json::from_slice(&host::order_payload(order).1).expect("json");
        payload["card"] = serde_json::json!({ "number": card(order), "brand": "visa" });
        let partition = (order % i64::from(env.partitions)) as i32;
        let secret = tenant(order);
        let headers: [(&str, &[u8]); 1] = [("x-tenant-secret", secret.as_bytes())];
        let body = payload.to_string();
        kafka::produce_with_headers(&env.producer, &env.topic, partition, b"k", body.as_bytes(), &headers).await;
    }
    env.charged(n, Duration::from_secs(120)).await;
    let answer = captures(&admin, n as usize).await;
    let list = answer["captures"].as_array().expect("captures");
    assert_eq!(list.len(), n as usize, "one capture per event");
    // Each capture holds what the handler did: a statement, a request with
    // the provider's answer, an emit; and nothing of what was redacted.
    let first = &list[0];
    assert_eq!(first["statements"][0]["call"], "execute", "{first}");
    assert_eq!(first["requests"][0]["answer"]["response"]["status"].as_u64().map(|s| s / 100), Some(2), "{first}");
    assert_eq!(first["emits"][0]["event_type"], "payment.requested.v1", "{first}");
    assert_eq!(first["outcome"]["result"], "ok", "{first}");
    let stored: Vec<String> = sqlx::query_scalar("SELECT capture::text FROM idem.capture WHERE handler = 'billing'")
        .fetch_all(&env.db.pool)
        .await
        .expect("the stored captures");
    let everything = format!("{answer}{}", stored.join(""));
    for order in 1..=n {
        assert!(!everything.contains(&card(order)), "card {} was kept", card(order));
        assert!(!everything.contains(&tenant(order)), "header {} was kept", tenant(order));
    }
    assert!(everything.contains("\"brand\\\":\\\"visa\\\"") || everything.contains("visa"), "the rest is kept");
    let file = std::env::temp_dir().join(format!("idem-captures-{}.json", std::process::id()));
    std::fs::write(&file, answer.to_string()).expect("write the captures");
    let (config_path, file_path) = (config.to_str().expect("path"), file.to_str().expect("path"));
    // The same code: not one divergence, with no database or network.
    let (ok, out) = idem(&["test", "--config", config_path, "--handler", "billing", "--replay", file_path]);
    assert!(ok, "{out}");
    assert!(out.contains(&format!("{n} captured event(s) replayed against")) && out.contains(": 0 diverged"), "{out}");
    // A version that charges twice: every event diverges, each named.
    let candidate = guests::component("candidate");
    let changed = ["test", "--config", config_path, "--handler", "billing", "--replay", file_path, "--component"];
    let (ok, out) = idem(&[&changed[..], &[candidate.to_str().expect("path")]].concat());
    assert!(!ok, "a diverging replay fails: {out}");
    assert!(out.contains(&format!(": {n} diverged")), "{out}");
    for kind in ["statement 1 differs", "request 1 differs", "emit 1 differs"] {
        assert_eq!(out.matches(kind).count(), n as usize, "`{kind}` on every event: {out}");
    }
    let line = out.lines().find(|l| l.contains("statement 1 differs")).expect("a statement divergence");
    assert!(line.contains("INSERT INTO billing.charge") && line.contains("float64"), "{line}");
    // From the host directly, keeping what it fetched.
    let saved = std::env::temp_dir().join(format!("idem-captures-saved-{}.json", std::process::id()));
    let from_host = ["test", "--config", config_path, "--handler", "billing", "--from-capture", "--url", &admin];
    let (ok, out) = idem(&[&from_host[..], &["--captures", "100", "--save", saved.to_str().expect("path")]].concat());
    assert!(ok && out.contains("100 captured event(s) replayed") && out.contains(": 0 diverged"), "{out}");
    let kept: Value = serde_json::from_slice(&std::fs::read(&saved).expect("saved")).expect("json");
    assert_eq!(kept["captures"].as_array().map(Vec::len), Some(100));
    let _ = (std::fs::remove_file(file), std::fs::remove_file(saved));
    running.stop().await;
    env.finish().await;
}
