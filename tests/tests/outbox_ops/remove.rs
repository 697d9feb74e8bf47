//! `idem outbox --remove-producer NAME --database-url ADMIN_URL`: an
//! `[[outbox.producer]]` removed from the config is only reported until
//! the operator ends it, and ending it takes its topics, its role's
//! mapping and its grant.

use idem_tests::host::{self, HandlerSpec};
use idem_tests::kafka;

use super::{Env, add_producer, idem, path, publish, published};

/// What the database holds of the producer `orders`: its recorded topics,
/// its role mappings, and whether `role` may call `idem_api.publish`.
async fn recorded(env: &Env, role: &str) -> (i64, i64, bool) {
    let topics = env.count("SELECT count(*) FROM idem.outbox_topic WHERE producer = 'orders'").await;
    let mapped = env.count("SELECT count(*) FROM idem.outbox_producer WHERE producer = 'orders'").await;
    let may: bool = sqlx::query_scalar(
        "SELECT has_function_privilege($1, 'idem_api.publish(text, text, text, jsonb, jsonb)', 'EXECUTE')",
    )
    .bind(role)
    .fetch_one(&env.db.pool)
    .await
    .unwrap_or_else(|e| panic!("privilege: {e}"));
    (topics, mapped, may)
}

/// README, "The outbox": "a producer the config no longer names is only
/// reported (several configs may share a database) until `idem outbox
/// --remove-producer NAME --database-url ADMIN_URL` ends it (its topics,
/// its role's mapping and grant)". An application published through the
/// outbox, then was dropped from the config: `idem migrate` reports it and
/// changes nothing; `--remove-producer` is refused with a config that
/// still names it, then ends it: no topic recorded, no mapping, no grant
/// (its role's `idem_api.publish` is refused), a host still on the old
/// config refuses to start, and `idem migrate` no longer reports it.
#[tokio::test(flavor = "multi_thread")]
async fn remove_producer_ends_a_producer_dropped_from_the_config_its_topics_mapping_and_grant() {
    let env = Env::new(1).await;
    let out = kafka::create_topic(1).await;
    let role = env.app_role();
    env.create_app_role().await;
    let spec = HandlerSpec::billing(&env.topic, &env.provider.base_url());
    let with = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    add_producer(&with, &role, &[&out]);
    let admin = env.db.url.as_str();
    let migrated = idem(&["migrate", "--database-url", admin, "--config", path(&with)]);
    assert!(migrated.ok && migrated.stdout.contains("may publish as `orders`"), "{migrated:?}");

    // The application publishes; a host relays it.
    let app = env.app_pool().await;
    let child = host::spawn(&with, false, &[]);
    publish(&app, &out, "42", 42).await;
    published(&out, 1);
    host::signal(&child, "TERM");
    let (status, _) = host::wait_report(child);
    assert!(status.success(), "{status}");
    app.close().await;

    // Dropped from the config: reported, nothing changed.
    let without = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let migrated = idem(&["migrate", "--database-url", admin, "--config", path(&without)]);
    assert!(migrated.ok, "{migrated:?}");
    assert!(
        migrated.stdout.contains("`orders` is an outbox producer this config does not name")
            && migrated.stdout.contains("`idem outbox --remove-producer orders` ends it"),
        "reported: {migrated:?}"
    );
    assert_eq!(recorded(&env, &role).await, (1, 1, true), "only reported");

    // Refused while the config given still names it.
    let refused = idem(&["outbox", "--config", path(&with), "--remove-producer", "orders", "--database-url", admin]);
    assert!(!refused.ok, "{refused:?}");
    assert!(
        refused.stderr.contains("`orders` is a producer of this config: remove it from the config first"),
        "{refused:?}"
    );
    assert_eq!(recorded(&env, &role).await, (1, 1, true), "nothing ended");

    let ended = idem(&["outbox", "--config", path(&without), "--remove-producer", "orders", "--database-url", admin]);
    assert!(ended.ok, "{ended:?}");
    assert!(ended.stdout.contains(&format!("idem: outbox: role {role} may no longer publish")), "{ended:?}");
    assert!(ended.stdout.contains("idem: outbox: `orders` may publish to nothing (1 topic(s) removed)"), "{ended:?}");
    assert_eq!(recorded(&env, &role).await, (0, 0, false), "its topics, its role's mapping and its grant are gone");
    let app = env.app_pool().await;
    let e = sqlx::query("SELECT idem_api.publish($1, '43', 'order.confirmed.v1', '{}'::jsonb)")
        .bind(&out)
        .execute(&app)
        .await
        .map(drop)
        .expect_err("the ended producer's role publishes no more");
    assert!(e.to_string().contains("permission denied"), "{e}");
    app.close().await;

    // A host still on the old config: the database's record differs.
    let check = idem(&["check", "--config", path(&with)]);
    assert!(!check.ok, "{check:?}");
    let expected =
        format!("`orders`: the database allows it to publish nothing, the config {out} (order.confirmed.v1)");
    assert!(check.stderr.contains(&expected), "{check:?}");

    // Ended: no longer reported.
    let migrated = idem(&["migrate", "--database-url", admin, "--config", path(&without)]);
    assert!(migrated.ok, "{migrated:?}");
    assert!(!migrated.stdout.contains("`orders`"), "an ended producer is reported no more: {}", migrated.stdout);
    env.finish().await;
}
