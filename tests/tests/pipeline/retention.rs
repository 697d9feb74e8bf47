//! The stale-event guard in `idem run` and `idem dlq replay`: an event older
//! than its handler's dedup retention is never processed blindly.

use idem::pipeline::dlq_headers as h;
use idem::pipeline::replay::header;
use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;

use crate::Env;
use crate::failures::idem_json;

const EFFECTS: &str = "SELECT count(*) FROM scenario.effect";

/// A scenario event whose id was created `age_ms` ago.
fn scenario_created(age_ms: i64) -> (uuid::Uuid, Vec<u8>) {
    let id = idem_tests::v7_at(chrono::Utc::now().timestamp_millis() - age_ms);
    let payload = serde_json::json!({
        "eventId": id.to_string(), "eventType": "test.scenario.v1",
        "occurredAt": "2026-11-30T12:00:00Z", "scenario": "ok",
    });
    (id, payload.to_string().into_bytes())
}

const HOURS: i64 = 3_600_000;

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_event_is_dead_lettered_and_replayed_only_with_force() {
    let env = Env::new(1).await;
    // Another consumer of the database keeps 7 days: no window goes. With
    // only this handler's 1 h, yesterday's window (the 3-hour-old event's,
    // from midnight to 3 a.m. UTC) would be dropped by the pass at start-up,
    // and the forced replay below would run it a second time with no dedup
    // row, which is another test's case ("unguarded").
    sqlx::query(
        "INSERT INTO idem.consumer_retention (consumer, retention, future_skew, recorded_by) \
         VALUES ('another', interval '7 days', interval '1 hour', 'the test')",
    )
    .execute(&env.db.pool)
    .await
    .unwrap_or_else(|e| panic!("another retention: {e}"));
    let mut spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    spec.extra = "dedup_retention = \"1h\"\n".into();
    let (_, old) = scenario_created(3 * HOURS);
    let (_, fresh) = scenario_created(0);
    env.send(0, &old).await;
    env.send(0, &fresh).await;
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.failed, r.dead_lettered), (1, 1, 1), "{r:?}");
    assert_eq!(env.count(EFFECTS).await, 1);
    let dlq = format!("{}.scenarios.dlq", env.topic);
    let dead = kafka::read_all(&dlq);
    assert_eq!(dead.len(), 1);
    assert_eq!(header(&dead[0], h::CLASS).as_deref(), Some("permanent"));
    let reason = header(&dead[0], h::REASON).unwrap_or_default();
    assert!(reason.contains("older than dedup retention"), "{reason}");

    let path = config.to_str().expect("path");
    let refused = idem_json(&["dlq", "replay", "--config", path, "--handler", "scenarios", "--json"]);
    assert_eq!((refused["stale"].as_u64(), refused["applied"].as_u64()), (Some(1), Some(0)), "{refused}");
    assert_eq!(kafka::read_all(&dlq).len(), 1, "left in the DLQ as it was");
    assert_eq!(env.count(EFFECTS).await, 1);
    let forced = idem_json(&["dlq", "replay", "--config", path, "--handler", "scenarios", "--force", "--json"]);
    assert_eq!(forced["applied"].as_u64(), Some(1), "{forced}");
    assert_eq!(env.count(EFFECTS).await, 2);
    // Forced once, it was claimed (its window exists): never twice.
    let again = idem_json(&["dlq", "replay", "--config", path, "--handler", "scenarios", "--force", "--json"]);
    assert_eq!((again["applied"].as_u64(), again["duplicates"].as_u64()), (Some(0), Some(1)), "{again}");
    assert_eq!(env.count(EFFECTS).await, 2);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stale_events_skip_counts_stale_ones_and_dead_letters_future_ones() {
    let env = Env::new(1).await;
    let mut spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    spec.extra = "dedup_retention = \"1h\"\nstale_events = \"skip\"\n".into();
    let (_, old) = scenario_created(2 * HOURS);
    let (_, future) = scenario_created(-5 * HOURS);
    let (_, fresh) = scenario_created(0);
    for payload in [&old, &future, &fresh] {
        env.send(0, payload).await;
    }
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.skipped, r.failed, r.dead_lettered), (1, 1, 1, 1), "{r:?}");
    assert_eq!(env.count(EFFECTS).await, 1);
    let dead = kafka::read_all(&format!("{}.scenarios.dlq", env.topic));
    let reason = dead.first().and_then(|m| header(m, h::REASON)).unwrap_or_default();
    assert!(reason.contains("event id in the future"), "{reason}");
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(3)], "the offset moved past all three");
    env.finish().await;
}
