//! Throttles (issue 42): a destination's rate (`[handler.http.rate]`)
//! holds within 10%; an operator's change is in force within 2 s; a
//! destination's `429` with `Retry-After: 1` holds every request to it for
//! a second without spending an event's attempt; every event is charged
//! once; the metrics show the rate in force. The handler's own events'
//! rate (`max_events_per_second`) holds the same way, and a `503` with
//! `Retry-After` holds a destination as a `429` does.

use std::time::Duration;

use idem_tests::host;
use idem_tests::provider::Fault;
use serde_json::json;

use crate::operate::{get, post};
use crate::{DISTINCT_ORDERS, Env};

/// Charges the provider makes in `window`, from now.
async fn charged_in(env: &Env, window: Duration) -> usize {
    let before = env.provider.charges();
    tokio::time::sleep(window).await;
    env.provider.charges() - before
}

fn within_tenth(seen: usize, expected: f64) -> bool {
    (seen as f64 - expected).abs() <= expected * 0.1
}

#[tokio::test(flavor = "multi_thread")]
async fn a_destination_rate_holds_changes_at_run_time_and_its_retry_after_slows_it_without_spending_attempts() {
    let env = Env::new(2).await;
    let spec = env.billing().with_lanes("key", 8);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let text = std::fs::read_to_string(&config).expect("config");
    let rated = text.replace("[handler.http]\n", "[handler.http]\nrate = { \"127.0.0.1\" = { per_second = 20 } }\n");
    std::fs::write(&config, rated).expect("config");
    let admin = host::admin_url(&config);
    let running = host::InProcess::start(&config);
    env.send_orders(1200).await;

    // The configured rate: 20 a second, once the first second's burst is spent.
    idem_tests::wait_until("the burst spent", || env.provider.charges() >= 40).await;
    let seen = charged_in(&env, Duration::from_secs(5)).await;
    assert!(within_tenth(seen, 100.0), "20/s for 5 s: {seen} charges");
    let metrics = get(&admin, "/metrics").await.unwrap_or_default();
    assert!(
        metrics.contains("idem_throttle_per_second{handler=\"billing\",target=\"127.0.0.1\"} 20"),
        "{}",
        metrics.lines().filter(|l| l.contains("throttle")).collect::<Vec<_>>().join("\n")
    );

    // Raised to 50 a second at run time, with the CLI: in force within 2 s.
    let out = std::process::Command::new(idem_tests::idem_bin())
        .args([
            "throttle",
            "--handler",
            "billing",
            "--target",
            "127.0.0.1",
            "--per-second",
            "50",
            "--reason",
            "provider allows more",
            "--url",
            &admin,
        ])
        .output()
        .expect("idem throttle");
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seen = charged_in(&env, Duration::from_secs(4)).await;
    assert!(within_tenth(seen, 200.0), "50/s for 4 s: {seen} charges");

    // The provider answers 429 with Retry-After: 1: nothing more reaches it
    // for that second, and no event spends an attempt on it.
    env.provider.set_fault(Fault::TooManyTimes(1, "1"));
    idem_tests::wait_until("the 429 answered", || matches!(env.provider.fault(), Fault::None)).await;
    let seen = charged_in(&env, Duration::from_millis(800)).await;
    assert!(seen <= 2, "the destination was held for its Retry-After: {seen} charges within it");
    let seen = charged_in(&env, Duration::from_secs(2)).await;
    assert!(seen >= 50, "and went on after it: {seen} charges in 2 s");

    // A bad change is refused, naming what is wrong; back to the config's rate.
    let (status, answer) =
        post(&admin, "/handlers/billing/throttle", json!({ "target": "127.0.0.1", "per_second": -3 })).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"].as_str().is_some_and(|e| e.contains("per_second")), "{answer}");
    let (status, answer) =
        post(&admin, "/handlers/billing/throttle", json!({ "target": "127.0.0.1", "per_second": null })).await;
    assert_eq!(status, 200, "{answer}");
    env.charged(1200, Duration::from_secs(120)).await;
    assert_eq!(env.count(DISTINCT_ORDERS).await, 1200, "each order charged once");
    let metrics = get(&admin, "/metrics").await.unwrap_or_default();
    assert!(
        metrics.contains("idem_retries_total{handler=\"billing\"} 0"),
        "no attempt spent: {}",
        metrics.lines().filter(|l| l.contains("retries")).collect::<Vec<_>>().join("\n")
    );
    let audited =
        env.count("SELECT count(*) FROM idem.audit WHERE handler = 'billing' AND action LIKE '%/throttle%'").await;
    assert!(audited >= 2, "the changes are in the audit trail: {audited}");
    running.stop().await;
    env.finish().await;
}

/// `max_events_per_second` paces the handler's events (whatever they call)
/// within 10%, an operator's change is in force within 2 s, and a
/// destination's `503` with `Retry-After: 1` holds it without spending an
/// attempt, as a 429 does.
#[tokio::test(flavor = "multi_thread")]
async fn the_handlers_event_rate_holds_changes_at_run_time_and_a_503_with_retry_after_spends_no_attempt() {
    let env = Env::new(2).await;
    let mut spec = env.billing().with_lanes("key", 8);
    spec.extra.push_str("max_events_per_second = 20.0\n");
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let admin = host::admin_url(&config);
    let running = host::InProcess::start(&config);
    env.send_orders(600).await;

    idem_tests::wait_until("the burst spent", || env.provider.charges() >= 40).await;
    let seen = charged_in(&env, Duration::from_secs(5)).await;
    assert!(within_tenth(seen, 100.0), "20 events/s for 5 s: {seen} charges");

    let (status, answer) =
        post(&admin, "/handlers/billing/throttle", json!({ "target": "events", "per_second": 50 })).await;
    assert_eq!(status, 200, "{answer}");
    let changed = std::time::Instant::now();
    idem_tests::wait_until_async("the new rate in force", || async {
        let metrics = get(&admin, "/metrics").await.unwrap_or_default();
        metrics.contains("idem_throttle_per_second{handler=\"billing\",target=\"events\"} 50")
    })
    .await;
    assert!(changed.elapsed() < Duration::from_secs(2), "in force within 2 s: {:?}", changed.elapsed());
    // Its first second may spend the new burst; the rate holds after it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let seen = charged_in(&env, Duration::from_secs(4)).await;
    assert!(within_tenth(seen, 200.0), "50 events/s for 4 s: {seen} charges");

    env.provider.set_fault(Fault::UnavailableTimes(1, Some("1")));
    idem_tests::wait_until("the 503 answered", || matches!(env.provider.fault(), Fault::None)).await;
    let seen = charged_in(&env, Duration::from_millis(800)).await;
    assert!(seen <= 2, "the destination was held for its Retry-After: {seen} charges within it");

    let (status, answer) =
        post(&admin, "/handlers/billing/throttle", json!({ "target": "events", "per_second": null })).await;
    assert_eq!(status, 200, "{answer}");
    env.charged(600, Duration::from_secs(120)).await;
    assert_eq!(env.count(DISTINCT_ORDERS).await, 600, "each order charged once");
    let metrics = get(&admin, "/metrics").await.unwrap_or_default();
    assert!(
        metrics.contains("idem_retries_total{handler=\"billing\"} 0"),
        "no attempt spent: {}",
        metrics.lines().filter(|l| l.contains("retries")).collect::<Vec<_>>().join("\n")
    );
    running.stop().await;
    env.finish().await;
}
