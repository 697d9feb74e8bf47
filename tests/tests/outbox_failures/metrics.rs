//! The relay's `/metrics`: published and failed rows counted, pending rows
//! and the oldest one's age as the lease holder last counted them, each
//! matching the outbox's rows.

use std::time::Duration;

use idem_tests::{host, kafka};

use crate::{Env, Host, emit, metric, wait_for, wait_rows};

/// The four figures of producer `scenarios`, from `/metrics` and from the
/// outbox (published, failed, pending, the oldest pending row's age in s).
async fn figures(env: &Env, config: &std::path::Path) -> ([Option<f64>; 4], [f64; 4]) {
    let lines = host::metrics(config).await;
    let shown = [
        "idem_outbox_published_total",
        "idem_outbox_failed_total",
        "idem_outbox_pending",
        "idem_outbox_oldest_pending_seconds",
    ]
    .map(|name| metric(&lines, name, "scenarios"));
    let (published, failed, pending, oldest): (i64, i64, i64, f64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE published_at IS NOT NULL), count(*) FILTER (WHERE failed_at IS NOT NULL), \
         count(*) FILTER (WHERE published_at IS NULL AND failed_at IS NULL), \
         coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE published_at IS NULL AND failed_at IS NULL))::float8, 0) \
         FROM idem.outbox",
    )
    .fetch_one(&env.db.pool)
    .await
    .expect("the outbox's figures");
    (shown, [published as f64, failed as f64, pending as f64, oldest])
}

/// Whether `/metrics` matches the rows: the counts exactly, the age as
/// counted at most 7 s ago (a round that waits on a held topic lasts up
/// to the 5-s delivery timeout).
fn matches(shown: &[Option<f64>; 4], rows: &[f64; 4]) -> bool {
    shown[..3].iter().zip(&rows[..3]).all(|(s, r)| *s == Some(*r))
        && shown[3].is_some_and(|age| age <= rows[3] + 0.5 && age + 7.0 >= rows[3] && (rows[3] == 0.0) == (age == 0.0))
}

/// README: "`/metrics` has `idem_outbox_published_total`,
/// `idem_outbox_failed_total`, `idem_outbox_pending`,
/// `idem_outbox_oldest_pending_seconds` … per producer (the pending
/// figures as the lease holder last counted them)." A host publishes three
/// rows, fails one too large for its topic, and holds one for a topic
/// deleted under it (librdkafka calls it unknown only after 30 s: until
/// then the row is pending); `/metrics` must show 3, 1, 1 and that row's
/// age. Once the row fails, it must show 3, 2, 0 and 0. A figure not
/// counted, counted twice, or never updated fails this.
#[tokio::test(flavor = "multi_thread")]
async fn the_outbox_metrics_match_the_published_failed_and_pending_rows() {
    let env = Env::new().await;
    let out = idem_tests::unique_name("idem_topic");
    kafka::create_topic_with(&out, 1, &[("max.message.bytes", "2048")]).await;
    let gone = kafka::create_topic(1).await;
    let config = env.config(env.emitter(&[&out, &gone])).await;
    env.emit(vec![emit(&out, "big", 1, 4_000)]).await;
    let running = Host::start(&config);
    wait_rows(&env, "the large row failed", |rows| rows.len() == 1 && rows[0].failed).await;
    env.emit(vec![emit(&out, "k2", 2, 0), emit(&out, "k3", 3, 0), emit(&out, "k4", 4, 0)]).await;
    wait_rows(&env, "three rows published", |rows| rows.len() == 4 && rows[1..].iter().all(|r| r.published)).await;
    kafka::delete_topic(&gone).await;
    env.emit(vec![emit(&gone, "g5", 5, 0)]).await;
    wait_rows(&env, "the row for the deleted topic is written", |rows| rows.len() == 5).await;
    // A second old at least, for its age to show.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let within = Duration::from_secs(15);
    let (shown, rows) = wait_for("/metrics matches 3 published, 1 failed, 1 pending", within, || async {
        let (shown, rows) = figures(&env, &config).await;
        let done = rows[..3] == [3.0, 1.0, 1.0] && matches(&shown, &rows);
        if done { Ok((shown, rows)) } else { Err(format!("/metrics {shown:?}, rows {rows:?}")) }
    })
    .await;
    assert!(rows[3] >= 1.0 && shown[3] > Some(0.0), "the pending row's age: {shown:?} {rows:?}");

    let (shown, rows) =
        wait_for("/metrics matches 3 published, 2 failed, none pending", Duration::from_secs(60), || async {
            let (shown, rows) = figures(&env, &config).await;
            let done = rows[..3] == [3.0, 2.0, 0.0] && matches(&shown, &rows);
            if done { Ok((shown, rows)) } else { Err(format!("/metrics {shown:?}, rows {rows:?}")) }
        })
        .await;
    assert_eq!(shown, [Some(3.0), Some(2.0), Some(0.0), Some(0.0)], "{rows:?}");
    running.stop();
    env.finish().await;
}
