//! The quarantine (issue 42, `[handler.failure] on_exhausted =
//! "quarantine"`): a provider failing for one customer parks that
//! customer's key — its failing event and every later one, in order, in
//! PostgreSQL — while every other key drains and the offsets are
//! committed; a SIGKILL of every host loses nothing and the parked key
//! stays parked for the next owner; at the cap an event is dead-lettered
//! instead; a release runs the key's events once each in their original
//! order; a dead-lettering sends them to the DLQ; both are in the audit
//! trail with their actor.

use std::time::Duration;

use idem_tests::host;
use idem_tests::provider::FAILING_MARKER;
use idem_tests::{kafka, wait_until_async};
use serde_json::{Value, json};

use crate::operate::{get, named, post};
use crate::{CHARGES, Env};

const BAD: &str = "customer-bad";
const WORSE: &str = "customer-worse";
const MAX_PARKED: i64 = 9;

/// Order `id` for `customer` (a key), in `currency`: `FAI` orders fail at
/// the provider while it is told to fail them.
fn order(id: i64, currency: &str) -> Vec<u8> {
    json!({
        "eventId": uuid::Uuid::now_v7().to_string(), "eventType": "order.confirmed.v1",
        "occurredAt": "2026-12-04T12:00:00Z", "aggregateType": "Order", "orderId": id,
        "customerId": 1000 + id % 17, "totalAmount": 12.5, "currency": currency,
    })
    .to_string()
    .into_bytes()
}

/// Good orders on both partitions under eight keys; `bad` orders (FAI) of
/// customer-bad on partition 0 and `worse` ones of customer-worse on 1.
async fn send(env: &Env, ids: std::ops::RangeInclusive<i64>, bad: &[i64], worse: &[i64]) {
    let records: Vec<(i32, String, Vec<u8>)> = ids
        .map(|i| {
            if bad.contains(&i) {
                (0, BAD.to_owned(), order(i, "FAI"))
            } else if worse.contains(&i) {
                (1, WORSE.to_owned(), order(i, "FAI"))
            } else {
                ((i % 2) as i32, format!("customer-{}", i % 8), order(i, "EUR"))
            }
        })
        .collect();
    kafka::produce_all_keyed(&env.producer, &env.topic, &records).await;
}

async fn parked(env: &Env, key: &str) -> i64 {
    env.count(&format!("SELECT count(*) FROM idem.parked_event WHERE handler = 'billing' AND key = '{key}'::bytea"))
        .await
}

async fn key_state(env: &Env, key: &str) -> Option<String> {
    sqlx::query_scalar("SELECT state FROM idem.parked_key WHERE handler = 'billing' AND key = $1::text::bytea")
        .bind(key)
        .fetch_optional(&env.db.pool)
        .await
        .expect("parked_key")
}

/// The order ids parked under `key`, in the order they will run, which is
/// the key's offset order (under a key-ordered handler).
async fn parked_orders(env: &Env, key: &str) -> Vec<i64> {
    parked_orders_as(env, key, true).await
}

/// [`parked_orders`]; `in_offset_order: false` under `ordering = "none"`,
/// where a key's events run (and exhaust their attempts) side by side and
/// are parked in whatever order they failed.
async fn parked_orders_as(env: &Env, key: &str, in_offset_order: bool) -> Vec<i64> {
    let values: Vec<(i64, Vec<u8>)> = sqlx::query_as(
        "SELECT \"offset\", value FROM idem.parked_event WHERE handler = 'billing' AND key = $1::text::bytea ORDER BY seq",
    )
    .bind(key)
    .fetch_all(&env.db.pool)
    .await
    .expect("parked_event");
    let offsets: Vec<i64> = values.iter().map(|(o, _)| *o).collect();
    assert!(!in_offset_order || offsets.windows(2).all(|w| w[0] < w[1]), "parked in offset order: {offsets:?}");
    values
        .iter()
        .map(|(_, v)| serde_json::from_slice::<Value>(v).expect("json")["orderId"].as_i64().expect("id"))
        .collect()
}

