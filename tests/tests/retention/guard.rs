//! The claim with its windows: duplicates stay duplicates whatever window
//! or delay, and events outside the dedup window meet their policy.

use std::time::Duration;

use idem::config::StalePolicy;
use idem::{ErrorClass, ExecError, Outcome};
use sqlx::Executor as _;

use super::*;

#[tokio::test]
async fn the_seeds_partitioned_table_lets_a_duplicate_through_and_ours_does_not() {
    let s = Setup::new().await;
    // The seed's variant 1 (R-KFK-IDEM-2): keyed on (event_id, processed_at),
    // partitioned on processed_at, with the partition holding today.
    s.db.pool
        .execute(
            "CREATE SCHEMA seed; \
             CREATE TABLE seed.processed_event (event_id uuid NOT NULL, consumer_group text NOT NULL, \
                 processed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (event_id, processed_at)) \
                 PARTITION BY RANGE (processed_at); \
             CREATE TABLE seed.processed_event_now PARTITION OF seed.processed_event \
                 FOR VALUES FROM (now() - interval '1 day') TO (now() + interval '1 day')",
        )
        .await
        .expect("the seed's table");
    let scenarios = s.scenarios(|_| {});
    let event = scenario_at(s.now_ms().await, "ok");
    let (mut seed_first_times, mut ours) = (0, Vec::new());
    // The same event delivered twice, a second apart (a rebalance).
    for delivery in 0..2 {
        if delivery > 0 {
            tokio::time::sleep(Duration::from_millis(1_100)).await;
        }
        // The seed's orIgnore(): a row inserted means "first time, process it".
        seed_first_times += sqlx::query(
            "INSERT INTO seed.processed_event (event_id, consumer_group) VALUES ($1, 'billing') ON CONFLICT DO NOTHING",
        )
        .bind(event.id)
        .execute(&s.db.pool)
        .await
        .expect("seed insert")
        .rows_affected();
        ours.push(scenarios.execute(&event, 1).await.expect("execute"));
    }
    assert_eq!(seed_first_times, 2, "the seed's key took the redelivery for a first delivery");
    assert_eq!(ours, [Outcome::Processed, Outcome::Duplicate]);
    assert_eq!(s.count(EFFECTS).await, 1);
    s.finish().await;
}

#[tokio::test]
async fn duplicates_on_both_sides_of_a_window_boundary_are_caught() {
    let s = Setup::new().await;
    let scenarios = s.scenarios(|_| {});
    let midnight = s.now_ms().await.div_euclid(DAY_MS) * DAY_MS;
    let before = scenario_at(midnight - 1, "ok");
    let after = scenario_at(midnight, "ok");
    for event in [&before, &after] {
        assert_eq!(scenarios.execute(event, 1).await.expect("first"), Outcome::Processed);
    }
    // Redelivered later, in the other order, and as one batch.
    for event in [&after, &before] {
        assert_eq!(scenarios.execute(event, 1).await.expect("again"), Outcome::Duplicate);
    }
    let batch = scenarios.execute_batch(&[before.clone(), after.clone()], |_| false).await.expect("batch");
    assert_eq!(batch, [Outcome::Duplicate, Outcome::Duplicate]);
    assert_eq!(s.count(EFFECTS).await, 2);
    // Each row is in the window of its id's day.
    for (event, ms) in [(&before, midnight - 1), (&after, midnight)] {
        let table: String =
            sqlx::query_scalar("SELECT tableoid::regclass::text FROM idem.processed_event WHERE event_id = $1")
                .bind(event.id)
                .fetch_one(&s.db.pool)
                .await
                .expect("row");
        assert_eq!(table, format!("idem.processed_event_p{}", day(ms).format("%Y%m%d")));
    }
    s.finish().await;
}

