//! A host killed while batches run in several key lanes: each lane's
//! crash mark survives it, and the partition's next owner runs the marked
//! records alone, one at a time, each once, then batches again and clears
//! the marks.

use std::collections::HashSet;

use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;

use super::{Env, Sent, keys_in_distinct_lanes, lane_of, run_to_exit, send_lane_records};

const LANES: usize = 4;
/// `[handler.batch] max_events`.
const BATCH: usize = 4;

/// README ("Lanes"): "Every lane has its own crash mark
/// (`idem.batch_in_flight`, a row per lane) … after a crash the next owner
/// runs the partition's records alone, counted, up to the last offset of
/// any lane's mark", one such counted execution at a time per handler
/// ("Failures"); a mark is "deleted when the lane runs out of records".
///
/// Three keys in three lanes of four, 16 records each, every record 300 ms:
/// the host is SIGKILLed once each of the three lanes has a batch in
/// flight. The rows are read at that moment: one per busy lane (none for
/// the idle lane), each naming a run of its own lane's records, at least
/// two of them batches that had not committed. Without per-lane marks
/// (one row per partition, the lanes overwriting it) fewer rows would be
/// left; had the next owner read only its own lane's mark, or batched the
/// marked records, the records up to the last mark would share
/// transactions or overlap in time.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_killed_with_batches_in_several_lanes_leaves_a_mark_per_lane_and_its_records_run_alone_once() {
    let env = Env::new().await;
    let keys = keys_in_distinct_lanes(LANES, 3, &[]);
    let records: Vec<_> = (0..16)
        .flat_map(|seq| {
            keys.iter().map(move |(key, _)| (Some(key.clone()), seq, serde_json::json!({ "sleep_ms": 300 })))
        })
        .collect();
    let sent = send_lane_records(&env, &records).await;
    let lane_records =
        |lane: usize| -> Vec<&Sent> { sent.iter().filter(|s| lane_of(s.key.as_deref(), LANES) == lane).collect() };
    let spec = HandlerSpec { batch: Some((BATCH, 5)), ..env.scenarios() }.with_lanes("key", LANES as u32);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));

    let child = host::spawn(&config, false, &[]);
    idem_tests::wait_until_async("a batch in flight in each of the 3 busy lanes", || async {
        env.marks().await.len() == 3
    })
    .await;
    host::signal(&child, "KILL");
    let (status, _) = tokio::task::spawn_blocking(move || host::wait_report(child)).await.expect("wait");
    assert!(!status.success(), "killed: {status}");

    // The moment after the kill.
    let marks = env.marks().await;
    let committed: HashSet<uuid::Uuid> = env.lane_log().await.iter().map(|r| r.id).collect();
    let mut busy: Vec<usize> = keys.iter().map(|(_, lane)| *lane).collect();
    busy.sort_unstable();
    assert_eq!(marks.iter().map(|m| m.lane).collect::<Vec<_>>(), busy, "a row per busy lane: {marks:?}");
    let mut interrupted = 0;
    for mark in &marks {
        let own = lane_records(mark.lane);
        let inside: Vec<&&Sent> = own.iter().filter(|s| (mark.first..=mark.last).contains(&s.offset)).collect();
        assert!(
            (1..=BATCH).contains(&inside.len())
                && inside.first().is_some_and(|s| s.offset == mark.first)
                && inside.last().is_some_and(|s| s.offset == mark.last),
            "{mark:?} spans a batch of its own lane's records: {inside:?}"
        );
        let before_done = own.iter().filter(|s| s.offset < mark.first).all(|s| committed.contains(&s.id));
        let after_none = own.iter().filter(|s| s.offset > mark.last).all(|s| !committed.contains(&s.id));
        let done_inside = inside.iter().filter(|s| committed.contains(&s.id)).count();
        assert!(before_done && after_none, "{mark:?}: the lane ran its records in order up to its batch");
        match done_inside {
            0 => interrupted += 1,
            n if n == inside.len() => {} // committed just before the kill
            n => panic!("{mark:?}: {n} of its batch's {} records committed: a batch is one transaction", inside.len()),
        }
    }
    assert!(interrupted >= 2, "batches were running in several lanes at the kill: {interrupted} of {marks:?}");

    // The next owner.
    let (status, reports) = run_to_exit(&config, &[]).await;
    assert!(status.success(), "{status}");
    let r = &reports[0];
    assert_eq!((r.failed, r.dead_lettered), (0, 0), "{r:?}");
    assert_eq!(r.processed as usize, sent.len() - committed.len(), "{r:?}");
    let log = env.lane_log().await;
    let ids: HashSet<uuid::Uuid> = log.iter().map(|r| r.id).collect();
    assert_eq!((log.len(), ids.len()), (sent.len(), sent.len()), "each record's effect once");
    assert!(sent.iter().all(|s| ids.contains(&s.id)), "every record's effect");

    let through = marks.iter().map(|m| m.last).max().expect("marks");
    let offset_of = |id: uuid::Uuid| sent.iter().find(|s| s.id == id).map(|s| s.offset).expect("sent");
    let rerun: Vec<_> = log.iter().filter(|r| !committed.contains(&r.id) && offset_of(r.id) <= through).collect();
    assert!(rerun.len() >= 4, "the interrupted batches' records ran again: {}", rerun.len());
    let xmins: HashSet<&str> = rerun.iter().map(|r| r.xmin.as_str()).collect();
    assert_eq!(xmins.len(), rerun.len(), "each record up to the last mark (offset {through}) in its own transaction");
    for (i, a) in rerun.iter().enumerate() {
        for b in &rerun[i + 1..] {
            assert!(!a.overlaps(b), "records up to the last mark ran one at a time: {a:?} and {b:?}");
        }
    }
    // Past the marks the lanes batch again: that is what clears the marks.
    let later: Vec<&str> = log.iter().filter(|r| offset_of(r.id) > through).map(|r| r.xmin.as_str()).collect();
    assert!(later.len() > later.iter().collect::<HashSet<_>>().len(), "records past the marks ran in batches");
    assert_eq!(env.marks().await, vec![], "the marks are gone once the lanes ran out of records");
    assert_eq!(env.count("SELECT count(*) FROM idem.execution_attempt").await, 0, "and the counts");
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(sent.len() as i64)]);
    env.finish().await;
}

