//! The maintenance pass in partition mode.

use std::time::{Duration, Instant};

use idem::config::StalePolicy;
use idem::{ExecError, Outcome};
use sqlx::{Connection as _, Executor as _};

use super::*;

/// The window of `day` exists from now on (as a pass creating it would).
async fn create_window(s: &Setup, day: chrono::NaiveDate) {
    sqlx::query("SELECT idem.create_window($1)").bind(day).execute(&s.db.pool).await.expect("create a window");
}

#[tokio::test]
async fn a_pass_creates_windows_ahead_drops_expired_ones_and_keeps_the_rest() {
    let s = Setup::new().await;
    s.record("scenarios", "2 days").await;
    let now = s.now_ms().await;
    let today = day(now);
    let old = now - 15 * DAY_MS;
    create_window(&s, day(old)).await;
    let expired = [s.claimed_at("scenarios", old).await, s.claimed_at("scenarios", now - 3 * DAY_MS).await];
    let kept = [
        s.claimed_at("scenarios", now - DAY_MS).await,
        s.claimed_at("scenarios", now).await,
        s.claimed_at("scenarios", now + 30 * 60_000).await,
    ];

    let report = s.pass(RetentionConfig { windows_ahead: 5, ..settings() }).await;
    let ahead: Vec<_> = (4..=5).map(|d| day(now + d * DAY_MS)).collect();
    assert_eq!(report.created, ahead, "the migration made 3 days ahead; 5 are wanted now");
    // Every window that ended more than 2 days ago, and only those.
    let mut dropped: Vec<_> = report.dropped.iter().map(|d| d.day).collect();
    dropped.sort();
    let mut expected: Vec<_> = (3..=7).map(|d| day(now - d * DAY_MS)).chain([day(old)]).collect();
    expected.sort();
    assert_eq!(dropped, expected, "{report:?}");
    let windows = s.windows().await;
    assert_eq!(windows.first(), Some(&day(now - 2 * DAY_MS)));
    assert_eq!(windows.last(), Some(&day(now + 5 * DAY_MS)));
    assert!(windows.contains(&today));
    for id in expired {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM idem.processed_event WHERE event_id = $1")
            .bind(id)
            .fetch_one(&s.db.pool)
            .await
            .expect("count");
        assert_eq!(n, 0);
    }
    for id in kept {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM idem.processed_event WHERE event_id = $1")
            .bind(id)
            .fetch_one(&s.db.pool)
            .await
            .expect("count");
        assert_eq!(n, 1, "current data stays");
    }

    // A second pass has nothing to do, and never brings a dropped window back.
    let again = s.pass(RetentionConfig { windows_ahead: 5, ..settings() }).await;
    assert!(again.created.is_empty() && again.dropped.is_empty(), "{again:?}");
    // An event of a dropped window is stale even for a handler that runs
    // stale events: its row may have been there.
    s.record("scenarios", "30 days").await;
    let recreate = s.pass(RetentionConfig { windows_ahead: 5, ..settings() }).await;
    assert!(!recreate.created.iter().any(|d| expected.contains(d)), "{recreate:?}");
    let process = s.scenarios(|h| h.stale_events = StalePolicy::Process);
    let dlq = s.scenarios(|_| {});
    let in_dropped = scenario_at(now - 4 * DAY_MS, "ok");
    assert!(matches!(dlq.execute(&in_dropped, 1).await, Err(ExecError::StaleEvent(_))));
    assert_eq!(process.execute(&in_dropped, 1).await.expect("unguarded"), Outcome::Processed);
    s.finish().await;
}

#[tokio::test]
async fn a_window_stays_until_the_longest_recorded_retention_expires() {
    let s = Setup::new().await;
    // Two hosts, each recording its own handler at start-up.
    let config = |mut spec: idem_tests::host::HandlerSpec, retention: &str| {
        spec.create_dlq = false;
        spec.extra = format!("dedup_retention = \"{retention}\"\n");
        let path = idem_tests::host::write_config_for("127.0.0.1:9", &s.db.url, &[spec]);
        idem::config::Config::load(&path).expect("config")
    };
    let a = config(idem_tests::host::HandlerSpec::scenarios("t-a", "http://127.0.0.1:1"), "1d");
    let b = config(idem_tests::host::HandlerSpec::billing("t-b", "http://127.0.0.1:1"), "3d");
    idem::retention::record(&s.db.pool, &a).await.expect("host a records");
    idem::retention::record(&s.db.pool, &b).await.expect("host b records");

    let now = s.now_ms().await;
    // Both handlers stored rows in the windows of 2 and 4 days ago.
    for age in [2, 4] {
        s.claimed_at("scenarios", now - age * DAY_MS).await;
        s.claimed_at("billing", now - age * DAY_MS).await;
    }
    let report = s.pass(settings()).await;
    let dropped: Vec<_> = report.dropped.iter().map(|d| d.day).collect();
    assert!(dropped.contains(&day(now - 4 * DAY_MS)), "older than both: {report:?}");
    assert!(!dropped.contains(&day(now - 2 * DAY_MS)), "billing keeps 3 days: {report:?}");
    assert_eq!(s.count("SELECT count(*) FROM idem.processed_event").await, 2);
    // When host b's handler keeps 1 day too, the window goes.
    let mut b = b;
    b.handlers[0].dedup_retention = span("1d");
    idem::retention::record(&s.db.pool, &b).await.expect("host b records again");
    let report = s.pass(settings()).await;
    assert!(report.dropped.iter().any(|d| d.day == day(now - 2 * DAY_MS)), "{report:?}");
    assert_eq!(s.count("SELECT count(*) FROM idem.processed_event").await, 0);
    s.finish().await;
}