#[tokio::test]
async fn an_event_older_than_the_retention_meets_its_policy() {
    let s = Setup::new().await;
    s.record("scenarios", "1 hour").await;
    let now = s.now_ms().await;
    let dlq = s.scenarios(|_| {});
    let skip = s.scenarios(|h| h.stale_events = StalePolicy::Skip);
    let process = s.scenarios(|h| h.stale_events = StalePolicy::Process);

    // Two hours old: its window exists, its row (if it had one) would too,
    // but the guard goes by the recorded retention.
    let old = scenario_at(now - 2 * 3_600_000, "ok");
    let refused = dlq.execute(&old, 1).await.expect_err("stale under dlq");
    assert!(matches!(refused, ExecError::StaleEvent(_)), "{refused:?}");
    assert_eq!(refused.class(), ErrorClass::Permanent);
    assert!(refused.to_string().contains("older than dedup retention"), "{refused}");
    assert_eq!(skip.execute(&old, 1).await.expect("skip"), Outcome::Skipped);
    assert_eq!(s.count(EFFECTS).await, 0);
    assert_eq!(s.count("SELECT count(*) FROM idem.processed_event").await, 0, "nothing claimed");

    // "process" claims it where its window exists: from then on it is a
    // duplicate for every policy.
    assert_eq!(process.execute(&old, 1).await.expect("process"), Outcome::Processed);
    assert_eq!(dlq.execute(&old, 1).await.expect("known"), Outcome::Duplicate);
    assert_eq!(process.execute(&old, 1).await.expect("known"), Outcome::Duplicate);
    assert_eq!(s.count(EFFECTS).await, 1);

    // Twenty days old: no window. "process" runs it with no dedup row.
    let ancient = scenario_at(now - 20 * DAY_MS, "ok");
    assert!(matches!(dlq.execute(&ancient, 1).await, Err(ExecError::StaleEvent(_))));
    assert_eq!(process.execute(&ancient, 1).await.expect("unguarded"), Outcome::Processed);
    assert_eq!(s.count(EFFECTS).await, 2);
    let rows = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM idem.processed_event WHERE event_id = $1")
        .bind(ancient.id)
        .fetch_one(&s.db.pool)
        .await
        .expect("count");
    assert_eq!(rows, 0);

    // In a batch: the stale one is skipped in place, or fails alone.
    let fresh = scenario_at(now, "ok");
    let stale = scenario_at(now - 3 * 3_600_000, "ok");
    let outcomes = skip.execute_batch(&[fresh.clone(), stale.clone()], |_| false).await.expect("batch");
    assert_eq!(outcomes, [Outcome::Processed, Outcome::Skipped]);
    let fresh2 = scenario_at(now, "ok");
    let failure = dlq.execute_batch(&[fresh2, stale], |_| false).await.expect_err("stale in the batch");
    assert!(
        matches!(failure, idem::executor::BatchFailure::At { index: 1, own: Some(ExecError::StaleEvent(_)) }),
        "{failure:?}"
    );
    s.finish().await;
}

#[tokio::test]
async fn an_event_id_too_far_in_the_future_is_refused() {
    let s = Setup::new().await;
    let now = s.now_ms().await;
    // The skew limit is 1 hour (recorded by default).
    let dlq = s.scenarios(|_| {});
    let skip = s.scenarios(|h| h.stale_events = StalePolicy::Skip);
    let process = s.scenarios(|h| h.stale_events = StalePolicy::Process);
    let soon = scenario_at(now + 30 * 60_000, "ok");
    assert_eq!(dlq.execute(&soon, 1).await.expect("inside the skew"), Outcome::Processed);
    let far = scenario_at(now + 2 * 3_600_000, "ok");
    let refused = dlq.execute(&far, 1).await.expect_err("beyond the skew");
    assert!(matches!(refused, ExecError::FutureEvent(_)), "{refused:?}");
    assert_eq!(refused.class(), ErrorClass::Permanent);
    // Never processed, so never skipped (it would be lost) nor run.
    assert!(matches!(process.execute(&far, 1).await, Err(ExecError::FutureEvent(_))), "process never runs one");
    assert!(matches!(skip.execute(&far, 1).await, Err(ExecError::FutureEvent(_))), "skip never drops one");
    // Years ahead, past every window.
    let absurd = scenario_at(now + 3_650 * DAY_MS, "ok");
    assert!(matches!(dlq.execute(&absurd, 1).await, Err(ExecError::FutureEvent(_))));
    assert_eq!(s.count(EFFECTS).await, 1);
    s.finish().await;
}