/// A lane whose records all fall in the range a crash left to run alone
/// never batches again, so no batch of its own replaces the crashed host's
/// mark: the mark still goes once the partition's records up to it are
/// resolved (else it stays for good, and a later replay of those offsets,
/// a new group reading from the start, runs them alone and counted).
///
/// The test above with the second key cut to 5 records, all inside the
/// marked range (the other lanes' batches reach past them).
#[tokio::test(flavor = "multi_thread")]
async fn a_lane_whose_records_all_ran_alone_after_a_crash_leaves_no_mark_behind() {
    let env = Env::new().await;
    let keys = keys_in_distinct_lanes(LANES, 3, &[]);
    let records: Vec<_> = (0..16)
        .flat_map(|seq| {
            keys.iter()
                .enumerate()
                .filter(move |(i, _)| *i != 1 || seq < 5)
                .map(move |(_, (key, _))| (Some(key.clone()), seq, serde_json::json!({ "sleep_ms": 300 })))
        })
        .collect();
    let sent = send_lane_records(&env, &records).await;
    let spec = HandlerSpec { batch: Some((BATCH, 5)), ..env.scenarios() }.with_lanes("key", LANES as u32);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let child = host::spawn(&config, false, &[]);
    idem_tests::wait_until_async("a batch in flight in each of the 3 busy lanes", || async {
        env.marks().await.len() == 3
    })
    .await;
    host::signal(&child, "KILL");
    let (status, _) = tokio::task::spawn_blocking(move || host::wait_report(child)).await.expect("wait");
    assert!(!status.success(), "killed: {status}");
    let marks = env.marks().await;
    let short_lane = keys[1].1;
    let through = marks.iter().map(|m| m.last).max().expect("marks");
    let short: Vec<i64> =
        sent.iter().filter(|s| s.key.as_deref() == Some(keys[1].0.as_str())).map(|s| s.offset).collect();
    assert!(
        short.iter().all(|o| *o <= through),
        "the short lane's records {short:?} are all inside the marked range (through {through})"
    );
    assert!(marks.iter().any(|m| m.lane == short_lane), "the short lane had a mark at the kill: {marks:?}");

    let (status, _) = run_to_exit(&config, &[]).await;
    assert!(status.success(), "{status}");
    let log = env.lane_log().await;
    assert_eq!(log.len(), sent.len(), "each record's effect once");
    assert_eq!(env.marks().await, vec![], "no mark left, the short lane's included");
    env.finish().await;
}
