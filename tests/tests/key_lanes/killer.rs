//! An event that kills the host every time it runs, inside a key-lane
//! batch: found, counted and dead-lettered, while everything else of its
//! batch, its lane and the other lanes takes effect once, and what follows
//! it in its lane waits for it.

use std::collections::HashSet;

use idem::pipeline::dlq_headers as h;
use idem::pipeline::replay::header;
use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;
use rdkafka::Message as _;

use super::{Env, Sent, keys_in_distinct_lanes, lane_of, run_to_exit, send_lane_records};

const LANES: usize = 4;
const MAX_ATTEMPTS: u32 = 2;

/// README ("Failures"): "An event whose execution kills the host process
/// is counted outside it … after `max_attempts` starts it goes to the DLQ.
/// A crash rolls back a whole batch, so the killer may sit deep in it: the
/// batch's range, recorded in `idem.batch_in_flight`, makes the next owner
/// run those records alone and counted"; ("Lanes") "a lane runs its
/// records in offset order".
///
/// Key `K`'s third record aborts the host whenever it is about to run (the
/// `IDEM_TEST_ABORT_ON` fault point). `K` shares its lane with key `M`;
/// keys `A` and `B` have lanes of their own. The killer is first run inside
/// a batch of `K`'s lane, then alone and counted: the host goes down
/// exactly 1 + `max_attempts` times, the count in `idem.execution_attempt`
/// rising with each alone run, and the next start dead-letters it without
/// running it. After every crash nothing after it in its lane has taken
/// effect; at the end every other record has, once, each key in its
/// order, the records after the killer in its lane only after its
/// dead-lettering. Without the lane's mark the killer would be batched
/// again after each restart, never counted, and the host would crash for
/// ever (the loop is bounded); a lane that did not wait for it would let
/// its later records commit before it was resolved.
#[tokio::test(flavor = "multi_thread")]
async fn an_event_that_kills_the_host_inside_a_key_lane_batch_is_dead_lettered_and_its_lane_follows_it_in_order() {
    let env = Env::new().await;
    let others = keys_in_distinct_lanes(LANES, 3, &[]);
    let (k, killer_lane) = others[0].clone();
    let m = (0..1000)
        .map(|i| format!("member-{i}"))
        .find(|key| lane_of(Some(key), LANES) == killer_lane)
        .expect("a key sharing K's lane");
    let keys = [k.clone(), m, others[1].0.clone(), others[2].0.clone()];
    // K, M, A, B, K, M, … six records each; K's third is the killer.
    let records: Vec<_> = (0..6)
        .flat_map(|seq| {
            let k = k.clone();
            keys.iter().map(move |key| {
                let note = if *key == k && seq == 2 { "kill-the-host" } else { "" };
                (Some(key.clone()), seq, serde_json::json!({ "sleep_ms": 20, "note": note }))
            })
        })
        .collect();
    let sent = send_lane_records(&env, &records).await;
    let killer: &Sent = sent.iter().find(|s| s.key.as_deref() == Some(&k) && s.seq == 2).expect("killer");
    let after_in_lane: Vec<&Sent> =
        sent.iter().filter(|s| lane_of(s.key.as_deref(), LANES) == killer_lane && s.offset > killer.offset).collect();
    let spec = HandlerSpec { max_attempts: MAX_ATTEMPTS, batch: Some((6, 5)), ..env.scenarios() }
        .with_lanes("key", LANES as u32);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let counted = format!(
        "SELECT COALESCE(max(attempts), 0)::int8 FROM idem.execution_attempt WHERE \"offset\" = {}",
        killer.offset
    );

    let mut crashes = 0;
    let report = loop {
        let (status, reports) = run_to_exit(&config, &[("IDEM_TEST_ABORT_ON", "kill-the-host")]).await;
        if status.success() {
            break reports;
        }
        crashes += 1;
        assert!(crashes <= 1 + MAX_ATTEMPTS, "the host keeps crashing on the same event ({crashes} times)");
        let done: HashSet<uuid::Uuid> = env.lane_log().await.iter().map(|r| r.id).collect();
        let early: Vec<&&Sent> = after_in_lane.iter().filter(|s| done.contains(&s.id)).collect();
        assert!(early.is_empty(), "crash {crashes}: records after the killer in its lane took effect: {early:?}");
        if crashes == 1 {
            let marks = env.marks().await;
            assert!(
                marks.iter().any(|m| m.lane == killer_lane && (m.first..=m.last).contains(&killer.offset)),
                "the first crash was in a batch of the killer's lane, marked: {marks:?} (killer at {})",
                killer.offset
            );
        }
        // The batch's crash is not counted (it is blamed on no event); each
        // alone run of the killer is.
        assert_eq!(env.count(&counted).await, i64::from(crashes) - 1, "crash {crashes}: the killer's count");
    };
    assert_eq!(crashes, 1 + MAX_ATTEMPTS, "the batch's crash, then max_attempts = 2 of the killer's alone");
    let r = &report[0];
    assert_eq!((r.dead_lettered, r.failed), (1, 1), "{r:?}");

    let dead = kafka::read_all(&format!("{}.scenarios.dlq", env.topic));
    assert_eq!(dead.len(), 1, "only the killer is dead-lettered");
    assert_eq!((dead[0].key(), dead[0].payload()), (Some(k.as_bytes()), Some(killer.payload.as_slice())));
    let reason = header(&dead[0], h::REASON).unwrap_or_default();
    assert!(reason.contains("ends the host process"), "{reason}");
    assert_eq!(header(&dead[0], h::ATTEMPTS).as_deref(), Some("2"), "{reason}");
    let failed_at = header(&dead[0], h::FAILED_AT).expect("idem.failure.at");
    let failed_at = chrono::DateTime::parse_from_rfc3339(&failed_at).expect("rfc 3339").timestamp_millis() as f64 / 1e3;

    let log = env.lane_log().await;
    let ids: HashSet<uuid::Uuid> = log.iter().map(|r| r.id).collect();
    let others: HashSet<uuid::Uuid> = sent.iter().filter(|s| s.id != killer.id).map(|s| s.id).collect();
    assert_eq!((log.len(), &ids), (others.len(), &others), "every other record's effect, once, and none of the killer");
    assert_eq!(env.count("SELECT count(*) FROM idem.processed_event").await, others.len() as i64);
    for key in &keys {
        let order: Vec<i64> = log.iter().filter(|r| &r.key == key).map(|r| r.seq).collect();
        let expected: Vec<i64> = (0..6).filter(|seq| !(*key == k && *seq == 2)).collect();
        assert_eq!(order, expected, "{key}'s records ran in their order");
    }
    for s in &after_in_lane {
        let ran = log.iter().find(|r| r.id == s.id).expect("ran");
        assert!(
            ran.began >= failed_at,
            "{s:?} began ({}) before the killer was dead-lettered ({failed_at})",
            ran.began
        );
    }
    assert_eq!(
        kafka::committed(&spec.group_id, &env.topic, 1),
        vec![Some(sent.len() as i64)],
        "the partition flowed on"
    );
    assert_eq!(env.count("SELECT count(*) FROM idem.execution_attempt").await, 0, "counts are forgotten once resolved");
    env.finish().await;
}