/// The FAI orders sent to the provider since `from`, in order (the
/// provider charges them all once it no longer fails them).
fn charged_fai(env: &Env, from: usize) -> Vec<i64> {
    env.provider.seen()[from..]
        .iter()
        .filter(|s| s.method == "POST" && s.body.contains(FAILING_MARKER))
        .map(|s| serde_json::from_str::<Value>(&s.body).expect("json")["orderId"].as_i64().expect("id"))
        .collect()
}

async fn all_committed(env: &Env, group: &str) -> bool {
    let ends = kafka::high_watermarks(&env.topic, env.partitions);
    let committed = kafka::committed(group, &env.topic, env.partitions);
    committed.iter().zip(&ends).all(|(c, end)| *c == Some(*end))
}

fn idem(args: &[&str]) -> String {
    let out = std::process::Command::new(idem_tests::idem_bin()).args(args).output().expect("idem");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "idem {args:?}: {text}");
    text
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_failing_at_its_provider_is_parked_in_order_while_the_others_drain_and_runs_once_in_order_when_released()
{
    let env = Env::new(2).await;
    env.provider.fail_marked(true);
    let mut spec = env.billing().with_lanes("key", 4);
    spec.max_attempts = 3;
    spec.extra.push_str(&format!("failure = {{ on_exhausted = \"quarantine\", max_parked = {MAX_PARKED} }}\n"));
    let group = spec.group_id.clone();
    let a = named(&host::write_config(&env.db.url, std::slice::from_ref(&spec)), "quarantine-a");
    let b = named(&host::write_config(&env.db.url, std::slice::from_ref(&spec)), "quarantine-b");
    let (admin_a, admin_b) = (host::admin_url(&a), host::admin_url(&b));
    let (host_a, host_b) = (host::spawn(&a, false, &[]), host::spawn(&b, false, &[]));

    // Five orders of customer-bad among forty, two of customer-worse.
    let (bad, worse) = ([5, 12, 19, 26, 33], [8, 15]);
    send(&env, 1..=40, &bad, &worse).await;
    env.charged(33, Duration::from_secs(90)).await;
    wait_until_async("both failing keys held, every event parked", || async {
        parked(&env, BAD).await == 5
            && parked(&env, WORSE).await == 2
            && key_state(&env, BAD).await.as_deref() == Some("held")
            && key_state(&env, WORSE).await.as_deref() == Some("held")
    })
    .await;
    assert_eq!(parked_orders(&env, BAD).await, bad, "customer-bad's orders parked in their order");
    wait_until_async("every offset committed, the parked ones too", || all_committed(&env, &group)).await;
    assert_eq!(env.count(CHARGES).await, 33, "the others drained; nothing of the failing keys applied");
    wait_until_async("the metrics count the quarantine", || async {
        let metrics = format!(
            "{}{}",
            get(&admin_a, "/metrics").await.unwrap_or_default(),
            get(&admin_b, "/metrics").await.unwrap_or_default()
        );
        metrics.contains("idem_quarantined_events{handler=\"billing\"} 7")
            && metrics.contains("idem_quarantined_keys{handler=\"billing\"} 2")
    })
    .await;

    // Every host SIGKILLed; the provider recovers and more orders come
    // meanwhile; one host back: it parks customer-bad's new orders behind
    // the old ones (it read the parked keys before running any), although
    // they would now succeed, and the other keys run.
    host::signal(&host_a, "KILL");
    host::signal(&host_b, "KILL");
    let _ = host::wait_report(host_a);
    let _ = host::wait_report(host_b);
    env.provider.fail_marked(false);
    send(&env, 41..=45, &[41, 42], &[]).await;
    let host_a = host::spawn(&a, false, &[]);
    env.charged(36, Duration::from_secs(90)).await;
    wait_until_async("the new orders of the parked key are parked behind it", || async {
        parked(&env, BAD).await == 7
    })
    .await;
    assert_eq!(parked_orders(&env, BAD).await, [5, 12, 19, 26, 33, 41, 42]);

    // The cap (9 parked): the next order of the key is dead-lettered.
    send(&env, 46..=46, &[46], &[]).await;
    wait_until_async("the order past the cap is dead-lettered", || async {
        env.count(
            "SELECT count(*) FROM idem.dead_letter WHERE handler = 'billing' AND reason LIKE '%quarantine is full%'",
        )
        .await
            == 1
    })
    .await;
    assert_eq!(parked(&env, BAD).await, 7, "nothing past the cap parked");

    // The listing names the keys and their first failure.
    let listed = idem(&["quarantine", "--handler", "billing", "--url", &admin_a]);
    assert!(
        listed.contains(BAD) && listed.contains(WORSE) && listed.contains("held") && listed.contains("503"),
        "{listed}"
    );

    // Asked with another count than the key holds (what the operator saw
    // is not what is there): refused, nothing sent.
    let (status, answer) =
        post(&admin_a, "/handlers/billing/quarantine/dead-letter", json!({ "key": WORSE, "events": 5 })).await;
    assert_eq!(status, 409, "{answer}");
    assert!(answer["error"].as_str().is_some_and(|e| e.contains("holds 2 event(s) now, not the 5 shown")), "{answer}");
    // customer-worse dead-lettered through the API: its two orders go to the DLQ.
    let (status, answer) = post(
        &admin_a,
        "/handlers/billing/quarantine/dead-letter",
        json!({ "key": WORSE, "events": 2, "reason": "refunded by hand" }),
    )
    .await;
    assert_eq!((status, &answer["dead_lettered"]), (200, &json!(2)), "{answer}");
    assert_eq!(
        env.count("SELECT count(*) FROM idem.dead_letter WHERE handler = 'billing' AND record_key = 'customer-worse'")
            .await,
        2
    );
    assert_eq!(key_state(&env, WORSE).await, None, "the key is let go");
    let (status, _) = post(&admin_a, "/handlers/billing/quarantine/release", json!({ "key": WORSE })).await;
    assert_eq!(status, 404, "a key not parked is not released");

    // customer-bad released with the CLI: its seven orders are charged
    // once each, in their original order.
    let fai = "SELECT count(*) FROM billing.charge WHERE currency = 'FAI'";
    assert_eq!(env.count(fai).await, 0, "nothing of a parked key ran");
    let mark = env.provider.seen().len();
    let released = idem(&[
        "quarantine",
        "--handler",
        "billing",
        "--release",
        BAD,
        "--reason",
        "provider fixed",
        "--url",
        &admin_a,
    ]);
    assert!(released.contains("released key"), "{released}");
    env.charged(43, Duration::from_secs(60)).await;
    wait_until_async("the released key is let go", || async { key_state(&env, BAD).await.is_none() }).await;
    assert_eq!(charged_fai(&env, mark), [5, 12, 19, 26, 33, 41, 42], "run in their order, each once");
    assert_eq!(env.count("SELECT count(DISTINCT order_id) FROM billing.charge WHERE currency = 'FAI'").await, 7);

    // The key runs the normal way again.
    send(&env, 47..=47, &[47], &[]).await;
    env.charged(44, Duration::from_secs(60)).await;
    assert_eq!(parked(&env, BAD).await, 0);

    // Both actions in the audit trail, with their actor.
    let audited: Vec<(String, String)> = sqlx::query_as(
        "SELECT action, actor FROM idem.audit WHERE handler = 'billing' AND action LIKE '%quarantine%' ORDER BY id",
    )
    .fetch_all(&env.db.pool)
    .await
    .expect("audit");
    assert!(
        audited.len() >= 3
            && audited.iter().any(|(a, _)| a.contains("dead-letter"))
            && audited.iter().any(|(a, _)| a.contains("release")),
        "{audited:?}"
    );
    // The handler's own role reaches none of the operators' tables: it can
    // neither read nor change the trail, the quarantine, the pauses,
    // rewinds or rates.
    let guest = env.db.handler_pool("billing", "billing").await;
    for table in ["idem.audit", "idem.parked_key", "idem.parked_event", "idem.throttle", "idem.pause", "idem.rewind"] {
        for sql in [
            format!("SELECT 1 FROM {table} LIMIT 1"),
            format!("DELETE FROM {table}"),
            format!("INSERT INTO {table} DEFAULT VALUES"),
            format!("UPDATE {table} SET handler = handler"),
        ] {
            let refused = sqlx::query(&sql).execute(&guest).await;
            assert!(refused.as_ref().is_err_and(|e| e.to_string().contains("permission denied")), "{sql}: {refused:?}");
        }
    }
    guest.close().await;
    host::signal(&host_a, "TERM");
    let _ = host::wait_report(host_a);
    env.finish().await;
}

