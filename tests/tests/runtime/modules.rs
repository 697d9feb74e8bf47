//! The claim's module-version check (`idem_api.claim_events`): a host still
//! running a replaced version never processes an event with it.

use idem::{ErrorClass, ExecError, Handler, Outcome};
use idem_tests::guests;

use super::{CHARGES, Setup, order};

#[tokio::test]
async fn a_claim_on_a_version_that_is_not_active_is_refused_and_the_active_one_is_recorded() {
    let s = Setup::new().await;
    let bytes = std::fs::read(guests::component("billing")).expect("billing component");
    for (version, active) in [(1, false), (2, true)] {
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
        .expect("store a version");
    }
    let load = |version: i32| {
        Handler::load(&s.runtime, &guests::component("billing"), s.settings("billing"))
            .expect("load")
            .with_version(version)
    };
    let stale = s.executor_for(load(1));
    let e = order();
    let err = stale.execute(&e, 1).await.expect_err("version 1 is not active");
    assert!(matches!(err, ExecError::StaleModule(ref m) if m.contains("not the active one")), "{err}");
    assert_eq!(err.class(), ErrorClass::Unavailable, "never final: the host switches and runs it again");
    let batch = stale.execute_batch(std::slice::from_ref(&e), || false).await.expect_err("in a batch too");
    assert!(batch.stale && !batch.whole, "{batch:?}");
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
    let bytes = std::fs::read(guests::component("billing")).expect("billing component");
    for (version, active) in [(1, true), (2, false)] {
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
        .expect("store a version");
    }
    // A transaction of the billing role that claimed on version 1, still open.
    let (_, _, pool) = s.pools.iter().find(|(n, _, _)| *n == "billing").expect("billing pool");
    let mut tx = pool.begin().await.expect("begin");
    let claimed: Vec<String> =
        sqlx::query_scalar("SELECT idem_api.claim_events(ARRAY[$1::uuid], '{t}', '{0}', '{0}', ARRAY[NULL::bytea], 1)")
            .bind(uuid::Uuid::now_v7())
            .fetch_one(&mut *tx)
            .await
            .expect("claim on version 1");
    assert_eq!(claimed, vec!["claimed"]);

    let activation = tokio::spawn({
        let pool = s.db.pool.clone();
        async move { idem::modules::store::activate(&pool, "billing", 2).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
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
