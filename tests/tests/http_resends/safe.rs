//! Safe methods carry no key and are re-sent all the same.

use idem_tests::host::HandlerSpec;

use crate::provider::{ScriptedProvider, Step};
use crate::{Env, Running, retries, scenario};

/// README: "Safe methods (GET, HEAD, OPTIONS) carry no key and are re-sent
/// likewise." Two events of the scenarios guest each GET a path (and fail
/// on an answer that is not 2xx): one answered 502 then reset, the other
/// cut mid-body. Each is re-sent until answered, every send without
/// `Idempotency-Key`, and both commit at their only attempt. If GETs were
/// not re-sent, both events would be dead-lettered; if the host keyed a
/// re-sent GET, the provider would see a key. (No guest sends HEAD or
/// OPTIONS, so only GET is covered.)
#[tokio::test(flavor = "multi_thread")]
async fn a_get_is_re_sent_after_transient_failures_without_an_idempotency_key() {
    let env = Env::new().await;
    let provider = ScriptedProvider::start().await;
    provider.script("/v1/status/a", &[Step::Status(502, ""), Step::ResetBeforeAnswer]);
    provider.script("/v1/status/b", &[Step::CutMidBody { reset: false }]);
    let get = |path: &str| scenario("get", serde_json::json!({ "url": format!("{}{path}", provider.base_url) }));
    let (a, b) = (get("/v1/status/a"), get("/v1/status/b"));
    env.send(&[&a.1, &b.1]).await;
    let (spec, config) = env.config(HandlerSpec::scenarios(&env.topic, &provider.base_url), "");
    let running = Running::start(&config);
    let scrape = running.resolved(&spec, 2).await;
    let report = running.stop().await;

    let seen: Vec<(String, String, Option<String>)> =
        provider.seen().into_iter().map(|s| (s.method, s.path, s.key)).collect();
    let expected: Vec<(String, String, Option<String>)> =
        ["/v1/status/a", "/v1/status/a", "/v1/status/a", "/v1/status/b", "/v1/status/b"]
            .into_iter()
            .map(|path| ("GET".to_owned(), path.to_owned(), None))
            .collect();
    assert_eq!(seen, expected, "three sends of a, two of b, none with a key");
    let mut committed: Vec<uuid::Uuid> =
        sqlx::query_scalar("SELECT event_id FROM scenario.effect WHERE note = 'start'")
            .fetch_all(&env.db.pool)
            .await
            .unwrap_or_else(|e| panic!("scenario.effect: {e}"));
    committed.sort();
    let mut ids = vec![a.0, b.0];
    ids.sort();
    assert_eq!(committed, ids, "both events' effects committed");
    let r = (report.processed, report.failed, report.retries, report.dead_lettered, report.http_retries);
    assert_eq!(r, (2, 0, 0, 0, 3), "{report:?}");
    assert_eq!((retries(&scrape, "scenarios", "502"), retries(&scrape, "scenarios", "connection")), (1.0, 2.0));
    env.finish().await;
}
