//! The claim's module-version check (`idem_api.claim_events`): a host still
//! running a replaced version never processes an event with it.

use idem::{ErrorClass, ExecError, Handler, Outcome};
use idem_tests::guests;

use super::{CHARGES, Setup, order};

/// Stores the billing component as each `(version, active)` of `billing`.
async fn store_versions(s: &Setup, versions: &[(i32, bool)]) {
    let bytes = std::fs::read(guests::component("billing")).unwrap_or_else(|e| panic!("billing component: {e}"));
    for (version, active) in versions {
        sqlx::query(
            "INSERT INTO idem.handler_module (handler, version, sha256, bytes, size, uploaded_by, active) \
             VALUES ('billing', $1, $2, $3, $4, 'test', $5)",
        )
        .bind(version)
        .bind(format!("sha-{version}"))
        .bind(&bytes)
        .bind(bytes.len() as i32)
        .bind(active)
        .execute(&s.db.pool)
        .await
        .unwrap_or_else(|e| panic!("store a version: {e}"));
    }
}

#[tokio::test]
async fn a_claim_on_a_version_that_is_not_active_is_refused_and_the_active_one_is_recorded() {
    let s = Setup::new().await;
    store_versions(&s, &[(1, false), (2, true)]).await;
    let load = |version: i32| {
        Handler::load(&s.runtime, &guests::component("billing"), s.settings("billing"))
            .expect("load")
            .with_version(version)
    };
    let stale = s.executor_for(load(1));
    let e = order();
    let err = stale.execute(&e, 1).await.expect_err("version 1 is not active");
    assert!(
        matches!(err, ExecError::StaleModule(ref m) if m.contains("is neither the active one (2) nor its canary")),
        "{err}"
    );
    assert_eq!(err.class(), ErrorClass::Unavailable, "never final: the host switches and runs it again");
    let batch = stale.execute_batch(std::slice::from_ref(&e), |_| false).await.expect_err("in a batch too");
    assert!(matches!(batch, idem::executor::BatchFailure::StaleModule), "{batch:?}");
    assert_eq!(s.count(CHARGES).await, 0, "nothing ran on the replaced version");
    assert!(s.provider.keys().is_empty());

    let current = s.executor_for(load(2));
    assert_eq!(current.execute(&e, 1).await.expect("active version"), Outcome::Processed);
    let recorded: Option<i32> =
        sqlx::query_scalar("SELECT module_version FROM idem.processed_event WHERE event_id = $1")
            .bind(e.id)
            .fetch_one(&s.db.pool)
            .await
            .expect("claim row");
    assert_eq!(recorded, Some(2), "the claim records the version that processed the event");
    s.finish().await;
}

#[tokio::test]
async fn an_activation_waits_for_transactions_on_the_version_it_replaces() {
    let s = Setup::new().await;
    store_versions(&s, &[(1, true), (2, false)]).await;
    // A transaction of the billing role that claimed on version 1, still open.
    let (_, _, pool) = s.pools.iter().find(|(n, _, _)| *n == "billing").expect("billing pool");
    let mut tx = pool.begin().await.expect("begin");
    let claimed: Vec<String> = sqlx::query_scalar(
        "SELECT idem_api.claim_events(ARRAY[$1::uuid], '{t}', '{0}', '{0}', ARRAY[NULL::bytea], 1, false)",
    )
    .bind(uuid::Uuid::now_v7())
    .fetch_one(&mut *tx)
    .await
    .expect("claim on version 1");
    assert_eq!(claimed, vec!["claimed"]);

    let activation = tokio::spawn({
        let pool = s.db.pool.clone();
        async move { idem::modules::store::activate(&pool, "billing", 2).await }
    });
    // The activation is waiting on a lock the open transaction holds (as
    // long as it has to: a minute here is far beyond any scheduling delay).
    let waiting = "SELECT count(*) FROM pg_stat_activity \
                   WHERE datname = current_database() AND wait_event_type = 'Lock'";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while s.db.count(waiting).await == 0 {
        assert!(!activation.is_finished(), "the activation went through while version 1 was still claimed");
        assert!(std::time::Instant::now() < deadline, "the activation never waited on the open transaction");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!activation.is_finished(), "the activation waits for the transaction running version 1");
    tx.commit().await.expect("commit on version 1");
    assert!(activation.await.expect("join").expect("activated"), "then it goes through");
    let active: i32 =
        sqlx::query_scalar("SELECT version FROM idem.handler_module WHERE handler = 'billing' AND active")
            .fetch_one(&s.db.pool)
            .await
            .expect("active");
    assert_eq!(active, 2);
    s.finish().await;
}

