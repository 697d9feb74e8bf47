//! Re-sends are the host's, not the guest's: they spend none of its
//! `max_http_requests`.

use idem_tests::host::HandlerSpec;

use crate::provider::{ScriptedProvider, Step};
use crate::{Env, Running, retries, scenario};

/// The guest's requests, and its allowance of them.
const REQUESTS: usize = 100;

/// README: "re-sends spend no `max_http_requests` and no attempt of the
/// event … at most `max_attempts × limits.max_http_requests` sends per
/// invocation". With `max_http_requests = 100`, one event sends exactly
/// 100 labelled POSTs (the scenarios guest's `requests`), and each needs
/// two re-sends (502 then 429, or a reset then 504): 300 sends, and the
/// event commits at its only attempt. Were re-sends charged to the
/// allowance, the 34th request's re-send would be denied and the event
/// dead-lettered.
#[tokio::test(flavor = "multi_thread")]
async fn re_sends_spend_none_of_the_guests_max_http_requests() {
    let env = Env::new().await;
    let provider = ScriptedProvider::start().await;
    let (id, payload) = scenario("requests", serde_json::json!({}));
    let key = |i: usize| format!("{id}:r{i}");
    for i in 0..REQUESTS {
        let steps = if i % 2 == 0 {
            [Step::Status(502, ""), Step::Status(429, "")]
        } else {
            [Step::ResetBeforeAnswer, Step::Status(504, "")]
        };
        provider.script(key(i), &steps);
    }
    env.send(&[&payload]).await;
    let limits = format!("[handler.limits]\nmax_http_requests = {REQUESTS}\n");
    let (spec, config) = env.config(HandlerSpec::scenarios(&env.topic, &provider.base_url), &limits);
    let running = Running::start(&config);
    let scrape = running.resolved(&spec, 1).await;
    let report = running.stop().await;

    let seen = provider.seen();
    assert_eq!(seen.len(), 3 * REQUESTS, "max_attempts (3) × max_http_requests sends");
    for i in 0..REQUESTS {
        let sends = provider.seen_as(&key(i));
        assert_eq!(sends.len(), 3, "request r{i}: {sends:?}");
    }
    assert_eq!(provider.charged().len(), REQUESTS, "each request applied once, under its own key");
    let effects = env.count(&format!("SELECT count(*) FROM scenario.effect WHERE event_id = '{id}'")).await;
    assert_eq!(effects, 1, "the event's effect committed");
    let r = (report.processed, report.failed, report.retries, report.dead_lettered, report.http_retries);
    assert_eq!(r, (1, 0, 0, 0, 2 * REQUESTS as u64), "{report:?}");
    let half = (REQUESTS / 2) as f64;
    let by_reason: Vec<f64> =
        ["502", "429", "connection", "504"].iter().map(|r| retries(&scrape, "scenarios", r)).collect();
    assert_eq!(by_reason, vec![half; 4], "idem_http_retries_total by reason");
    env.finish().await;
}
