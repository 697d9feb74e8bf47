//! Shadow runs (`idem deploy --shadow`): a stored version runs beside the
//! active one on the same live events, always rolled back; the report
//! says where the two versions differ, and nothing the shadow does is
//! committed, sent or published.

use std::time::Duration;

use idem_tests::host::{self, HandlerSpec, InProcess};
use idem_tests::{guests, kafka};
use serde_json::Value;

use super::Env;
use super::operate::get;

/// `n` orders, one every 50 ms (under the shadow's rate, so that every one
/// is shadowed), over the topic's partitions.
async fn trickle(env: &Env, n: i64) {
    for order in 1..=n {
        env.send((order % i64::from(env.partitions)) as i32, &host::order_payload(order).1).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `PUT /handlers/billing/module?shadow=true` with `bytes`.
async fn upload_shadow(admin: &str, bytes: Vec<u8>) -> (u16, Value) {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().expect("client");
    let url = format!("{admin}/handlers/billing/module?shadow=true");
    let response = client.put(url).body(bytes).send().await.expect("the admin API answers");
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

/// The shadow report once it has counted `n` events.
async fn report(admin: &str, n: i64) -> Value {
    let counted =
        |r: &Value| ["agree", "differ", "skipped"].iter().map(|k| r["total"][k].as_i64().unwrap_or(0)).sum::<i64>();
    let mut last = Value::Null;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let text = get(admin, "/handlers/billing/shadow").await.unwrap_or_default();
        last = serde_json::from_str::<Value>(&text).unwrap_or_default()["shadow"].clone();
        if counted(&last) >= n {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the shadow report did not count {n} events within 60 s: {last}");
}

/// A host of billing announcing its charges, its admin API answering.
async fn announcing(env: &Env, candidate: &str) -> (InProcess, String, String) {
    let requests = kafka::create_topic(1).await;
    let mut spec = HandlerSpec::billing_announcing(&env.topic, &env.provider.base_url(), &requests);
    spec.config.push(("candidate".into(), candidate.into()));
    let config = host::write_config(&env.db.url, &[spec]);
    env.db.allow_emits(&config).await;
    let running = InProcess::start(&config);
    let admin = host::admin_url(&config);
    idem_tests::wait_until_async("the admin API answers", || async { get(&admin, "/healthz").await.is_some() }).await;
    (running, admin, requests)
}

/// The amounts of the provider's charges, sorted.
fn charged_amounts(env: &Env) -> Vec<f64> {
    let mut amounts: Vec<f64> = env
        .provider
        .seen()
        .iter()
        .filter(|s| s.method == "POST")
        .map(|s| serde_json::from_str::<Value>(&s.body).expect("a JSON body")["amount"].as_f64().expect("amount"))
        .collect();
    amounts.sort_by(f64::total_cmp);
    amounts
}

/// Every amount of `1..=n`'s orders, sorted.
fn ordered_amounts(n: i64) -> Vec<f64> {
    let mut amounts: Vec<f64> = (1..=n)
        .map(|o| {
            serde_json::from_slice::<Value>(&host::order_payload(o).1).expect("json")["totalAmount"]
                .as_f64()
                .expect("amount")
        })
        .collect();
    amounts.sort_by(f64::total_cmp);
    amounts
}

/// What the database, the provider and the emitted topic hold after `n`
/// orders: the active version's effects, once each, and nothing else.
async fn only_the_active_versions_effects(env: &Env, n: i64, requests: &str) {
    assert_eq!(env.count("SELECT count(*) FROM billing.charge").await, n, "one charge row per order");
    let mut rows: Vec<f64> =
        sqlx::query_scalar("SELECT amount::float8 FROM billing.charge").fetch_all(&env.db.pool).await.expect("charges");
    rows.sort_by(f64::total_cmp);
    assert_eq!(rows, ordered_amounts(n), "every row is the active version's amount");
    assert_eq!(charged_amounts(env), ordered_amounts(n), "the provider saw the active version's charges alone");
    let claims = env.count("SELECT count(*) FROM idem.processed_event WHERE module_version = 1").await;
    assert_eq!(claims, n, "every event applied once, by version 1");
    assert_eq!(env.count("SELECT count(*) FROM idem.processed_event").await, n);
    idem_tests::wait_until_async("the outbox's rows are published", || async {
        env.count("SELECT count(*) FROM idem.outbox WHERE published_at IS NULL").await == 0
    })
    .await;
    let mut announced: Vec<f64> = kafka::read_all(requests)
        .iter()
        .map(|m| {
            let payload = rdkafka::Message::payload(m).expect("a payload");
            serde_json::from_slice::<Value>(payload).expect("json")["amount"].as_f64().expect("amount")
        })
        .collect();
    announced.sort_by(f64::total_cmp);
    assert_eq!(announced, ordered_amounts(n), "only the active version's announcements were published");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shadow_charging_twice_the_amount_differs_on_every_event_and_none_of_it_is_committed_sent_or_published() {
    let env = Env::new(2).await;
    let (running, admin, requests) = announcing(&env, "double").await;
    let candidate = std::fs::read(guests::component("candidate")).expect("candidate component");
    let (status, answer) = upload_shadow(&admin, candidate).await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!((answer["version"].as_i64(), answer["shadow"].as_bool()), (Some(2), Some(true)), "{answer}");
    let n = 40;
    trickle(&env, n).await;
    env.charged(n, Duration::from_secs(60)).await;
    let report = report(&admin, n).await;
    assert_eq!(report["version"], 2, "{report}");
    assert_eq!(report["total"]["differ"], n, "every event differs: {}", report["total"]);
    assert_eq!((report["total"]["agree"].as_i64(), report["total"]["skipped"].as_i64()), (Some(0), Some(0)));
    assert_eq!(report["types"][0]["event_type"], "order.confirmed.v1", "{report}");
    let differences = report["differences"].as_array().expect("differences");
    assert!(!differences.is_empty(), "{report}");
    for d in differences {
        let differs: Vec<&str> = d["differs"].as_array().expect("differs").iter().filter_map(Value::as_str).collect();
        assert_eq!(differs, ["statements", "requests", "emits"], "{d}");
        assert_eq!(d["active"]["outcome"], "ok");
        assert_eq!(d["shadow"]["outcome"], "ok");
        assert_eq!(d["active"]["writes"], d["shadow"]["writes"], "one row in the same table on both sides: {d}");
        assert_eq!(d["active"]["writes"]["billing.charge"], serde_json::json!([1, 0, 0]), "{d}");
        // The statements name the values: the shadow's amount is twice the active one's.
        let amount = |side: &str| {
            let request = d[side]["requests"][0].as_str().expect("a request");
            assert!(request.starts_with("POST ") && request.contains("/v1/charges key="), "{request}");
            let body = request.split_once(" body=").expect("a body").1;
            serde_json::from_str::<Value>(body).expect("json")["amount"].as_f64().expect("amount")
        };
        assert_eq!(amount("shadow"), 2.0 * amount("active"), "{d}");
        let statement = d["shadow"]["statements"][0].as_str().expect("a statement");
        assert!(statement.contains(&format!("Float64({:?})", 2.0 * amount("active"))), "{statement}");
    }
    only_the_active_versions_effects(&env, n, &requests).await;
    running.stop().await;
    env.finish().await;
}

/// `idem …` with `args`: its exit status and everything it printed.
fn idem(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(idem_tests::idem_bin()).args(args).output().expect("idem runs");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shadow_that_does_the_same_agrees_on_every_event_and_the_cli_makes_it_active() {
    let env = Env::new(2).await;
    let spec = env.billing();
    let a = super::operate::named(&host::write_config(&env.db.url, std::slice::from_ref(&spec)), "shadow-a");
    let b = super::operate::named(&host::write_config(&env.db.url, std::slice::from_ref(&spec)), "shadow-b");
    let hosts = [InProcess::start(&a), InProcess::start(&b)];
    let (admin, other) = (host::admin_url(&a), host::admin_url(&b));
    for url in [&admin, &other] {
        idem_tests::wait_until_async("the admin API answers", || async { get(url, "/healthz").await.is_some() }).await;
    }
    // The same code under another hash: a new version that must agree.
    let same = std::env::temp_dir().join(format!("idem-shadow-same-{}.wasm", std::process::id()));
    let billing = std::fs::read(guests::component("billing")).expect("billing component");
    std::fs::write(&same, guests::with_marker(&billing, "v2")).expect("write the component");
    let (ok, out) =
        idem(&["deploy", "--shadow", "--handler", "billing", same.to_str().expect("path"), "--url", &admin]);
    assert!(ok && out.contains("stored as version 2; it runs as a shadow beside version 1"), "{out}");
    // The other host follows the store within seconds.
    idem_tests::wait_until_async("the other host runs the shadow", || async {
        let text = get(&other, "/handlers/billing").await.unwrap_or_default();
        serde_json::from_str::<Value>(&text).unwrap_or_default()["running_shadow"] == 2
    })
    .await;
    let n = 30;
    trickle(&env, n).await;
    env.charged(n, Duration::from_secs(60)).await;
    let report = report(&admin, n).await;
    // Every event compared agrees. One may be skipped by design (no
    // execution slot free at that moment on its host, seen once in ten
    // runs on two hosts): a skip is counted, never called agreement.
    let (agree, skipped) = (report["total"]["agree"].as_i64(), report["total"]["skipped"].as_i64());
    assert_eq!(report["total"]["differ"], 0, "{report}");
    assert_eq!(agree.unwrap_or(0) + skipped.unwrap_or(0), n, "{report}");
    assert!(skipped <= Some(2), "{report}");
    assert_eq!(report["differences"], serde_json::json!([]), "{report}");
    let (ok, out) = idem(&["status", "--once", "--url", &admin]);
    assert!(ok, "{out}");
    assert!(out.contains("shadow of billing: version 2 since"), "{out}");
    assert!(
        out.contains(&format!("{} agree, 0 differ, {} skipped", agree.unwrap_or(0), skipped.unwrap_or(0))),
        "{out}"
    );
    // Nothing of the shadow reached the provider: one charge per order.
    assert_eq!(env.provider.charges(), n as usize);

    let (ok, out) = idem(&["deploy", "--activate-shadow", "--handler", "billing", "--url", &admin]);
    assert!(ok && out.contains("version 2 is active"), "{out}");
    let text = get(&admin, "/handlers/billing/shadow").await.unwrap_or_default();
    assert_eq!(serde_json::from_str::<Value>(&text).expect("json")["shadow"], Value::Null, "{text}");
    let (ok, out) = idem(&["deploy", "--activate-shadow", "--handler", "billing", "--url", &admin]);
    assert!(!ok && out.contains("has no shadow version"), "{out}");
    for order in n + 1..=n + 10 {
        env.send((order % 2) as i32, &host::order_payload(order).1).await;
    }
    env.charged(n + 10, Duration::from_secs(60)).await;
    for running in hosts {
        running.stop().await;
    }
    let on_two = env.count("SELECT count(*) FROM idem.processed_event WHERE module_version = 2").await;
    assert_eq!(on_two, 10, "the events after the activation ran on version 2");
    let _ = std::fs::remove_file(&same);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shadow_cannot_commit_send_or_publish_whatever_it_tries() {
    let env = Env::new(1).await;
    let (running, admin, requests) = announcing(&env, "escape").await;
    let candidate = std::fs::read(guests::component("candidate")).expect("candidate component");
    let (status, answer) = upload_shadow(&admin, candidate).await;
    assert_eq!(status, 201, "{answer}");
    let n = 20;
    trickle(&env, n).await;
    env.charged(n, Duration::from_secs(60)).await;
    let report = report(&admin, n).await;
    assert_eq!(report["total"]["differ"], n, "{}", report["total"]);
    let d = &report["differences"][0];
    let tried: Vec<&str> =
        d["shadow"]["statements"].as_array().expect("statements").iter().filter_map(Value::as_str).collect();
    assert!(tried[0].starts_with("COMMIT -> error: DbError::Refused("), "{tried:?}");
    assert!(
        tried.iter().any(|s| s.starts_with("RELEASE SAVEPOINT idem_shadow -> error: DbError::Refused(")),
        "{tried:?}"
    );
    only_the_active_versions_effects(&env, n, &requests).await;
    running.stop().await;
    let shadow_rows = env.count("SELECT count(*) FROM billing.charge WHERE amount > 1000").await;
    assert_eq!(shadow_rows, 0);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_shadow_holding_rows_delays_the_live_events_by_its_budget_at_most() {
    let env = Env::new(2).await;
    let (running, admin, requests) = announcing(&env, "slow").await;
    let candidate = std::fs::read(guests::component("candidate")).expect("candidate component");
    let (status, answer) = upload_shadow(&admin, candidate).await;
    assert_eq!(status, 201, "{answer}");
    // Unbounded, each event would wait 5 s for its shadow (and the other
    // partition's live transactions for the rows it locks): 100 s and more.
    let n = 20;
    let started = std::time::Instant::now();
    trickle(&env, n).await;
    env.charged(n, Duration::from_secs(60)).await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(40), "20 orders took {took:?} beside a shadow sleeping 5 s on each");
    let report = report(&admin, n).await;
    assert_eq!(report["total"]["skipped"], n, "a run cut by its budget compares nothing: {}", report["total"]);
    only_the_active_versions_effects(&env, n, &requests).await;
    running.stop().await;
    env.finish().await;
}
