//! Batched transactions (`[handler.batch]`): many events in one transaction,
//! each isolated. A failing event rolls back alone (its claim too) and is
//! resolved before the events after it; duplicates inside a batch and
//! events shared between two partitions' batches take effect once.

use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;

use crate::Env;
use crate::failures::scenario;

/// The scenarios handler with batches of up to `max_events`, waiting long
/// enough for a queued run of records to form one batch.
fn batched(env: &Env, max_events: usize) -> HandlerSpec {
    HandlerSpec { batch: Some((max_events, 50)), ..HandlerSpec::scenarios(&env.topic, &env.provider.base_url()) }
}

/// A partition's first event of an assignment runs alone (counted for
/// crashes, see `attempts`); it goes first so that the records after it
/// meet batches.
async fn prove(env: &Env, partition: i32) {
    env.send(partition, &scenario("ok", serde_json::json!({})).1).await;
}

/// When the transaction that claimed `id` began (`processed_at` is
/// `now()`), in microseconds.
async fn began(env: &Env, id: uuid::Uuid) -> i64 {
    let sql =
        "SELECT (extract(epoch FROM processed_at) * 1000000)::bigint FROM idem.processed_event WHERE event_id = $1";
    sqlx::query_scalar(sql).bind(id).fetch_one(&env.db.pool).await.expect("processed_at")
}

