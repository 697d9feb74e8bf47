//! Operators' rewinds (issue 42): a handler's group sent back an hour on
//! two hosts, none stopped. The dry run counts the window exactly against
//! the dedup ledger; a window reaching past the dedup retention is refused
//! without force; the rewind is applied by each partition's owner; only
//! what had not taken effect runs again, and the report says which events
//! were duplicates and which were applied anew.

use std::time::Duration;

use idem_tests::host::{self, order_payload_with};
use idem_tests::{kafka, v7_at, wait_until_async};
use serde_json::{Value, json};

use crate::operate::{get, named, owners, post};
use crate::{CHARGES, DISTINCT_ORDERS, Env};

const HOUR_MS: i64 = 3_600_000;

/// Orders `from..=to`, order `i` on partition `i % 4`, its record and its
/// event both made at `at(i)` (ms since the epoch); their event ids.
async fn send_at(env: &Env, from: i64, to: i64, at: impl Fn(i64) -> i64) -> Vec<uuid::Uuid> {
    let mut ids = Vec::new();
    for i in from..=to {
        let (id, payload) = order_payload_with(i, v7_at(at(i)));
        let key = format!("customer-{}", i % 50);
        kafka::produce_at(&env.producer, &env.topic, (i % 4) as i32, &key, &payload, at(i)).await;
        ids.push(id);
    }
    ids
}

/// The sum of `key` over a rewind's per-partition counts.
fn sum(counts: &Value, key: &str) -> u64 {
    counts.as_array().map_or(0, |all| all.iter().map(|c| c[key].as_u64().unwrap_or(0)).sum())
}

