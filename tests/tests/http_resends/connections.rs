//! Connections lost while the body is read, and connections refused, are
//! re-sent with their key.

use idem_tests::host::{HandlerSpec, order_payload};

use crate::provider::{ScriptedProvider, Step};
use crate::{Env, Running, metric, retries};

/// README: "A connection refused or reset …, a timeout, a reset while
/// reading the body … are sent again …, with the same `Idempotency-Key`:
/// the provider applies the operation once". The provider charges, sends
/// the head and 10 of the body's 64 bytes, then closes the connection (one
/// order, FIN) or resets it (another order, RST, twice). Each is re-sent
/// under its event's key and commits at its only attempt, charged once by
/// the provider and once in `billing.charge`. If a body cut short reached
/// the guest as an error, both orders would be dead-lettered with their
/// charge made at the provider and no row.
#[tokio::test(flavor = "multi_thread")]
async fn a_connection_lost_mid_body_is_re_sent_with_the_same_key_and_charged_once() {
    let env = Env::new().await;
    let provider = ScriptedProvider::start().await;
    let (closed, reset) = (order_payload(1), order_payload(2));
    provider.script(closed.0.to_string(), &[Step::CutMidBody { reset: false }]);
    provider.script(reset.0.to_string(), &[Step::CutMidBody { reset: true }, Step::CutMidBody { reset: true }]);
    env.send(&[&closed.1, &reset.1]).await;
    let (spec, config) = env.config(HandlerSpec::billing(&env.topic, &provider.base_url), "");
    let running = Running::start(&config);
    let scrape = running.resolved(&spec, 2).await;
    let report = running.stop().await;

    for ((id, _), sends) in [(&closed, 2), (&reset, 3)] {
        let seen = provider.seen_as(&id.to_string());
        assert_eq!(seen.len(), sends, "{id}: {seen:?}");
        assert!(seen.iter().all(|s| s.method == "POST" && s.key == Some(id.to_string())), "{seen:?}");
    }
    assert_eq!(provider.seen().len(), 5, "no request under another key: {:?}", provider.seen());
    let expected = [closed.0.to_string(), reset.0.to_string()].into_iter().collect();
    assert_eq!(provider.charged(), expected, "each order's operation applied under its one key");
    let mut rows = vec![closed.0, reset.0];
    rows.sort();
    assert_eq!(env.charged_events().await, rows, "one billing.charge row per order");
    assert_eq!(env.count("SELECT count(*) FROM idem.processed_event").await, 2);
    let r = (report.processed, report.failed, report.retries, report.dead_lettered, report.http_retries);
    assert_eq!(r, (2, 0, 0, 0, 3), "{report:?}");
    assert_eq!(retries(&scrape, "billing", "connection"), 3.0, "idem_http_retries_total{{reason=\"connection\"}}");
    // Every send's answer had its head read (a 2xx, no send without an
    // answer): each of the three failures came while the body was read.
    let sends = |class| metric(&scrape, "idem_http_requests_total", &[("handler", "billing"), ("status_class", class)]);
    assert_eq!((sends("2xx"), sends("error")), (5.0, 0.0), "idem_http_requests_total by status class");
    env.finish().await;
}

/// README: "A connection refused … [is] sent again". The provider's port
/// has nothing listening when the order's charge is first sent; once the
/// host has logged that it re-sends it (a refusal), the provider starts
/// listening there, and the re-send is charged: one request reached the
/// provider, under the event's key, and the event committed at its only
/// attempt. The re-sends are spread out (`initial_backoff_ms = 500`, up to
/// 10 sends) so that the provider is up before they run out. If a refusal
/// reached the guest, the order would be dead-lettered uncharged.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_connection_is_re_sent_until_the_provider_listens() {
    let env = Env::new().await;
    let port = quiet_port();
    let url = format!("http://127.0.0.1:{port}");
    let (id, payload) = order_payload(1);
    env.send(&[&payload]).await;
    let spread = "[handler.http.retry]\nmax_attempts = 10\ninitial_backoff_ms = 500\nmax_backoff_ms = 1000\n";
    let (spec, config) = env.config(HandlerSpec::billing(&env.topic, &url), spread);
    let running = Running::start(&config);
    // Until a refusal was re-sent, or the order dead-lettered (not re-sent).
    let resent = || running.resend_reasons().iter().any(|r| r == "connection");
    idem_tests::wait_until("a refused send re-sent, or the order dead-lettered", || {
        resent() || running.logged("record dead-lettered")
    })
    .await;
    assert!(resent(), "the refused send was not re-sent: the order was dead-lettered");
    let provider = ScriptedProvider::start_on(port).await;
    let scrape = running.resolved(&spec, 1).await;
    let refused = running.resend_reasons();
    let report = running.stop().await;

    let seen = provider.seen();
    assert_eq!(seen.len(), 1, "only the send after the provider started reached it: {seen:?}");
    assert_eq!((seen[0].method.as_str(), seen[0].key.clone()), ("POST", Some(id.to_string())));
    assert_eq!(provider.charged(), [id.to_string()].into_iter().collect());
    assert_eq!(env.charged_events().await, vec![id]);
    assert!(refused.iter().all(|r| r == "connection"), "only refusals were re-sent: {refused:?}");
    let r = (report.processed, report.failed, report.retries, report.dead_lettered);
    assert_eq!(r, (1, 0, 0, 0), "{report:?}");
    // Each refused send re-sent once; the one the provider answered, not.
    assert!((1..10).contains(&report.http_retries), "re-sent within the cap of 10 sends: {report:?}");
    assert_eq!(retries(&scrape, "billing", "connection"), report.http_retries as f64);
    env.finish().await;
}

/// A port nothing listens on, below the kernel's ephemeral range: no
/// outgoing connection (nor another test's port 0) takes it before the
/// provider listens there.
fn quiet_port() -> u16 {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let ephemeral = range.split_whitespace().next().and_then(|p| p.parse::<u16>().ok()).unwrap_or(32768);
    let span = ephemeral.saturating_sub(10_000).max(1024);
    let random = uuid::Uuid::now_v7().as_bytes()[14..].to_owned();
    let start = u16::from_le_bytes([random[0], random[1]]);
    (0..span)
        .map(|i| 10_000 + (start.wrapping_add(i) % span))
        .find(|&port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
        .unwrap_or_else(|| panic!("no free port between 10000 and {ephemeral}"))
}