/// A pooled connection lives for hours; PostgreSQL caches the claim
/// function's plans per connection, from the table's size when they were
/// first made. A plan made while `processed_event` was empty must not scan
/// it once it holds many rows (measured: it took the per-event benchmark
/// from 3,000 to 330 claims/s at 85,000 rows).
#[tokio::test]
async fn the_claim_never_scans_processed_event_whatever_it_held_when_its_plan_was_cached() {
    // The 50,000 rows are dated the last 50 s: in today's window with the
    // claims, not yesterday's, whatever the hour.
    idem_tests::db::away_from_midnight(std::time::Duration::from_secs(90)).await;
    let s = Setup::new().await;
    let (_, _, pool) = s.pools.iter().find(|(n, _, _)| *n == "billing").expect("billing pool");
    let mut conn = pool.acquire().await.expect("one long-lived connection");
    let claim = "SELECT idem_api.claim_events(ARRAY[$1::uuid], '{t}', '{0}', '{0}', ARRAY[NULL::bytea], NULL, false)";
    for _ in 0..10 {
        sqlx::query(claim).bind(uuid::Uuid::now_v7()).execute(&mut *conn).await.expect("claim on an empty table");
    }
    sqlx::query(
        "INSERT INTO idem.processed_event (event_id, consumer, topic, \"partition\", \"offset\") \
         SELECT (lpad(to_hex(floor(extract(epoch FROM now()) * 1000)::bigint - n), 12, '0') || '7000' || '8' \
                 || lpad(to_hex(n), 15, '0'))::uuid, 'other', 't', 0, n \
         FROM generate_series(1, 50000) n",
    )
    .execute(&s.db.pool)
    .await
    .expect("fill");
    sqlx::query("ANALYZE idem.processed_event").execute(&s.db.pool).await.expect("analyze");
    sqlx::query("BEGIN").execute(&mut *conn).await.expect("begin");
    for _ in 0..10 {
        sqlx::query(claim).bind(uuid::Uuid::now_v7()).execute(&mut *conn).await.expect("claim on a full table");
    }
    // This transaction's own statistics: a handler role may not read
    // statistics (idem migrate revokes them from PUBLIC), so the test lends
    // it the view and its functions for the one query.
    let role = s.db.place("billing", "billing").role;
    let lend = |verb: &'static str, to: &'static str| {
        format!(
            "DO $$ DECLARE f regprocedure; BEGIN \
               EXECUTE '{verb} SELECT ON pg_catalog.pg_stat_xact_user_tables {to} \"{role}\"'; \
               FOR f IN SELECT oid::regprocedure FROM pg_proc WHERE proname LIKE 'pg\\_stat\\_get\\_xact\\_%' LOOP \
                 EXECUTE format('{verb} EXECUTE ON FUNCTION %s {to} %I', f, '{role}'); END LOOP; END $$"
        )
    };
    sqlx::query(&lend("GRANT", "TO")).execute(&s.db.pool).await.expect("grant");
    let scans: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(seq_scan), 0)::bigint FROM pg_stat_xact_user_tables \
         WHERE schemaname = 'idem' AND relname LIKE 'processed\\_event%'",
    )
    .fetch_one(&mut *conn)
    .await
    .expect("scan count");
    sqlx::query("ROLLBACK").execute(&mut *conn).await.expect("rollback");
    sqlx::query(&lend("REVOKE", "FROM")).execute(&s.db.pool).await.expect("revoke");
    assert_eq!(scans, 0, "the claims scanned processed_event");
    drop(conn);
    s.finish().await;
}
