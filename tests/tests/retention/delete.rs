//! Delete mode: a plain `idem.processed_event`, expired rows deleted in chunks.

use idem::config::{RetentionMode, StalePolicy};
use idem::{ExecError, Outcome};

use super::*;

/// A database migrated with `[retention] mode = "delete"`.
async fn delete_mode() -> Setup {
    Setup::on(TestDb::new_for(RetentionMode::Delete).await.unwrap_or_else(|e| panic!("test database: {e:#}"))).await
}

/// `n` claim rows of `consumer` whose ids were created at `id_ms` and that
/// were processed `processed_ago` ago.
async fn rows(s: &Setup, consumer: &str, n: i64, id_ms: i64, processed_ago: &str) {
    sqlx::query(
        "INSERT INTO idem.processed_event (event_id, consumer, processed_at, topic, \"partition\", \"offset\") \
         SELECT (lpad(to_hex($2::bigint), 12, '0') || '7000' || '8000' || lpad(to_hex(g), 12, '0'))::uuid, $1, \
                now() - $4::interval, 't', 0, g \
         FROM generate_series(1, $3) g",
    )
    .bind(consumer)
    .bind(id_ms)
    .bind(n)
    .bind(processed_ago)
    .execute(&s.db.pool)
    .await
    .unwrap_or_else(|e| panic!("rows: {e}"));
}

#[tokio::test]
async fn delete_mode_removes_only_expired_rows_in_bounded_chunks() {
    let s = delete_mode().await;
    let kind: String =
        sqlx::query_scalar("SELECT relkind::text FROM pg_class WHERE oid = 'idem.processed_event'::regclass")
            .fetch_one(&s.db.pool)
            .await
            .expect("kind");
    assert_eq!(kind, "r", "not partitioned");
    s.record("scenarios", "1 day").await;
    s.record("billing", "5 days").await;
    let now = s.now_ms().await;
    // Expired: both times past a day.
    rows(&s, "scenarios", 2_500, now - 3 * DAY_MS, "3 days").await;
    // Kept: an old event processed an hour ago (its row counts from then).
    rows(&s, "scenarios", 300, now - 3 * DAY_MS - 1, "1 hour").await;
    // Kept: fresh.
    rows(&s, "scenarios", 200, now - 3_600_000, "1 hour").await;
    // Kept: billing keeps 5 days.
    rows(&s, "billing", 400, now - 3 * DAY_MS - 2, "3 days").await;

    let report = s.pass(RetentionConfig { mode: RetentionMode::Delete, delete_chunk: 1_000, ..settings() }).await;
    assert_eq!(report.deleted, 2_500, "{report:?}");
    assert_eq!(report.chunks, 3, "1,000 + 1,000 + 500: {report:?}");
    assert_eq!(s.count("SELECT count(*) FROM idem.processed_event WHERE consumer = 'scenarios'").await, 500);
    assert_eq!(s.count("SELECT count(*) FROM idem.processed_event WHERE consumer = 'billing'").await, 400);
    let again = s.pass(RetentionConfig { mode: RetentionMode::Delete, ..settings() }).await;
    assert_eq!((again.deleted, again.chunks), (0, 0), "{again:?}");

    // Claims and the guard work the same without partitions.
    let dlq = s.scenarios(|_| {});
    let skip = s.scenarios(|h| h.stale_events = StalePolicy::Skip);
    let fresh = scenario_at(now, "ok");
    assert_eq!(dlq.execute(&fresh, 1).await.expect("claim"), Outcome::Processed);
    assert_eq!(dlq.execute(&fresh, 1).await.expect("again"), Outcome::Duplicate);
    let stale = scenario_at(now - 2 * DAY_MS, "ok");
    assert!(matches!(dlq.execute(&stale, 1).await, Err(ExecError::StaleEvent(_))));
    assert_eq!(skip.execute(&stale, 1).await.expect("skip"), Outcome::Skipped);

    // Raising the retention never brings deleted rows' events back as new:
    // ids before the deletion mark stay stale.
    s.record("scenarios", "30 days").await;
    let deleted = scenario_at(now - 3 * DAY_MS, "ok");
    assert!(matches!(dlq.execute(&deleted, 1).await, Err(ExecError::StaleEvent(_))), "an id whose row may be gone");
    let kept = scenario_at(now - 3_600_000 * 2, "ok");
    assert_eq!(dlq.execute(&kept, 1).await.expect("inside both"), Outcome::Processed);

    // A host configured for the other mode refuses to start on this table.
    let wrong = idem::retention::check_mode(&s.db.pool, &settings()).await.expect_err("partition config");
    assert!(wrong.to_string().contains("mode = \"delete\""), "{wrong}");
    s.finish().await;
}
