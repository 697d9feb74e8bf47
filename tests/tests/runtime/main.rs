//! One event, one transaction: the handler runtime against real PostgreSQL
//! and a real HTTP provider.

use std::time::Duration;

mod cache;
mod hostile;
mod modules;
mod native;
mod warm;

use idem::executor::Pins;
use idem::{ErrorClass, Event, ExecError, Executor, Handler, HandlerSettings, LoadError, Outcome, Runtime};
use idem_tests::db::TestDb;
use idem_tests::guests;
use idem_tests::provider::{Fault, PaymentProvider};
use serde_json::json;

struct Setup {
    db: TestDb,
    provider: PaymentProvider,
    runtime: Runtime,
    /// Each handler's own pool, logged in as its role (name, schema, pool).
    pools: Vec<(&'static str, &'static str, sqlx::PgPool)>,
}

impl Setup {
    async fn new() -> Self {
        idem_tests::init_logging();
        let db = TestDb::new().await.unwrap_or_else(|e| panic!("test database: {e:#}"));
        let provider = PaymentProvider::start().await;
        let runtime = Runtime::new().unwrap_or_else(|e| panic!("runtime: {e:#}"));
        let mut pools = Vec::new();
        for (name, schema) in [("billing", "billing"), ("scenarios", "scenario"), ("notification", "notification")] {
            pools.push((name, schema, db.handler_pool(name, schema).await));
        }
        Self { db, provider, runtime, pools }
    }

    fn settings(&self, name: &str) -> HandlerSettings {
        let mut settings = HandlerSettings::new(name);
        settings.caps.http.allow = vec![self.provider.base_url()];
        // The provider listens on loopback: a private address, allowed explicitly.
        settings.caps.http.allow_private = vec![self.provider.base_url()];
        settings.caps.config.insert("payment_base_url".into(), self.provider.base_url());
        settings.caps.config.insert("provider_base_url".into(), self.provider.base_url());
        settings
    }

    fn executor(&self, component: &str, settings: HandlerSettings) -> Executor {
        let handler = Handler::load(&self.runtime, &guests::component(component), settings)
            .unwrap_or_else(|e| panic!("load {component}: {e}"));
        self.executor_as(component, handler)
    }

    /// An executor for `handler` on the pool of the handler of its name.
    fn executor_for(&self, handler: Handler) -> Executor {
        let name = handler.settings().name.clone();
        self.executor_as(&name, handler)
    }

    fn executor_as(&self, component: &str, handler: Handler) -> Executor {
        let http = idem::http_client(&handler.settings().caps.http).unwrap_or_else(|e| panic!("http client: {e}"));
        // The pool (and so the role, and the dedup namespace) of the component's handler.
        let (_, schema, pool) =
            self.pools.iter().find(|(n, _, _)| *n == component).unwrap_or_else(|| panic!("no pool for {component}"));
        let pins = Pins { schema: (*schema).to_owned(), synchronous_commit: "on".into() };
        Executor::new(handler, pool.clone(), http, pins)
    }

    fn billing(&self) -> Executor {
        self.executor("billing", self.settings("billing"))
    }

    fn scenarios(&self) -> Executor {
        self.scenarios_with(|_| {})
    }

    /// The scenarios handler with some settings changed.
    fn scenarios_with(&self, tune: impl FnOnce(&mut HandlerSettings)) -> Executor {
        let mut settings = self.settings("scenarios");
        tune(&mut settings);
        self.executor("scenarios", settings)
    }

    async fn count(&self, sql: &str) -> i64 {
        self.db.count(sql).await
    }

    async fn finish(self) {
        self.db.drop_database().await;
    }
}

fn event(payload: serde_json::Value) -> Event {
    let id = payload["eventId"].as_str().and_then(|s| s.parse().ok()).unwrap_or_else(uuid::Uuid::now_v7);
    let mut payload = payload;
    payload["eventId"] = json!(id.to_string());
    Event {
        id,
        event_type: payload["eventType"].as_str().unwrap_or("test.v1").to_owned(),
        occurred_at: "2026-11-30T00:00:00Z".into(),
        topic: "orders.confirmed".into(),
        partition: 0,
        offset: 0,
        key: None,
        headers: vec![],
        payload_sha256: idem::event::payload_hash(&payload),
        origin: None,
        payload: payload.to_string(),
    }
}

