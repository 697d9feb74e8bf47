//! `[outbox] retention`: published rows older than it are deleted by the
//! lease holder; younger ones, and failed rows, are kept.

use idem_tests::kafka;

use crate::{Env, Host, append_config, emit, wait_rows};

/// README: "Published rows are deleted after `[outbox] retention` by the
/// lease holder, in chunks, once a minute", and a failed row stays for
/// `idem outbox --failed` to show and `--redrive`. A first host publishes
/// three rows and fails a fourth (too large for its topic); the test then
/// ages two of the published rows past the configured retention (1 minute:
/// 2 minutes), one to within it (30 s) and the failed row by two days, as
/// time passing would, and starts a second host, whose relay cleans on its
/// first round as lease holder. Exactly the two rows past the retention
/// must go: a relay that ignored the configured retention (the default is
/// a day), deleted by age whatever the row's state, or never cleaned,
/// fails this.
#[tokio::test(flavor = "multi_thread")]
async fn published_rows_past_the_retention_are_deleted_and_younger_and_failed_rows_are_kept() {
    let env = Env::new().await;
    let out = idem_tests::unique_name("idem_topic");
    kafka::create_topic_with(&out, 1, &[("max.message.bytes", "2048")]).await;
    let config = env.config(env.emitter(&[&out])).await;
    append_config(&config, "[outbox]\nretention = \"1m\"\n");

    env.emit(vec![emit(&out, "big", 1, 4_000)]).await;
    let first = Host::start(&config);
    wait_rows(&env, "the large row failed", |rows| rows.len() == 1 && rows[0].failed).await;
    env.emit(vec![emit(&out, "old1", 2, 0), emit(&out, "old2", 3, 0), emit(&out, "young", 4, 0)]).await;
    let rows =
        wait_rows(&env, "three rows published", |rows| rows.len() == 4 && rows[1..].iter().all(|r| r.published)).await;
    first.stop();

    for (key, age) in [("old1", "2 minutes"), ("old2", "2 minutes"), ("young", "30 seconds")] {
        sqlx::query(&format!("UPDATE idem.outbox SET published_at = now() - interval '{age}' WHERE key = $1"))
            .bind(key)
            .execute(&env.db.pool)
            .await
            .expect("aged");
    }
    sqlx::query("UPDATE idem.outbox SET created_at = created_at - interval '2 days', failed_at = now() - interval '2 days' WHERE failed_at IS NOT NULL")
        .execute(&env.db.pool)
        .await
        .expect("aged");

    let second = Host::start(&config);
    let kept = wait_rows(&env, "the rows past the retention are deleted", |rows| rows.len() < 4).await;
    second.stop();
    let expected: Vec<_> = rows.iter().filter(|r| r.key == "big" || r.key == "young").cloned().collect();
    assert_eq!(kept, expected, "the failed row and the row within the retention are kept, the others deleted");
    assert_eq!(env.rows().await, expected, "and nothing more went while the host ran");
    env.finish().await;
}
