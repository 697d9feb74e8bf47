//! Transient answers (429, 502, 503, 504) are re-sent with their key, a
//! 429's `Retry-After` is waited for, and any other answer reaches the guest
//! after one send.

use std::time::Duration;

use idem_tests::host::{HandlerSpec, order_payload};
use idem_tests::kafka;
use rdkafka::Message as _;

use crate::provider::{ScriptedProvider, Step};
use crate::{Env, Running, retries};

/// README: "`429`/`502`/`503`/`504` are sent again at once, after a
/// full-jitter backoff (under 10 ms …), up to `max_attempts` sends per
/// request (3), with the same `Idempotency-Key` … `Retry-After` … on a
/// `429`/`503` replaces the backoff when longer". One order per answer
/// (the billing example: one charge, `error_for_status`): each transient
/// one is charged at its re-send under its event's key, the 429's re-send
/// waits its second, and a 500 or a 422 is sent once and dead-lettered
/// (no pipeline retry here). Without the re-sends the first four orders
/// would be dead-lettered; without `Retry-After` the 429's re-send would
/// come within milliseconds; re-sending a 500 or 422 would show a second
/// request.
#[tokio::test(flavor = "multi_thread")]
async fn answers_429_502_503_504_are_re_sent_under_the_same_key_and_500_or_422_are_not() {
    let env = Env::new().await;
    let provider = ScriptedProvider::start().await;
    let orders: Vec<(uuid::Uuid, Vec<u8>)> = (1..=6).map(order_payload).collect();
    let key = |i: usize| orders[i].0.to_string();
    let scripts: [&[Step]; 6] = [
        &[Step::Status(429, "retry-after: 1\r\n")],
        &[Step::Status(502, "")],
        &[Step::Status(503, ""), Step::Status(504, "")],
        &[Step::Status(504, ""), Step::Status(504, "")],
        &[Step::Status(500, "")],
        &[Step::Status(422, "")],
    ];
    for (i, steps) in scripts.iter().enumerate() {
        provider.script(key(i), steps);
    }
    env.send(&orders.iter().map(|(_, p)| p.as_slice()).collect::<Vec<_>>()).await;
    let (spec, config) = env.config(HandlerSpec::billing(&env.topic, &provider.base_url), "");
    let running = Running::start(&config);
    let scrape = running.resolved(&spec, 6).await;
    let report = running.stop().await;

    for (i, sends) in [2, 2, 3, 3, 1, 1].into_iter().enumerate() {
        let seen = provider.seen_as(&key(i));
        assert_eq!(seen.len(), sends, "order {} ({:?}): sends {seen:?}", i + 1, scripts[i]);
        assert!(seen.iter().all(|s| s.method == "POST" && s.key == Some(key(i))), "one key per order: {seen:?}");
    }
    assert_eq!(provider.seen().len(), 12, "no request under another key: {:?}", provider.seen());
    let waited = {
        let seen = provider.seen_as(&key(0));
        seen[1].at.duration_since(seen[0].at)
    };
    assert!(waited >= Duration::from_millis(950), "the 429's re-send waited its Retry-After of 1 s: {waited:?}");

    let mut charged: Vec<uuid::Uuid> = orders[..4].iter().map(|(id, _)| *id).collect();
    charged.sort();
    assert_eq!(env.charged_events().await, charged, "the four re-sent orders charged, once each");
    let provider_charged = provider.charged();
    assert_eq!(provider_charged.len(), 4, "{provider_charged:?}");
    assert!((0..4).all(|i| provider_charged.contains(&key(i))), "{provider_charged:?}");

    let dead: Vec<Option<Vec<u8>>> = kafka::read_all(&format!("{}.billing.dlq", env.topic))
        .iter()
        .map(|m| m.payload().map(<[u8]>::to_vec))
        .collect();
    assert_eq!(dead, vec![Some(orders[4].1.clone()), Some(orders[5].1.clone())], "the 500 and the 422, once each");

    let r = (report.processed, report.failed, report.retries, report.dead_lettered, report.http_retries);
    assert_eq!(r, (4, 2, 0, 2, 6), "{report:?}");
    let by_reason: Vec<f64> = ["429", "502", "503", "504"].iter().map(|r| retries(&scrape, "billing", r)).collect();
    assert_eq!(by_reason, vec![1.0, 1.0, 1.0, 3.0], "idem_http_retries_total by reason");
    env.finish().await;
}
