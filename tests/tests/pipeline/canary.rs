//! Canaries (`idem deploy --canary N%`): a version runs a stable share of
//! the keys beside the active one; a worse one is rolled back by the hosts
//! themselves; exactly-once, per-key order and the version recorded per
//! event hold across the split and the rollback.

use std::collections::BTreeMap;
use std::time::Duration;

use idem_tests::host::{self, InProcess};
use idem_tests::{guests, kafka};
use serde_json::Value;

use super::Env;
use super::operate::get;

/// The canary's bucket of `key` as the host computes it: the first 8
/// bytes of its SHA-256, modulo 100.
fn bucket(key: &str) -> u64 {
    let digest = <sha2::Sha256 as sha2::Digest>::digest(key.as_bytes());
    u64::from_be_bytes(digest[..8].try_into().expect("8 bytes")) % 100
}

/// Order `o`'s key: one of 50 customers.
fn key_of(order: i64) -> String {
    format!("customer-{}", order % 50)
}

/// Orders `from..from + n`, keyed by customer, in chunks of 20 every 100 ms.
async fn stream(env: &Env, from: i64, n: i64) {
    let orders: Vec<i64> = (from..from + n).collect();
    for chunk in orders.chunks(20) {
        let records: Vec<(i32, String, Vec<u8>)> =
            chunk.iter().map(|o| ((bucket(&key_of(*o)) % 2) as i32, key_of(*o), host::order_payload(*o).1)).collect();
        kafka::produce_all_keyed(&env.producer, &env.topic, &records).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `idem …` with `args`: its exit status and everything it printed.
fn idem(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(idem_tests::idem_bin()).args(args).output().expect("idem runs");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Per charged order: its key and the version that applied it, in the
/// order of its partition's offsets.
async fn applied(env: &Env) -> Vec<(String, i64, i32)> {
    let rows: Vec<(i64, i32)> = sqlx::query_as(
        "SELECT c.order_id, pe.module_version FROM billing.charge c \
         JOIN idem.processed_event pe ON pe.event_id = c.event_id AND pe.consumer = 'billing' \
         ORDER BY pe.\"partition\", pe.\"offset\"",
    )
    .fetch_all(&env.db.pool)
    .await
    .expect("charges");
    rows.into_iter().map(|(order, version)| (key_of(order), order, version)).collect()
}

/// A host of billing, the candidate (`mode`) as its canary on `share` of
/// the keys, `n` orders streamed, and the canary rolled back by the host.
async fn canary_rolled_back(env: &Env, mode: &str, share: &str, n: i64) -> (InProcess, String) {
    let mut spec = env.billing();
    spec.config.push(("candidate".into(), mode.into()));
    let config = host::write_config(&env.db.url, &[spec]);
    let running = InProcess::start(&config);
    let admin = host::admin_url(&config);
    idem_tests::wait_until_async("the admin API answers", || async { get(&admin, "/healthz").await.is_some() }).await;
    let path = guests::component("candidate");
    let (ok, out) =
        idem(&["deploy", "--canary", share, "--handler", "billing", path.to_str().expect("path"), "--url", &admin]);
    assert!(ok && out.contains(&format!("it runs {share} of the keys; the rest stay on version 1")), "{out}");
    stream(env, 1, n).await;
    idem_tests::wait_until_async("the canary rolled back", || async {
        env.count("SELECT count(*) FROM idem.canary_verdict WHERE verdict = 'rolled back'").await == 1
    })
    .await;
    (running, admin)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_canary_failing_30_percent_is_rolled_back_by_itself_and_every_event_is_applied_once_by_the_version_recorded()
{
    let env = Env::new(2).await;
    let (running, admin) = canary_rolled_back(&env, "flaky", "20%", 600).await;
    let n = 600;
    let dead = "SELECT count(*) FROM idem.dead_letter WHERE handler = 'billing'";
    idem_tests::wait_until_async("every order charged or dead-lettered", || async {
        env.count("SELECT count(*) FROM billing.charge").await + env.count(dead).await >= n
    })
    .await;
    let reason: String = sqlx::query_scalar("SELECT reason FROM idem.canary_verdict")
        .fetch_one(&env.db.pool)
        .await
        .expect("the verdict");
    assert!(reason.starts_with("version 2 failed ") && reason.contains("than version 1 on this host"), "{reason}");
    let (ok, out) = idem(&["status", "--once", "--url", &admin]);
    assert!(ok && out.contains("last canary of billing: version 2 rolled back at"), "{out}");
    // More orders after the rollback: every key on version 1.
    stream(&env, n + 1, 100).await;
    idem_tests::wait_until_async("the later orders charged", || async {
        env.count("SELECT count(*) FROM billing.charge WHERE order_id > 600").await == 100
    })
    .await;
    running.stop().await;

    let rows = applied(&env).await;
    let charged = rows.len() as i64;
    assert_eq!(env.count("SELECT count(DISTINCT order_id) FROM billing.charge").await, charged, "each order once");
    assert_eq!(env.provider.charges() as i64, charged, "one provider charge per applied order");
    assert_eq!(charged + env.count(dead).await, n + 100, "every order applied or dead-lettered, none lost");
    // Each dead letter names the module that failed it: the canary's.
    let candidate = std::fs::read(guests::component("candidate")).expect("the candidate");
    let canary_sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&candidate));
    let letters = kafka::read_all(&format!("{}.billing.dlq", env.topic));
    assert!(!letters.is_empty(), "the canary's failures were dead-lettered");
    for letter in &letters {
        let module = rdkafka::message::Headers::iter(rdkafka::Message::headers(letter).expect("headers"))
            .find(|h| h.key == "idem.module.sha256")
            .and_then(|h| h.value)
            .map(|v| String::from_utf8_lossy(v).into_owned());
        assert_eq!(module.as_deref(), Some(canary_sha.as_str()), "a dead letter names another module");
    }
    let mut per_key: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (key, order, version) in &rows {
        if bucket(key) >= 20 {
            assert_eq!(*version, 1, "order {order}: key {key} is not the canary's, yet version {version} applied it");
        } else if *version == 2 {
            assert!(order % 10 >= 3, "order {order}: version 2 fails it, yet it applied it");
        }
        per_key.entry(key).or_default().push(*version);
    }
    // Per key, in offset order: version 2 up to the rollback, 1 after.
    for (key, versions) in &per_key {
        let back = versions.iter().position(|v| *v == 1).unwrap_or(versions.len());
        assert!(versions[back..].iter().all(|v| *v == 1), "key {key} went back to version 2: {versions:?}");
    }
    let on_two = rows.iter().filter(|r| r.2 == 2).count();
    assert!(on_two > 0, "the canary applied its keys' good orders before the rollback");
    assert!(rows.iter().filter(|r| r.1 > 600).all(|r| r.2 == 1), "after the rollback every key runs on version 1");
    let dead_keys: Vec<String> =
        sqlx::query_scalar("SELECT record_key FROM idem.dead_letter WHERE handler = 'billing'")
            .fetch_all(&env.db.pool)
            .await
            .expect("dead letters");
    assert!(dead_keys.iter().all(|k| bucket(k) < 20), "only the canary's keys failed: {dead_keys:?}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_healthy_canary_runs_its_keys_alone_and_is_promoted_by_hand() {
    let env = Env::new(2).await;
    let config = host::write_config(&env.db.url, &[env.billing()]);
    let running = InProcess::start(&config);
    let admin = host::admin_url(&config);
    idem_tests::wait_until_async("the admin API answers", || async { get(&admin, "/healthz").await.is_some() }).await;
    let same = std::env::temp_dir().join(format!("idem-canary-same-{}.wasm", std::process::id()));
    let billing = std::fs::read(guests::component("billing")).expect("billing component");
    std::fs::write(&same, guests::with_marker(&billing, "v2")).expect("write the component");
    let (ok, out) =
        idem(&["deploy", "--canary", "20%", "--handler", "billing", same.to_str().expect("path"), "--url", &admin]);
    assert!(ok, "{out}");
    stream(&env, 1, 200).await;
    env.charged(200, Duration::from_secs(60)).await;
    let text = get(&admin, "/handlers/billing/canary").await.unwrap_or_default();
    let canary: Value = serde_json::from_str(&text).expect("json");
    assert_eq!((canary["canary"]["version"].as_i64(), canary["canary"]["percent"].as_i64()), (Some(2), Some(20)));
    for (key, order, version) in applied(&env).await {
        let expected = if bucket(&key) < 20 { 2 } else { 1 };
        assert_eq!(version, expected, "order {order} of key {key} (bucket {})", bucket(&key));
    }
    let (ok, out) = idem(&["deploy", "--promote", "--handler", "billing", "--url", &admin]);
    assert!(ok && out.contains("version 2 is active"), "{out}");
    stream(&env, 201, 50).await;
    env.charged(250, Duration::from_secs(60)).await;
    running.stop().await;
    let after = env
        .count(
            "SELECT count(*) FROM billing.charge c JOIN idem.processed_event pe ON pe.event_id = c.event_id \
                           WHERE c.order_id > 200 AND pe.module_version = 2",
        )
        .await;
    assert_eq!(after, 50, "after the promotion every key runs on version 2");
    let verdict: String =
        sqlx::query_scalar("SELECT verdict FROM idem.canary_verdict").fetch_one(&env.db.pool).await.expect("verdict");
    assert_eq!(verdict, "promoted");
    let _ = std::fs::remove_file(&same);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_canary_taking_ten_times_longer_is_rolled_back_by_itself_and_every_order_is_applied_once() {
    let env = Env::new(2).await;
    let n = 300;
    let (running, _) = canary_rolled_back(&env, "lazy", "50%", n).await;
    let reason: String = sqlx::query_scalar("SELECT reason FROM idem.canary_verdict")
        .fetch_one(&env.db.pool)
        .await
        .expect("the verdict");
    assert!(reason.starts_with("version 2 took ") && reason.contains("ms per execution on average"), "{reason}");
    idem_tests::wait_until_async("every order charged", || async {
        env.count("SELECT count(*) FROM billing.charge").await == n
    })
    .await;
    running.stop().await;
    assert_eq!(env.count("SELECT count(DISTINCT order_id) FROM billing.charge").await, n, "each order once");
    assert_eq!(env.provider.charges() as i64, n, "one provider charge per order");
    env.finish().await;
}
