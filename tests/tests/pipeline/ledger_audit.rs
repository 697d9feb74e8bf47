//! The ledger audit (issue 44, `[handler.audit]`): on a healthy run every
//! record below the committed offset is accounted for (applied, a
//! redelivered duplicate, dead-lettered), and what came before a group
//! that started at `latest` is not its own; a dedup row deleted by hand, and
//! records skipped by an offset commit forged past them, are found and
//! counted as unaccounted within a sweep or two, as is a dedup row naming
//! a module version that never ran live; an emitted row left unpublished
//! is counted apart.

use std::time::{Duration, Instant};

use idem_tests::host::{self, order_payload};
use idem_tests::{kafka, wait_until_async};

use crate::operate::get;
use crate::{CHARGES, Env};

const CHECKED: &str = "idem_audit_checked_records_total{handler=\"billing\"}";
const UNACCOUNTED: &str = "idem_audit_unaccounted_total{handler=\"billing\"}";
const CLEAN_AT: &str = "idem_audit_clean_at_seconds{handler=\"billing\"}";

async fn metric(admin: &str, line: &str) -> f64 {
    let metrics = get(admin, "/metrics").await.unwrap_or_default();
    metrics.lines().find_map(|l| l.strip_prefix(line)?.trim().parse().ok()).unwrap_or(-1.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ledger_audit_accounts_for_every_record_and_finds_a_lost_dedup_row_and_a_forged_commit() {
    let env = Env::new(2).await;
    let mut spec = env.billing();
    // A group that starts at the end: what came before it is not its own.
    spec.extra.push_str("audit = { every = \"1s\" }\nauto_offset_reset = \"latest\"\n");
    let before: Vec<(i32, Vec<u8>)> = (30_001..=30_020).map(|i| ((i % 2) as i32, order_payload(i).1)).collect();
    kafka::produce_all(&env.producer, &env.topic, &before).await;
    let group = spec.group_id.clone();
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let admin = host::admin_url(&config);
    let running = host::spawn(&config, false, &[]);
    wait_until_async("the host joined its group", || async {
        reqwest::get(format!("{admin}/readyz")).await.is_ok_and(|r| r.status() == 200)
    })
    .await;
    // (Its partitions' positions resolved to their ends.)
    tokio::time::sleep(Duration::from_secs(3)).await;

    // 10,000 orders, a tenth of them redelivered, and five records that
    // are no event (dead-lettered).
    let sent = env.send_orders(10_000).await;
    let again: Vec<(i32, Vec<u8>)> = sent.iter().step_by(10).map(|p| (1, p.clone())).collect();
    kafka::produce_all(&env.producer, &env.topic, &again).await;
    for _ in 0..5 {
        env.send(0, b"not an event").await;
    }
    env.charged(10_000, Duration::from_secs(180)).await;
    let records = 10_000.0 + again.len() as f64 + 5.0;
    wait_until_async("a clean sweep over every record", || async {
        metric(&admin, CHECKED).await >= records && metric(&admin, CLEAN_AT).await > 0.0
    })
    .await;
    assert_eq!(metric(&admin, UNACCOUNTED).await, 0.0, "a healthy run: nothing unaccounted");

    // A dedup row deleted by hand (an order not redelivered): found
    // within a sweep or two.
    let order: serde_json::Value = serde_json::from_slice(&sent[1]).expect("json");
    let event_id = order["eventId"].as_str().expect("an event id");
    let deleted = env
        .count(&format!(
            "WITH gone AS (DELETE FROM idem.processed_event WHERE consumer = 'billing' AND event_id = '{event_id}' \
             RETURNING 1) SELECT count(*) FROM gone"
        ))
        .await;
    assert_eq!(deleted, 1);
    let since = Instant::now();
    wait_until_async("the lost dedup row found", || async { metric(&admin, UNACCOUNTED).await == 1.0 }).await;
    assert!(since.elapsed() < Duration::from_secs(20), "found in {:?}", since.elapsed());
    let status = std::process::Command::new(idem_tests::idem_bin())
        .args(["status", "--once", "--url", &admin])
        .output()
        .expect("idem status");
    let shown = String::from_utf8_lossy(&status.stdout);
    assert!(shown.contains("ledger audit: 1 record(s) UNACCOUNTED"), "{shown}");
    // And the API says the same.
    let text = crate::operate::get(&admin, "/handlers/billing/audit").await.unwrap_or_default();
    let figures: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!((figures["unaccounted"].as_i64(), figures["enabled"].as_bool()), (Some(1), Some(true)), "{figures}");
    assert!(figures["checked"].as_i64() >= Some(records as i64) && figures["clean_at"].as_i64() > Some(0), "{figures}");
    // A dedup row naming a module version the store never held (as a
    // forged or misattributed row would): found too.
    let other: serde_json::Value = serde_json::from_slice(&sent[3]).expect("json");
    let forged = env
        .count(&format!(
            "WITH f AS (UPDATE idem.processed_event SET module_version = 99 WHERE consumer = 'billing' \
             AND event_id = '{}' RETURNING 1) SELECT count(*) FROM f",
            other["eventId"].as_str().expect("an event id")
        ))
        .await;
    assert_eq!(forged, 1);
    wait_until_async("the row of a version never run found", || async { metric(&admin, UNACCOUNTED).await == 2.0 })
        .await;
    // SIGUSR1: the host leaves its group (so the group takes a commit from outside).
    host::signal(&running, "USR1");
    let _ = tokio::task::spawn_blocking(move || host::wait_report(running)).await;

    // Three orders that no host ran, their offsets committed past by hand.
    let skipped: Vec<(i32, Vec<u8>)> = (20_001..=20_003).map(|i| (0, order_payload(i).1)).collect();
    kafka::produce_all(&env.producer, &env.topic, &skipped).await;
    let end = kafka::high_watermarks(&env.topic, 2)[0];
    kafka::commit(&group, &env.topic, 0, end);
    let running = host::spawn(&config, false, &[]);
    wait_until_async("the forged commit's records found, and the two rows again", || async {
        metric(&admin, UNACCOUNTED).await == 5.0
    })
    .await;
    assert_eq!(env.count(CHARGES).await, 10_000, "the skipped orders were never charged");
    host::signal(&running, "TERM");
    let _ = tokio::task::spawn_blocking(move || host::wait_report(running)).await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ledger_audit_finds_an_emitted_row_left_unpublished() {
    let env = Env::new(1).await;
    let requests = kafka::create_topic(1).await;
    let mut spec = idem_tests::host::HandlerSpec::billing_announcing(&env.topic, &env.provider.base_url(), &requests);
    spec.extra.push_str("audit = { every = \"1s\" }\n");
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    env.db.allow_emits(&config).await;
    let admin = host::admin_url(&config);
    let running = host::spawn(&config, false, &[]);
    env.send_orders(20).await;
    env.charged(20, Duration::from_secs(60)).await;
    wait_until_async("every row published and a clean sweep", || async {
        env.count("SELECT count(*) FROM idem.outbox WHERE published_at IS NULL").await == 0
            && metric(&admin, CLEAN_AT).await > 0.0
    })
    .await;
    let unpublished = "idem_audit_unpublished{handler=\"billing\"}";
    assert_eq!(metric(&admin, unpublished).await, 0.0, "a healthy run: every emitted row published");
    // One row marked failed and never published (the relay leaves a
    // failed row to an operator's redrive).
    let failed = env
        .count(
            "WITH f AS (UPDATE idem.outbox SET published_at = NULL, failed_at = now(), failure = 'forged' \
             WHERE id = (SELECT min(id) FROM idem.outbox WHERE producer = 'billing') RETURNING 1) SELECT count(*) FROM f",
        )
        .await;
    assert_eq!(failed, 1);
    wait_until_async("the unpublished row found", || async { metric(&admin, unpublished).await == 1.0 }).await;
    let text = get(&admin, "/handlers/billing/audit").await.unwrap_or_default();
    let figures: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(figures["unpublished"], 1, "{figures}");
    let status = std::process::Command::new(idem_tests::idem_bin())
        .args(["status", "--once", "--url", &admin])
        .output()
        .expect("idem status");
    let shown = String::from_utf8_lossy(&status.stdout);
    assert!(shown.contains("1 emitted row(s) UNPUBLISHED 10 minutes after their commit"), "{shown}");
    host::signal(&running, "TERM");
    let _ = tokio::task::spawn_blocking(move || host::wait_report(running)).await;
    env.finish().await;
}