/// A metric's value in `/metrics` at `admin`.
async fn metric(admin: &str, line: &str) -> Option<f64> {
    let metrics = get(admin, "/metrics").await.unwrap_or_default();
    metrics.lines().find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
}

/// Under `ordering = "none"` too: a key whose events exhaust their
/// attempts is parked while every other event drains and every offset is
/// committed; the age of the oldest parked event is shown; a release
/// charges each of the key's events once.
#[tokio::test(flavor = "multi_thread")]
async fn under_ordering_none_a_failing_key_is_parked_while_the_rest_drains_and_its_age_is_shown() {
    let env = Env::new(2).await;
    env.provider.fail_marked(true);
    let mut spec = env.billing().with_lanes("none", 4);
    spec.max_attempts = 2;
    spec.extra.push_str("failure = { on_exhausted = \"quarantine\" }\n");
    let group = spec.group_id.clone();
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let admin = host::admin_url(&config);
    let running = host::InProcess::start(&config);
    let bad = [3, 9, 14, 22];
    send(&env, 1..=30, &bad, &[]).await;
    env.charged(26, Duration::from_secs(90)).await;
    wait_until_async("the failing key held, its four events parked", || async {
        parked(&env, BAD).await == 4 && key_state(&env, BAD).await.as_deref() == Some("held")
    })
    .await;
    wait_until_async("every offset committed", || all_committed(&env, &group)).await;
    assert_eq!(env.count(CHARGES).await, 26, "the others drained; nothing of the failing key applied");
    let mut parked_ids = parked_orders_as(&env, BAD, false).await;
    parked_ids.sort_unstable();
    assert_eq!(parked_ids, bad);
    // Counted every 5 s: within two counts it shows an age of seconds.
    wait_until_async("the oldest parked event's age shown", || async {
        metric(&admin, "idem_quarantine_oldest_seconds{handler=\"billing\"}").await.is_some_and(|s| s >= 2.0)
    })
    .await;
    assert_eq!(metric(&admin, "idem_quarantined_events{handler=\"billing\"}").await, Some(4.0));

    env.provider.fail_marked(false);
    let mark = env.provider.seen().len();
    let (status, answer) =
        post(&admin, "/handlers/billing/quarantine/release", json!({ "key": BAD, "events": 4 })).await;
    assert_eq!(status, 200, "{answer}");
    env.charged(30, Duration::from_secs(60)).await;
    let mut charged = charged_fai(&env, mark);
    charged.sort_unstable();
    assert_eq!(charged, bad, "each of the key's events charged once");
    wait_until_async("the key let go", || async { key_state(&env, BAD).await.is_none() }).await;
    wait_until_async("no age once nothing is parked", || async {
        metric(&admin, "idem_quarantine_oldest_seconds{handler=\"billing\"}").await == Some(0.0)
    })
    .await;
    running.stop().await;
    env.finish().await;
}