#[tokio::test]
async fn passes_at_once_do_not_collide() {
    let s = Setup::new().await;
    s.record("scenarios", "2 days").await;
    // A guest cannot even take an advisory lock (idem migrate revokes them
    // from PUBLIC: their keys are one namespace for every role), and
    // maintenance does not depend on one.
    let mut guest = s.pool.acquire().await.expect("handler connection");
    let denied = guest
        .execute("SELECT pg_advisory_xact_lock(hashtext('idem.maintenance'), 0), pg_advisory_xact_lock(0)")
        .await
        .expect_err("advisory locks are revoked");
    assert!(denied.to_string().contains("permission denied"), "{denied}");
    drop(guest);
    let ran = s.pass(RetentionConfig { windows_ahead: 4, ..settings() }).await;
    assert!(!ran.busy && ran.created.len() == 1 && ran.dropped.len() == 5, "{ran:?}");
    // Another host's pass holds the lock: this one does nothing.
    let mut other = sqlx::PgConnection::connect(&s.db.url).await.expect("connect");
    other.execute("BEGIN; SELECT 1 FROM idem.maintenance_lock FOR UPDATE").await.expect("lock");
    let busy = s.pass(RetentionConfig { windows_ahead: 8, ..settings() }).await;
    assert!(busy.busy && busy.created.is_empty() && busy.dropped.is_empty(), "{busy:?}");
    other.close().await.expect("close");
    // Four passes at once: each window is created exactly once.
    let passes = (0..4).map(|_| s.pass(RetentionConfig { windows_ahead: 8, ..settings() }));
    let reports = futures::future::join_all(passes).await;
    let mut created: Vec<_> = reports.iter().flat_map(|r| r.created.clone()).collect();
    let mut dropped: Vec<_> = reports.iter().flat_map(|r| r.dropped.iter().map(|d| d.day)).collect();
    let now = s.now_ms().await;
    created.sort();
    dropped.sort();
    assert_eq!(created, (5..=8).map(|d| day(now + d * DAY_MS)).collect::<Vec<_>>(), "{reports:?}");
    assert!(dropped.is_empty(), "{reports:?}");
    assert!(reports.iter().all(|r| r.busy || r.deferred.is_empty()), "{reports:?}");
    s.finish().await;
}

#[tokio::test]
async fn a_long_transaction_defers_the_drop_and_claims_never_wait_for_it() {
    let s = Setup::new().await;
    s.record("scenarios", "2 days").await;
    let now = s.now_ms().await;
    let scenarios = s.scenarios(|_| {});
    // A report reading the table, until the test lets it go.
    let mut reader = sqlx::PgConnection::connect(&s.db.url).await.expect("connect");
    reader.execute("BEGIN; SELECT count(*) FROM idem.processed_event").await.expect("begin");
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let holder = tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(120), released).await;
        reader.execute("COMMIT").await.expect("commit");
        reader
    });
    let lock_timeout = Duration::from_secs(5);
    let config = RetentionConfig { lock_timeout: idem::config::Span(lock_timeout), ..settings() };
    let pass = async {
        let report = s.pass(config.clone()).await;
        (report, Instant::now())
    };
    // Claims go through while the pass waits for its lock: a plain DROP
    // would queue each of them behind it until the pass gave up.
    let claims = async {
        let waiting = "SELECT count(*) FROM pg_stat_activity \
                       WHERE datname = current_database() AND wait_event_type = 'Lock'";
        let deadline = Instant::now() + Duration::from_secs(60);
        while s.count(waiting).await == 0 {
            assert!(Instant::now() < deadline, "the pass never waited on the reader");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for _ in 0..10 {
            let event = scenario_at(now, "ok");
            assert_eq!(scenarios.execute(&event, 1).await.expect("claim"), Outcome::Processed);
        }
        Instant::now()
    };
    let ((report, pass_ended), claims_ended) = tokio::join!(pass, claims);
    assert!(report.dropped.is_empty(), "the reader holds the table: {report:?}");
    assert!(report.deferred.iter().any(|d| d.starts_with("dropping window")), "{report:?}");
    assert!(claims_ended < pass_ended, "every claim finished while the pass still waited for its lock");
    assert!(!holder.is_finished(), "the reader still held the table when the pass gave up");
    let _ = release.send(());
    holder.await.expect("reader");
    // Until then the windows count as gone for claims (marked first).
    let marked = s.count("SELECT count(*) FROM idem.dropped_window").await;
    assert_eq!(marked, 5);
    // A later try, once the reader is gone, finishes them.
    let later = s.pass(config).await;
    assert_eq!(later.dropped.len(), 5, "{later:?}");
    assert!(later.deferred.is_empty(), "{later:?}");
    s.finish().await;
}