async fn effects(env: &Env, id: uuid::Uuid) -> Vec<String> {
    let sql = "SELECT note FROM scenario.effect WHERE event_id = $1 ORDER BY note";
    sqlx::query_scalar(sql).bind(id).fetch_all(&env.db.pool).await.expect("effects")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_event_in_a_batch_rolls_back_alone_and_runs_again_before_the_events_after_it() {
    let env = Env::new(1).await;
    // The five events after the first (which runs alone) are queued
    // before the host starts, so they form one batch.
    prove(&env, 0).await;
    let (a, pa) = scenario("ok", serde_json::json!({}));
    let (b, pb) = scenario("ok", serde_json::json!({}));
    // Fails retryably at its first attempt, in the batch; succeeds at its
    // second, alone. Had its claim survived the rollback, the second
    // execution would have been skipped as a duplicate and the event lost.
    let (c, pc) = scenario("retry-until", serde_json::json!({ "succeed_at": 2 }));
    let (d, pd) = scenario("ok", serde_json::json!({}));
    let (e, pe) = scenario("ok", serde_json::json!({}));
    for payload in [&pa, &pb, &pc, &pd, &pe] {
        env.send(0, payload).await;
    }
    let spec = batched(&env, 5);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.duplicates, r.retries, r.failed, r.dead_lettered), (6, 0, 1, 0, 0), "{r:?}");
    assert!(r.batch_splits >= 1, "the batch was rolled back at the failing event: {r:?}");
    assert!(r.transactions < 6, "events shared transactions: {r:?}");
    for id in [a, b, c, d, e] {
        assert_eq!(effects(&env, id).await, vec!["start".to_owned()], "{id}: one effect");
    }
    let mut labels: Vec<String> = env.provider.keys().into_iter().flatten().collect();
    labels.sort();
    assert_eq!(labels, vec![format!("{c}:attempt1"), format!("{c}:attempt2")], "the guest saw attempts 1 and 2");
    // The events before it committed before it; the events after it ran
    // only once it was resolved.
    let (tb, tc, td) = (began(&env, b).await, began(&env, c).await, began(&env, d).await);
    assert!(tb < tc && tc < td, "b {tb} < c {tc} < d {td}");
    assert_eq!(began(&env, a).await, tb, "a and b committed together");
    assert_eq!(began(&env, e).await, td, "d and e committed together");
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(6)]);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_permanent_failure_in_a_batch_is_dead_lettered_and_the_others_commit_once() {
    let env = Env::new(1).await;
    prove(&env, 0).await;
    let mut ids = Vec::new();
    for i in 0..20 {
        let (id, payload) = if i == 7 {
            scenario("write-then-fail", serde_json::json!({}))
        } else {
            scenario("ok", serde_json::json!({}))
        };
        ids.push(id);
        env.send(0, &payload).await;
    }
    let spec = batched(&env, 10);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.failed, r.dead_lettered), (20, 1, 1), "{r:?}");
    assert!(r.batch_splits >= 1, "{r:?}");
    assert!(effects(&env, ids[7]).await.is_empty(), "the failed event left nothing");
    let claimed = format!("SELECT count(*) FROM idem.processed_event WHERE event_id = '{}'", ids[7]);
    assert_eq!(env.count(&claimed).await, 0, "nor its claim");
    assert_eq!(env.count("SELECT count(*) FROM scenario.effect").await, 20, "every other event once");
    assert_eq!(kafka::read_all(&format!("{}.scenarios.dlq", env.topic)).len(), 1);
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(21)]);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn duplicates_and_a_reused_id_inside_one_batch_are_told_apart() {
    let env = Env::new(1).await;
    prove(&env, 0).await;
    let (a, pa) = scenario("ok", serde_json::json!({}));
    let (b, pb) = scenario("ok", serde_json::json!({}));
    // `a` again with another payload: an id reused, not a duplicate.
    let mut reused: serde_json::Value = serde_json::from_slice(&pa).expect("json");
    reused["other"] = "payload".into();
    let reused = reused.to_string().into_bytes();
    for payload in [&pa, &pb, &pa, &pb, &reused, &pa] {
        env.send(0, payload).await;
    }
    let spec = batched(&env, 6);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.duplicates, r.failed, r.dead_lettered), (3, 3, 1, 1), "{r:?}");
    assert_eq!(effects(&env, a).await, vec!["start".to_owned()]);
    assert_eq!(effects(&env, b).await, vec!["start".to_owned()]);
    let dead = kafka::read_all(&format!("{}.scenarios.dlq", env.topic));
    assert_eq!(dead.len(), 1);
    assert_eq!(rdkafka::Message::payload(&dead[0]), Some(&reused[..]), "the reused id's record");
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(7)]);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn events_shared_by_two_partitions_concurrent_batches_take_effect_once_without_deadlock() {
    let env = Env::new(2).await;
    // The same 40 events on both partitions, in opposite orders, after 201
    // of each partition's own: two batches claiming them at once would
    // wait on each other in a cycle unless claims go in one order.
    let shared: Vec<Vec<u8>> = (0..40).map(|_| scenario("ok", serde_json::json!({})).1).collect();
    let mut records = Vec::new();
    for partition in 0..2 {
        records.push((partition, scenario("ok", serde_json::json!({})).1));
        records.extend((0..200).map(|_| (partition, scenario("ok", serde_json::json!({})).1)));
    }
    records.extend(shared.iter().map(|p| (0, p.clone())));
    records.extend(shared.iter().rev().map(|p| (1, p.clone())));
    kafka::produce_all(&env.producer, &env.topic, &records).await;
    let mut spec = batched(&env, 50);
    spec.concurrency = 2;
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.duplicates), (402 + 40, 40), "{r:?}");
    assert_eq!((r.failed, r.unavailable, r.retries), (0, 0, 0), "no deadlock, no lock timeout: {r:?}");
    assert_eq!(env.count("SELECT count(*) FROM scenario.effect").await, 442, "each event once");
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 2), vec![Some(241), Some(241)]);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_that_handles_a_unique_violation_and_a_statement_failing_mid_batch_still_work() {
    let env = Env::new(1).await;
    prove(&env, 0).await;
    let mut ids = Vec::new();
    for i in 0..30 {
        let (id, payload) = match i {
            // Handles the violation of its own insert and goes on.
            11 => scenario("unique-violation", serde_json::json!({})),
            // Its statement fails once for an infrastructure reason (admin
            // shutdown), then answers: the database failing halfway through
            // a batch.
            25 => scenario("statement", serde_json::json!({ "sql": "SELECT scenario.flaky('57P01', 1)" })),
            _ => scenario("ok", serde_json::json!({})),
        };
        ids.push(id);
        env.send(0, &payload).await;
    }
    let spec = batched(&env, 10);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.failed, r.dead_lettered, r.retries), (31, 0, 0, 0), "{r:?}");
    assert!(r.batch_splits >= 2, "{r:?}");
    assert_eq!(effects(&env, ids[11]).await, vec!["after-violation".to_owned(), "start".to_owned()]);
    assert_eq!(env.count("SELECT count(*) FROM scenario.effect WHERE note = 'start'").await, 31, "each event once");
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(31)]);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn max_events_1_is_one_transaction_per_event() {
    let env = Env::new(1).await;
    for _ in 0..10 {
        env.send(0, &scenario("ok", serde_json::json!({})).1).await;
    }
    let spec = batched(&env, 1);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.transactions, r.batch_splits), (10, 10, 0), "{r:?}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_event_that_kills_the_host_inside_a_batch_is_dead_lettered_after_max_attempts_restarts() {
    let env = Env::new(1).await;
    prove(&env, 0).await;
    // The killer is the third of a batch: a crash rolls the whole batch back,
    // so after a restart the records before it run again, and it must still
    // be counted.
    let (_, killer) = scenario("ok", serde_json::json!({ "note": "kill-the-host" }));
    let ok = || scenario("ok", serde_json::json!({})).1;
    for payload in [ok(), ok(), killer.clone(), ok(), ok()] {
        env.send(0, &payload).await;
    }
    let mut spec = batched(&env, 5);
    spec.max_attempts = 2;
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let abort = [("IDEM_TEST_ABORT_ON", "kill-the-host")];
    let mut crashes = 0;
    let report = loop {
        let (status, reports) = host::wait_report(host::spawn(&config, true, &abort));
        if status.success() {
            break reports;
        }
        crashes += 1;
        assert!(crashes <= 5, "the host keeps crashing on the same event ({crashes} times)");
    };
    // Exactly 1 + max_attempts crashes: the batch's (blamed on no event:
    // its marked range then runs one record at a time, counted), then the
    // killer's max_attempts = 2 counted executions alone; the next start
    // dead-letters it without running it (`pipeline/attempts.rs`).
    assert_eq!(crashes, 1 + spec.max_attempts, "the batch's crash, then max_attempts = 2 of the killer's alone");
    let r = &report[0];
    assert_eq!(r.dead_lettered, 1, "{r:?}");
    let dead = kafka::read_all(&format!("{}.scenarios.dlq", env.topic));
    assert_eq!(dead.len(), 1);
    assert_eq!(rdkafka::Message::payload(&dead[0]), Some(killer.as_slice()));
    assert_eq!(
        env.count("SELECT count(*) FROM scenario.effect WHERE note = 'start'").await,
        5,
        "every other event once"
    );
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(6)], "the partition flowed on");
    env.finish().await;
}