fn order() -> Event {
    event(json!({
        "eventType": "order.confirmed.v1", "occurredAt": "2026-11-30T00:00:00Z", "aggregateType": "Order",
        "orderId": 17, "customerId": 4, "totalAmount": 125.5, "currency": "EUR",
    }))
}

fn scenario(name: &str) -> Event {
    event(json!({ "eventType": "test.scenario.v1", "scenario": name }))
}

fn scenario_with(name: &str, extra: serde_json::Value) -> Event {
    let mut payload = json!({ "eventType": "test.scenario.v1", "scenario": name });
    if let (Some(p), Some(e)) = (payload.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    event(payload)
}

const CHARGES: &str = "SELECT count(*) FROM billing.charge";
const CLAIMS: &str = "SELECT count(*) FROM idem.processed_event";
const EFFECTS: &str = "SELECT count(*) FROM scenario.effect";

#[tokio::test]
async fn the_same_event_twice_is_processed_once() {
    let s = Setup::new().await;
    let billing = s.billing();
    let e = order();
    assert_eq!(billing.execute(&e, 1).await.expect("first execution"), Outcome::Processed);
    assert_eq!(billing.execute(&e, 1).await.expect("second execution"), Outcome::Duplicate);
    assert_eq!(s.count(CHARGES).await, 1);
    assert_eq!(s.count(CLAIMS).await, 1);
    assert_eq!(s.provider.keys(), vec![Some(e.id.to_string())], "the duplicate never reached the provider");
    let consumer: String =
        sqlx::query_scalar("SELECT consumer FROM idem.processed_event").fetch_one(&s.db.pool).await.expect("claim row");
    assert_eq!(consumer, "billing", "the dedup namespace is the handler's name");
    s.finish().await;
}

#[tokio::test]
async fn the_same_event_on_two_connections_at_once_has_one_effect() {
    let s = Setup::new().await;
    // The first charge answers late, so both executions overlap: the second
    // claim waits on the first transaction, then finds the row committed.
    s.provider.set_fault(Fault::DelayOnce(Duration::from_millis(400)));
    let (a, b) = (s.billing(), s.billing());
    let e = order();
    let (ra, rb) = tokio::join!(a.execute(&e, 1), b.execute(&e, 1));
    let mut outcomes = vec![ra.expect("a"), rb.expect("b")];
    outcomes.sort_by_key(|o| *o == Outcome::Duplicate);
    assert_eq!(outcomes, vec![Outcome::Processed, Outcome::Duplicate]);
    assert_eq!(s.count(CHARGES).await, 1);
    assert_eq!(s.count(CLAIMS).await, 1);
    assert_eq!(s.provider.charges(), 1);
    s.finish().await;
}

#[tokio::test]
async fn a_guest_that_writes_then_fails_or_traps_leaves_nothing() {
    let s = Setup::new().await;
    let exec = s.scenarios();

    let err = exec.execute(&scenario("write-then-fail"), 1).await.expect_err("permanent failure");
    assert!(matches!(err, ExecError::HandlerPermanent(ref m) if m.contains("on purpose")), "{err}");
    assert_eq!(err.class(), ErrorClass::Permanent);

    let err = exec.execute(&scenario("write-then-retryable"), 1).await.expect_err("retryable failure");
    assert_eq!(err.class(), ErrorClass::Retryable, "{err}");

    let err = exec.execute(&scenario("write-then-trap"), 1).await.expect_err("trap");
    assert!(
        matches!(err, ExecError::Trapped(ref m) if m.contains("trapping on purpose")),
        "the panic message explains the trap: {err}"
    );
    assert_eq!(err.class(), ErrorClass::Permanent);

    assert_eq!(s.count(EFFECTS).await, 0, "nothing the guests wrote survived");
    assert_eq!(s.count(CLAIMS).await, 0, "no event was marked processed");

    // The same failed event may run again (a retry) and then succeed.
    let e = scenario("ok");
    assert_eq!(exec.execute(&e, 1).await.expect("ok"), Outcome::Processed);
    assert_eq!(s.count(EFFECTS).await, 1);
    s.finish().await;
}

/// With the host's re-sends off, a reset fails the event (retryable) and
/// the pipeline's retry of the whole event reuses the key.
#[tokio::test]
async fn a_reset_after_the_charge_rolls_back_and_the_retry_reuses_the_key() {
    let s = Setup::new().await;
    let mut settings = s.settings("billing");
    settings.caps.http.retry.max_attempts = 1;
    let billing = s.executor("billing", settings);
    let e = order();
    s.provider.set_fault(Fault::ResetAfterCharge(1));
    let err = billing.execute(&e, 1).await.expect_err("the connection was reset");
    assert_eq!(err.class(), ErrorClass::Retryable, "a reset is worth a retry: {err}");
    assert_eq!(s.count(CHARGES).await, 0, "the charge row was rolled back");
    assert_eq!(s.count(CLAIMS).await, 0);

    assert_eq!(billing.execute(&e, 2).await.expect("retry"), Outcome::Processed);
    let key = Some(e.id.to_string());
    assert_eq!(s.provider.keys(), vec![key.clone(), key], "both attempts carried Idempotency-Key = eventId");
    assert_eq!(s.provider.charges(), 1, "the provider charged once");
    assert_eq!(s.count(CHARGES).await, 1);
    s.finish().await;
}

/// By default the host re-sends a request reset after the charge, with its
/// key, inside the same invocation: the event commits at its first attempt.
#[tokio::test]
async fn a_reset_after_the_charge_is_re_sent_with_the_key_and_the_event_commits_at_once() {
    let s = Setup::new().await;
    let billing = s.billing();
    let e = order();
    s.provider.set_fault(Fault::ResetAfterCharge(2));
    assert_eq!(billing.execute(&e, 1).await.expect("re-sent twice"), Outcome::Processed);
    let key = Some(e.id.to_string());
    assert_eq!(s.provider.keys(), vec![key.clone(), key.clone(), key], "three sends, one key");
    assert_eq!(s.provider.charges(), 1, "the provider charged once");
    assert_eq!(s.count(CHARGES).await, 1);
    assert_eq!(s.count(CLAIMS).await, 1);
    s.finish().await;
}

/// 503 with `Retry-After`: honoured when it fits the budget, not waited for
/// when it does not (the guest gets the 503 at once, and the event fails as
/// throttled: it waits without spending an attempt), the destination held
/// for every later request meanwhile; ignored when garbage.
#[tokio::test]
async fn retry_after_is_honoured_within_the_budget_and_capped_by_it() {
    let s = Setup::new().await;
    let executor = |s: &Setup| {
        s.executor("billing", {
            let mut settings = s.settings("billing");
            settings.timeout = Duration::from_secs(5);
            settings
        })
    };
    let billing = executor(&s);
    let posts = |s: &Setup| s.provider.seen().iter().filter(|r| r.method == "POST").count();

    s.provider.set_fault(Fault::UnavailableTimes(1, Some("1")));
    let began = std::time::Instant::now();
    assert_eq!(billing.execute(&order(), 1).await.expect("after the wait"), Outcome::Processed);
    assert!(began.elapsed() >= Duration::from_millis(950), "waited the second asked for: {:?}", began.elapsed());
    assert_eq!(posts(&s), 2);

    for huge in ["3600", "99999999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT"] {
        // A fresh executor: the destination held by the last one is not held here.
        let billing = executor(&s);
        s.provider.set_fault(Fault::UnavailableTimes(1, Some(huge)));
        let began = std::time::Instant::now();
        let before = posts(&s);
        let result = billing.execute(&order(), 1).await;
        let sent = posts(&s) - before;
        let err = result.expect_err(&format!("{huge}: the guest got the 503 ({sent} sent)"));
        assert_eq!(err.class(), ErrorClass::Unavailable, "{huge}: throttled, no attempt spent: {err}");
        assert!(err.to_string().contains("throttled"), "{huge}: {err}");
        assert!(began.elapsed() < Duration::from_secs(2), "{huge}: not waited for: {:?}", began.elapsed());
        assert_eq!(posts(&s) - before, 1, "{huge}: sent once");
        // The destination asked to be left alone: the next event sends nothing.
        let err = billing.execute(&order(), 1).await.expect_err("held");
        assert_eq!((err.class(), posts(&s) - before), (ErrorClass::Unavailable, 1), "{huge}: {err}");
    }

    let billing = executor(&s);
    s.provider.set_fault(Fault::UnavailableTimes(2, Some("soon")));
    assert_eq!(billing.execute(&order(), 1).await.expect("garbage ignored"), Outcome::Processed);
    s.finish().await;
}

/// A provider that never recovers costs at most `max_attempts` sends and
/// never holds the invocation past its budget.
#[tokio::test]
async fn re_sends_stop_at_the_cap_and_at_the_budget() {
    let s = Setup::new().await;
    s.provider.set_fault(Fault::Unavailable);
    let billing = s.billing();
    billing.execute(&order(), 1).await.expect_err("503 to the end");
    assert_eq!(s.provider.seen().len(), 3, "three sends at most");

    let slow = s.executor("billing", {
        let mut settings = s.settings("billing");
        settings.timeout = Duration::from_millis(800);
        settings.caps.http.timeout = Duration::from_millis(600);
        settings.caps.http.retry.max_attempts = 10;
        settings
    });
    s.provider.set_fault(Fault::None);
    s.provider.set_latency(Duration::from_secs(3));
    let began = std::time::Instant::now();
    slow.execute(&order(), 1).await.expect_err("the provider is too slow for the budget");
    assert!(began.elapsed() < Duration::from_secs(2), "within budget + grace: {:?}", began.elapsed());
    s.finish().await;
}

#[tokio::test]
async fn transaction_control_and_session_changes_are_refused() {
    let s = Setup::new().await;
    let exec = s.scenarios();
    let refusals = [
        ("commit", "transaction control"),
        ("END", "transaction control"),
        ("/**/ COMMIT", "transaction control"),
        ("rollback", "transaction control"),
        ("Savepoint x", "transaction control"),
        ("insert into scenario.effect values (gen_random_uuid(), 'x'); commit", "2 statements"),
        ("SET ROLE postgres", "session changes"),
        ("reset role", "session changes"),
        ("set session authorization postgres", "session changes"),
        ("DROP TABLE scenario.effect", "not allowed"),
        ("DELETE FROM idem.processed_event", "belongs to the host"),
    ];
    for (sql, why) in refusals {
        let err = exec.execute(&scenario_with("statement", json!({ "sql": sql })), 1).await.expect_err(sql);
        let message = err.to_string();
        assert!(message.contains("statement refused") && message.contains(why), "{sql}: {message}");
    }
    assert_eq!(s.count(EFFECTS).await, 0);
    assert_eq!(s.count(CLAIMS).await, 0);
    // An allowed statement goes through, in the same transaction.
    let e = scenario_with(
        "statement",
        json!({ "sql": "insert into scenario.effect values (gen_random_uuid(), 'allowed')" }),
    );
    assert_eq!(exec.execute(&e, 1).await.expect("allowed"), Outcome::Processed);
    assert_eq!(s.count(EFFECTS).await, 2);
    s.finish().await;
}

#[tokio::test]
async fn a_url_outside_the_allowlist_is_refused() {
    let s = Setup::new().await;
    let exec = s.scenarios();
    let other = PaymentProvider::start().await;
    let err = exec
        .execute(&scenario_with("get", json!({ "url": format!("{}/v1/status", other.base_url()) })), 1)
        .await
        .expect_err("denied");
    assert!(err.to_string().contains("denied"), "{err}");
    assert!(other.seen().is_empty(), "the request never left the host");
    let ok = scenario_with("get", json!({ "url": format!("{}/v1/status", s.provider.base_url()) }));
    assert_eq!(exec.execute(&ok, 1).await.expect("allowed"), Outcome::Processed);
    s.finish().await;
}

#[tokio::test]
async fn a_handled_unique_violation_commits_the_claim_and_the_other_writes() {
    let s = Setup::new().await;
    let exec = s.scenarios();
    let e = scenario("unique-violation");
    assert_eq!(exec.execute(&e, 1).await.expect("handled violation"), Outcome::Processed);
    let notes: Vec<String> = sqlx::query_scalar("SELECT note FROM scenario.effect WHERE event_id = $1 ORDER BY note")
        .bind(e.id)
        .fetch_all(&s.db.pool)
        .await
        .expect("notes");
    assert_eq!(notes, vec!["after-violation", "start"], "writes before and after the violation committed");
    assert_eq!(s.count(CLAIMS).await, 1, "and so did the claim");
    assert_eq!(exec.execute(&e, 1).await.expect("again"), Outcome::Duplicate);
    s.finish().await;
}

#[tokio::test]
async fn labelled_requests_keep_their_keys_across_a_re_execution() {
    let s = Setup::new().await;
    let exec = s.scenarios();
    let e = scenario("two-labeled-posts");
    // Attempt 1 sends both requests, then fails; attempt 2 sends them again.
    exec.execute(&e, 1).await.expect_err("first attempt fails on purpose");
    assert_eq!(exec.execute(&e, 2).await.expect("second attempt"), Outcome::Processed);
    let (main, fee) = (Some(e.id.to_string()), Some(format!("{}:fee", e.id)));
    assert_eq!(s.provider.keys(), vec![main.clone(), fee.clone(), main, fee]);
    assert_eq!(s.provider.charges(), 2, "one charge per operation");
    s.finish().await;
}

#[tokio::test]
async fn a_resend_after_a_timeout_reuses_the_key() {
    let s = Setup::new().await;
    // The guest re-sends by itself here, so the host's re-sends are off.
    let exec = s.scenarios_with(|settings| {
        settings.caps.http.timeout = Duration::from_millis(300);
        settings.caps.http.retry.max_attempts = 1;
    });
    s.provider.set_fault(Fault::DelayOnce(Duration::from_millis(1500)));
    let e = scenario("resend-after-timeout");
    assert_eq!(exec.execute(&e, 1).await.expect("resent"), Outcome::Processed);
    let key = Some(e.id.to_string());
    assert_eq!(s.provider.keys(), vec![key.clone(), key], "the resend carried the same key");
    assert_eq!(s.provider.charges(), 1);
    assert_eq!(s.count("SELECT count(*) FROM scenario.effect WHERE note = 'timed-out-once'").await, 1);
    s.finish().await;
}

#[tokio::test]
async fn a_second_different_unlabelled_unsafe_request_is_refused() {
    let s = Setup::new().await;
    let exec = s.scenarios();
    let err = exec.execute(&scenario("two-unlabeled-posts"), 1).await.expect_err("refused");
    assert!(err.to_string().contains("already used"), "{err}");
    assert_eq!(s.provider.keys().len(), 1, "the second request was never sent");
    s.finish().await;
}

#[tokio::test]
async fn a_key_prefix_separates_handlers() {
    let s = Setup::new().await;
    let mut settings = s.settings("billing-eu");
    settings.caps.http.key_prefix = Some("billing-eu".into());
    let exec = s.executor("billing", settings);
    let e = order();
    assert_eq!(exec.execute(&e, 1).await.expect("processed"), Outcome::Processed);
    assert_eq!(s.provider.keys(), vec![Some(format!("billing-eu:{}", e.id))]);
    s.finish().await;
}

#[tokio::test]
async fn a_guest_that_never_returns_is_stopped_and_rolled_back() {
    let s = Setup::new().await;
    let exec = s.scenarios_with(|settings| settings.timeout = Duration::from_millis(500));
    let err = exec.execute(&scenario("loop"), 1).await.expect_err("timed out");
    assert!(matches!(err, ExecError::TimedOut(_)), "{err}");
    assert_eq!(s.count(EFFECTS).await, 0);
    assert_eq!(s.count(CLAIMS).await, 0);
    s.finish().await;
}

#[tokio::test]
async fn values_round_trip_through_the_db_capability() {
    let s = Setup::new().await;
    let exec = s.scenarios();
    let e = scenario("roundtrip");
    assert_eq!(exec.execute(&e, 1).await.expect("roundtrip"), Outcome::Processed);
    let note: String = sqlx::query_scalar("SELECT note FROM scenario.effect WHERE note <> 'start'")
        .fetch_one(&s.db.pool)
        .await
        .expect("summary row");
    assert_eq!(
        note,
        format!(
            "42|héllo|12345678901234567890.125|{{\"a\":[1,2]}}|{}|2026-11-30T01:02:03.500Z|true|[0, 255]|None|1.5",
            e.id
        )
    );
    s.finish().await;
}

#[tokio::test]
async fn a_file_that_is_not_a_handler_component_is_rejected_with_its_reason() {
    let runtime = Runtime::new().expect("runtime");
    let err =
        Handler::from_bytes(&runtime, "garbage.wasm", b"not wasm", HandlerSettings::new("x")).expect_err("garbage");
    assert!(err.to_string().contains("not a WebAssembly component"), "{err}");
    let core_module = b"\0asm\x01\0\0\0";
    let err =
        Handler::from_bytes(&runtime, "core.wasm", core_module, HandlerSettings::new("x")).expect_err("core module");
    assert!(err.to_string().contains("core.wasm"), "{err}");
    let command = guests::component("not-a-handler");
    let err = Handler::load(&runtime, &command, HandlerSettings::new("x")).expect_err("another world");
    assert!(matches!(err, LoadError::WrongWorld { .. }), "{err}");
    assert!(err.to_string().contains("does not implement the idem:handler@0.1.0 world"), "{err}");
}

#[tokio::test]
async fn a_statement_that_outlives_the_time_limit_is_cancelled_and_rolled_back() {
    let s = Setup::new().await;
    let exec = s.scenarios_with(|settings| settings.timeout = Duration::from_millis(500));
    let started = std::time::Instant::now();
    let err = exec
        .execute(&scenario_with("statement", json!({ "sql": "SELECT pg_sleep(60)" })), 1)
        .await
        .expect_err("the statement cannot finish in time");
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert_eq!(err.class(), ErrorClass::Retryable, "{err}");
    assert_eq!(s.count(CLAIMS).await, 0);
    assert_eq!(s.count(EFFECTS).await, 0);
    s.finish().await;
}

#[tokio::test]
async fn a_guest_over_its_memory_limit_traps_and_the_host_goes_on() {
    let s = Setup::new().await;
    let exec = s.scenarios_with(|settings| settings.max_memory_bytes = 32 << 20);
    let err = exec.execute(&scenario("hog"), 1).await.expect_err("over the limit");
    assert!(matches!(err, ExecError::Trapped(_)), "{err}");
    assert_eq!(s.count(EFFECTS).await, 0);
    assert_eq!(exec.execute(&scenario("ok"), 1).await.expect("the next event"), Outcome::Processed);
    s.finish().await;
}

#[tokio::test]
async fn a_malformed_request_is_a_permanent_error_and_is_never_sent() {
    let s = Setup::new().await;
    let exec = s.scenarios();
    let err = exec.execute(&scenario("bad-header"), 1).await.expect_err("malformed");
    assert_eq!(err.class(), ErrorClass::Permanent, "retrying would not fix it: {err}");
    assert!(err.to_string().contains("not a valid header name"), "{err}");
    assert!(s.provider.seen().is_empty());
    s.finish().await;
}