async fn report(admin: &str, id: i64) -> Value {
    let text = get(admin, &format!("/handlers/billing/rewinds/{id}")).await.unwrap_or_default();
    serde_json::from_str(&text).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rewind_an_hour_back_on_two_hosts_runs_again_only_what_had_not_taken_effect() {
    let env = Env::new(4).await;
    let mut spec = env.billing();
    // Events two hours old are past this retention (and still processed).
    spec.extra.push_str("dedup_retention = \"90m\"\nstale_events = \"process\"\n");
    // Dedup windows are UTC days kept for the longest retention recorded:
    // with 90 minutes alone, yesterday's window is gone from 01:30 UTC on
    // and the two-hour-old events would run with no dedup row (so never
    // count as applied) at some hours and not others. Another consumer's
    // day-long retention keeps yesterday's window whatever the hour.
    env.db
        .execute(
            "INSERT INTO idem.consumer_retention (consumer, retention, future_skew, recorded_by) \
             VALUES ('archive', interval '1 day', interval '1 hour', 'the rewind test')",
        )
        .await;
    let a = named(&host::write_config(&env.db.url, std::slice::from_ref(&spec)), "rewind-a");
    let b = named(&host::write_config(&env.db.url, std::slice::from_ref(&spec)), "rewind-b");
    let admin = host::admin_url(&a);
    let host_a = host::InProcess::start(&a);
    let host_b = host::InProcess::start(&b);
    wait_until_async("hosts A and B share the partitions", || async {
        let owners = owners(&admin).await;
        owners.len() == 4 && owners.iter().any(|o| o == "rewind-a") && owners.iter().any(|o| o == "rewind-b")
    })
    .await;
    let now = chrono::Utc::now().timestamp_millis();
    // Orders 1 to 40 two hours back; 41 to 100 from an hour back, 10 s apart.
    send_at(&env, 1, 40, |i| now - 2 * HOUR_MS + i * 1_000).await;
    let recent = send_at(&env, 41, 100, |i| now - HOUR_MS + (i - 40) * 10_000).await;
    env.charged(100, Duration::from_secs(60)).await;
    // A restore from a backup lost orders 50 and 51: their charges and
    // dedup rows are gone, the group's offsets are past them.
    env.db.execute("DELETE FROM billing.charge WHERE order_id IN (50, 51)").await;
    let skipped = format!("'{}', '{}'", recent[9], recent[10]);
    env.db
        .execute(&format!("DELETE FROM idem.processed_event WHERE consumer = 'billing' AND event_id IN ({skipped})"))
        .await;
    let hour_ago = chrono::DateTime::from_timestamp_millis(now - HOUR_MS).expect("a time").to_rfc3339();

    // Refusals name what is wrong; none asks anything.
    for (body, code, said) in [
        (json!({ "to": "yesterday" }), 400, "not a target"),
        (json!({ "to": "earliest", "partition": 9 }), 404, "no partition 9"),
        (json!({ "to": "999999", "partition": 0 }), 409, "never forward"),
        (json!({ "to": "earliest" }), 409, "dedup_retention (90m)"),
    ] {
        let (status, answer) = post(&admin, "/handlers/billing/rewind", body).await;
        assert_eq!(status, code, "{answer}");
        assert!(answer["error"].as_str().is_some_and(|e| e.contains(said)), "`{said}` in {answer}");
    }

    // The dry runs count exactly: an hour back, 60 records, 58 applied, 2
    // to run; from the earliest, 40 events past the retention.
    let (status, dry) = post(&admin, "/handlers/billing/rewind", json!({ "to": hour_ago, "dry_run": true })).await;
    assert_eq!((status, &dry["id"]), (200, &Value::Null), "{dry}");
    let counted = |c: &Value| {
        ["records", "applied_before", "not_applied", "past_retention", "invalid"].map(|k| sum(&c["partitions"], k))
    };
    assert_eq!(counted(&dry), [60, 58, 2, 0, 0], "{dry}");
    let (status, far) = post(&admin, "/handlers/billing/rewind", json!({ "to": "earliest", "dry_run": true })).await;
    assert_eq!(status, 200, "{far}");
    assert_eq!(counted(&far), [100, 98, 2, 40, 0], "{far}");
    let listed: Value =
        serde_json::from_str(&get(&admin, "/handlers/billing/rewinds").await.unwrap_or_default()).unwrap_or_default();
    assert_eq!(listed["rewinds"], json!([]), "dry runs and refusals ask nothing");

    // The CLI's dry run shows the same counts, per partition.
    let dry = std::process::Command::new(idem_tests::idem_bin())
        .args(["rewind", "--handler", "billing", "--to", "earliest", "--dry-run", "--json", "--url", &admin])
        .output()
        .expect("idem rewind --dry-run");
    let shown: Value = serde_json::from_slice(&dry.stdout).unwrap_or_default();
    assert_eq!(counted(&shown), [100, 98, 2, 40, 0], "{shown} {}", String::from_utf8_lossy(&dry.stderr));
    let table = std::process::Command::new(idem_tests::idem_bin())
        .args(["rewind", "--handler", "billing", "--to", &hour_ago, "--dry-run", "--url", &admin])
        .output()
        .expect("idem rewind --dry-run");
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("60 record(s) in the window, 58 of them applied already"), "{table}");
    assert_eq!(
        table.lines().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())).count(),
        4,
        "{table}"
    );

    // The rewind: every partition's owner applies it, both hosts.
    let requests_before = env.provider.seen().len();
    let body = json!({ "to": hour_ago, "reason": "restored from a backup" });
    let (status, asked) = post(&admin, "/handlers/billing/rewind", body).await;
    assert_eq!(status, 200, "{asked}");
    let id = asked["id"].as_i64().expect("the rewind's id");
    wait_until_async("every partition rewound and its window run", || async {
        let r = report(&admin, id).await;
        let parts = r["rewind"]["partitions"].as_array().cloned().unwrap_or_default();
        parts.len() == 4 && parts.iter().all(|p| !p["applied_at"].is_null()) && sum(&r["report"], "not_applied") == 0
    })
    .await;
    let r = report(&admin, id).await;
    let by: std::collections::BTreeSet<&str> =
        r["rewind"]["partitions"].as_array().into_iter().flatten().filter_map(|p| p["applied_by"].as_str()).collect();
    assert_eq!(by.into_iter().collect::<Vec<_>>(), ["rewind-a", "rewind-b"], "{r}");
    let reported = ["records", "applied_before", "applied_since", "not_applied"].map(|k| sum(&r["report"], k));
    assert_eq!(reported, [60, 58, 2, 0], "58 duplicates, the 2 lost orders applied anew: {r}");
    env.charged(100, Duration::from_secs(30)).await;
    assert_eq!(env.count(CHARGES).await, 100, "each order charged once");
    assert_eq!(env.count(DISTINCT_ORDERS).await, 100);
    assert_eq!(env.provider.seen().len() - requests_before, 2, "only the 2 lost orders reached the provider again");

    // Past the retention with force: the risk is named in the answer, and
    // every record of the topic is in the window.
    let requests_before = env.provider.seen().len();
    let body = json!({ "to": "earliest", "force": true, "reason": "reconcile everything" });
    let (status, forced) = post(&admin, "/handlers/billing/rewind", body).await;
    assert_eq!(status, 200, "{forced}");
    assert!(forced["message"].as_str().is_some_and(|m| m.contains("dedup_retention")), "{forced}");
    let forced = forced["id"].as_i64().expect("the forced rewind's id");
    wait_until_async("the forced rewind applied and run", || async {
        let r = report(&admin, forced).await;
        let parts = r["rewind"]["partitions"].as_array().cloned().unwrap_or_default();
        parts.len() == 4 && parts.iter().all(|p| !p["applied_at"].is_null()) && sum(&r["report"], "not_applied") == 0
    })
    .await;
    let r = report(&admin, forced).await;
    let reported = ["records", "applied_before", "applied_since"].map(|k| sum(&r["report"], k));
    assert_eq!((reported[0], reported[1] + reported[2]), (100, 100), "every record accounted for: {r}");
    assert_eq!(
        (env.provider.seen().len() - requests_before) as u64,
        reported[2],
        "only what the report says was applied anew reached the provider: {r}"
    );

    // The trail names it and its actor; the CLI shows the report.
    let trail = get(&admin, "/audit?handler=billing").await.unwrap_or_default();
    assert!(trail.contains("/handlers/billing/rewind") && trail.contains("restored from a backup"), "{trail}");
    let shown = std::process::Command::new(idem_tests::idem_bin())
        .args(["rewind", "--handler", "billing", "--report", &id.to_string(), "--url", &admin])
        .output()
        .expect("idem rewind --report");
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("4 of 4 partition(s) rewound") && text.contains("applied anew"), "{text}");
    host_a.stop().await;
    host_b.stop().await;
    env.finish().await;
}