/// A crash inside a running batch, after some of its events ran their
/// statements and sent their payment requests, before COMMIT: the whole
/// batch is rolled back, and after a restart every order is charged once,
/// each repeated request carrying the same `Idempotency-Key` as before.
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_inside_a_running_batch_repeats_its_requests_with_the_same_keys_and_charges_once() {
    let env = Env::new(1).await;
    let mut payloads: Vec<Vec<u8>> = (1..=30).map(|i| host::order_payload(i).1).collect();
    // The 6th order carries the crash point; the batch it is in runs the
    // orders before it in the same transaction first.
    let mut marked: serde_json::Value = serde_json::from_slice(&payloads[5]).expect("json");
    marked["note"] = "crash-mid-batch".into();
    let marked_id = marked["eventId"].as_str().expect("id").to_owned();
    payloads[5] = marked.to_string().into_bytes();
    let records: Vec<(i32, Vec<u8>)> = payloads.into_iter().map(|p| (0, p)).collect();
    kafka::produce_all(&env.producer, &env.topic, &records).await;
    let spec = HandlerSpec { batch: Some((10, 50)), ..env.billing() };
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));

    let (status, _) = host::wait_report(host::spawn(&config, true, &[("IDEM_TEST_ABORT_AFTER", "crash-mid-batch")]));
    assert!(!status.success(), "the host died inside the batch: {status}");
    let committed: Vec<String> =
        sqlx::query_scalar("SELECT event_id::text FROM billing.charge").fetch_all(&env.db.pool).await.expect("charges");
    assert!(!committed.contains(&marked_id), "the marked order's batch did not commit");
    let sent_before: Vec<String> = env.provider.keys().into_iter().flatten().collect();
    let uncommitted: Vec<&String> = sent_before.iter().filter(|k| !committed.contains(k)).collect();
    assert!(uncommitted.contains(&&marked_id), "the marked order's request went out before the crash");
    assert!(uncommitted.len() >= 2, "orders before it in the batch had sent theirs too: {uncommitted:?}");

    let (status, reports) = host::wait_report(host::spawn(&config, true, &[]));
    assert!(status.success(), "{status}");
    assert_eq!(env.count(super::CHARGES).await, 30, "0 lost");
    assert_eq!(env.count(super::DISTINCT_ORDERS).await, 30, "0 double charges");
    assert_eq!(env.provider.charges(), 30, "one charge per order at the provider");
    let sent: Vec<String> = env.provider.keys().into_iter().flatten().collect();
    for key in &uncommitted {
        assert_eq!(sent.iter().filter(|k| k == key).count(), 2, "{key}: sent again with the same key");
    }
    assert_eq!(sent.len(), 30 + uncommitted.len(), "only the rolled-back batch's requests repeated");
    assert_eq!(reports[0].processed as usize, 30 - committed.len(), "{:?}", reports[0]);
    env.finish().await;
}

/// No subtransaction is opened in a batch (so PostgreSQL's cache of 64
/// subtransaction ids per backend is never crossed, however large the
/// batch): every row a batch writes, its claims included, carries the one
/// transaction id of the batch. A savepoint per statement or an exception
/// block per claim would give each its own.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_writes_every_row_and_claim_in_one_transaction_without_subtransactions() {
    let env = Env::new(1).await;
    prove(&env, 0).await;
    let records: Vec<(i32, Vec<u8>)> = (0..300).map(|_| (0, scenario("ok", serde_json::json!({})).1)).collect();
    kafka::produce_all(&env.producer, &env.topic, &records).await;
    let spec = batched(&env, 100);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!(r.processed, 301, "{r:?}");
    assert!(r.transactions <= 20, "the events ran in batches: {r:?}");
    let xids = |sql: &'static str| env.count(sql);
    let effects = xids("SELECT count(DISTINCT xmin::text) FROM scenario.effect").await;
    let claims = xids("SELECT count(DISTINCT xmin::text) FROM idem.processed_event").await;
    assert_eq!(effects, r.transactions as i64, "one transaction id per batch for the handler's rows: {r:?}");
    assert_eq!(claims, r.transactions as i64, "and for the claims: {r:?}");
    env.finish().await;
}