#[tokio::test]
async fn an_event_whose_window_was_not_created_waits_for_maintenance() {
    let s = Setup::new().await;
    s.record("scenarios", "30 days").await;
    let now = s.now_ms().await;
    let scenarios = s.scenarios(|_| {});
    // Inside the retention, but older than the windows the migration made.
    let late = scenario_at(now - 20 * DAY_MS, "ok");
    let waiting = scenarios.execute(&late, 1).await.expect_err("no window");
    assert_eq!(waiting.class(), ErrorClass::Unavailable, "{waiting}");
    assert!(waiting.to_string().contains("does not exist"), "{waiting}");
    // A pass creates every window the longest retention needs.
    let report = s.pass(settings()).await;
    assert!(report.created.contains(&day(now - 20 * DAY_MS)), "{report:?}");
    assert_eq!(scenarios.execute(&late, 1).await.expect("now"), Outcome::Processed);
    assert_eq!(scenarios.execute(&late, 1).await.expect("again"), Outcome::Duplicate);
    s.finish().await;
}

/// An event run without a dedup row (`stale_events = "process"`, its
/// window gone) may not emit: nothing could name it as the cause of what it
/// published, and a redelivery would publish again. The guest is told; the
/// event itself commits, and the handler goes on.
#[tokio::test]
async fn an_event_run_without_a_dedup_row_may_not_emit() {
    let s = Setup::new().await;
    s.record("scenarios", "1 hour").await;
    let now = s.now_ms().await;
    let schema = json!({ "type": "object" });
    let types = ["test.emitted.v1".to_owned()];
    let policy = idem::EmitPolicy::new([("out", &types[..], &schema)]).expect("policy");
    let process = s.scenarios(|h| {
        h.stale_events = StalePolicy::Process;
        h.caps.emit.policy = std::sync::Arc::new(policy);
    });
    s.db.pool
        .execute("INSERT INTO idem.outbox_topic (producer, topic, event_types) VALUES ('scenarios', 'out', '{test.emitted.v1}')")
        .await
        .expect("the topic, as idem migrate --config records it");
    // The host's start-up check of the database, which reads the key the
    // host vouches for its emits with (`outbox::write`).
    idem::migrate::check(&s.db.pool).await.expect("the database checked");
    let emits = json!([{ "topic": "out", "key": "k", "event_type": "test.emitted.v1", "payload": { "amount": 1 } }]);
    let emitting = |ms: i64| {
        idem_tests::event(
            v7_at(ms),
            json!({ "eventType": "test.scenario.v1", "scenario": "emit", "emits": emits }),
            "scenarios",
            0,
        )
    };
    let ancient = emitting(now - 20 * DAY_MS);
    assert_eq!(process.execute(&ancient, 1).await.expect("unguarded"), Outcome::Processed);
    let notes: Vec<String> =
        sqlx::query_scalar("SELECT note FROM scenario.effect WHERE event_id = $1 AND note <> 'start'")
            .bind(ancient.id)
            .fetch_all(&s.db.pool)
            .await
            .expect("notes");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].starts_with("refused 0 emit refused: this event runs without a dedup row"), "{notes:?}");
    // A fresh event of the same handler emits as usual.
    let fresh = emitting(now);
    assert_eq!(process.execute(&fresh, 1).await.expect("fresh"), Outcome::Processed);
    assert_eq!(s.count("SELECT count(*) FROM idem.outbox").await, 1, "only the fresh event's");
    s.finish().await;
}
