//! `idem outbox --failed` and `--redrive [--id N]` against a running host:
//! rows the broker refused for good, listed with their reason, published
//! once each when re-driven after the cause is fixed.

use idem_tests::host;
use idem_tests::kafka;
use uuid::Uuid;

use super::{Env, emitter, idem, key, path, published, scenario, value};

/// One outbox row as this test looks at it.
#[derive(Debug, sqlx::FromRow)]
struct Row {
    id: i64,
    key: String,
    event_id: Uuid,
    published: bool,
    failed: bool,
    failure: Option<String>,
}

async fn rows(env: &Env, topic: &str) -> Vec<Row> {
    sqlx::query_as(
        "SELECT id, key, event_id, published_at IS NOT NULL AS published, failed_at IS NOT NULL AS failed, failure \
         FROM idem.outbox WHERE topic = $1 ORDER BY id",
    )
    .bind(topic)
    .fetch_all(&env.db.pool)
    .await
    .unwrap_or_else(|e| panic!("outbox rows: {e}"))
}

/// Sends a scenario event emitting `amount` to `topic` under `key`, padded
/// with `pad` (a field the topic's schema allows); returns the event's id.
async fn emit(env: &Env, topic: &str, key: &str, amount: i64, pad: &str) -> Uuid {
    let emit = serde_json::json!({ "topic": topic, "key": key, "event_type": "test.emitted.v1",
                                   "payload": { "amount": amount, "pad": pad } });
    let (id, payload) = scenario("emit", serde_json::json!({ "emits": [emit] }));
    kafka::produce(&env.producer, &env.topic, 0, key, &payload).await;
    id
}

/// The event id the guest was told for its first emit.
async fn told(env: &Env, event: Uuid) -> String {
    let note: String =
        sqlx::query_scalar("SELECT note FROM scenario.effect WHERE event_id = $1 AND note LIKE 'emitted 0 %'")
            .bind(event)
            .fetch_one(&env.db.pool)
            .await
            .unwrap_or_else(|e| panic!("the guest's note: {e}"));
    note.rsplit(' ').next().unwrap_or_default().to_owned()
}

/// Sets `max.message.bytes` of `topic` (Kafka's AlterConfigs), as an
/// operator fixing the cause would.
async fn allow_large_records(topic: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka::brokers())
        .create()
        .unwrap_or_else(|e| panic!("admin client: {e}"));
    let change = AlterConfig::new(ResourceSpecifier::Topic(topic)).set("max.message.bytes", "1048588");
    let options = AdminOptions::new().request_timeout(Some(std::time::Duration::from_secs(10)));
    let results = admin.alter_configs([&change], &options).await.unwrap_or_else(|e| panic!("alter {topic}: {e}"));
    for r in results {
        r.unwrap_or_else(|(resource, code)| panic!("alter {resource:?}: {code}"));
    }
}

/// README, "The outbox": a row the broker refuses for good (too large) "is
/// marked failed with the reason …; `idem outbox --failed` shows it and
/// `--redrive` makes it pending again once the cause is fixed", and `idem
/// outbox` "prints each producer's pending rows …, published and failed
/// counts, and which host's relay holds the lease". Two records too large
/// for their topic fail; the listing names each row, its topic, key, event
/// id and the broker's reason; fixed, a failed row is not sent again until
/// re-driven; `--redrive --id` re-drives that row only, `--redrive` the
/// rest, and each reaches the topic exactly once, with the event id its
/// guest was told. Without the listing, the re-drive or the `--id` filter
/// a row would stay failed, be listed wrongly, or be published twice.
#[tokio::test(flavor = "multi_thread")]
async fn idem_outbox_lists_failed_rows_with_their_reason_and_redrive_publishes_each_once_after_the_fix() {
    let env = Env::new(1).await;
    let tight = idem_tests::unique_name("idem_topic");
    kafka::create_topic_with(&tight, 1, &[("max.message.bytes", "2000")]).await;
    let out = kafka::create_topic(1).await;
    let config = host::write_config(&env.db.url, &[emitter(&env, &[&tight, &out])]);
    env.db.allow_emits(&config).await;
    let config_arg = path(&config);
    // 6.4 KB of ids: more than `tight` takes, compressed or not.
    let pad: String = (0..200).map(|_| Uuid::now_v7().simple().to_string()).collect();
    let big = [emit(&env, &tight, "big-1", 1, &pad).await, emit(&env, &tight, "big-2", 2, &pad).await];
    emit(&env, &out, "small", 3, "").await;

    let child = host::spawn(&config, false, &[]);
    idem_tests::wait_until_async("both large rows failed and the small one published", || async {
        let failed = rows(&env, &tight).await.iter().filter(|r| r.failed).count();
        failed == 2 && rows(&env, &out).await.iter().all(|r| r.published)
    })
    .await;
    let failed = rows(&env, &tight).await;
    for (row, event) in failed.iter().zip(big) {
        assert_eq!(row.event_id.to_string(), told(&env, event).await, "the id the guest was told");
    }

    // The listing: the producer's counts, the relay's holder (this child),
    // and each failed row with its reason.
    let listed = idem(&["outbox", "--config", config_arg, "--failed"]);
    assert!(listed.ok, "{listed:?}");
    let summary = listed.stdout.lines().find(|l| l.starts_with("scenarios: ")).unwrap_or_default();
    assert!(summary.starts_with("scenarios: 0 pending, 1 published, 2 failed; relay: "), "{}", listed.stdout);
    let holder = summary.rsplit("relay: ").next().unwrap_or_default();
    assert!(super::held_by(holder, child.id()), "the running host's relay holds the lease: {summary}");
    for row in &failed {
        let start = format!("  failed #{} {tight} key {} event {} at ", row.id, row.key, row.event_id);
        let line = listed.stdout.lines().find(|l| l.starts_with(&start));
        let line = line.unwrap_or_else(|| panic!("no `{start}…` in:\n{}", listed.stdout));
        let reason = row.failure.as_deref().unwrap_or_default();
        assert!(reason.to_lowercase().contains("too large"), "the broker's reason: {reason}");
        assert!(line.ends_with(&format!(": {reason}")), "the row's reason: {line}");
    }
    let json = idem(&["outbox", "--config", config_arg, "--failed", "--json"]);
    let answer: serde_json::Value =
        serde_json::from_str(json.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {json:?}"));
    let producer = &answer["producers"][0];
    let counts = |name: &str| producer[name].as_i64();
    assert_eq!(producer["producer"].as_str(), Some("scenarios"), "{answer}");
    assert_eq!((counts("pending"), counts("published"), counts("failed")), (Some(0), Some(1), Some(2)), "{answer}");
    let ids: Vec<i64> = answer["failed"].as_array().into_iter().flatten().filter_map(|f| f["id"].as_i64()).collect();
    assert_eq!(ids, failed.iter().map(|r| r.id).collect::<Vec<_>>(), "{answer}");
    // The host's admin API (and the console's Outbox page) says the same.
    let admin = host::admin_url(&config);
    let client = reqwest::Client::new();
    let shown: serde_json::Value =
        client.get(format!("{admin}/outbox")).send().await.expect("GET /outbox").json().await.expect("json");
    assert_eq!(shown["producers"][0]["failed"], 2, "{shown}");
    assert_eq!(shown["producers"][0]["holder"], producer["holder"], "{shown}");
    let api_ids: Vec<i64> = shown["failed"].as_array().into_iter().flatten().filter_map(|f| f["id"].as_i64()).collect();
    assert_eq!(api_ids, ids, "{shown}");
    // And `idem outbox --url`, through that API, prints what --config does.
    let via_host = idem(&["outbox", "--url", &admin, "--failed"]);
    assert!(via_host.ok, "{via_host:?}");
    let lines = |out: &str| out.lines().map(|l| l.split(" at ").next().unwrap_or(l).to_owned()).collect::<Vec<_>>();
    assert_eq!(lines(&via_host.stdout), lines(&listed.stdout), "{via_host:?}");

    // The cause fixed, a failed row stays failed until re-driven: a later
    // row published shows the relay went round since.
    allow_large_records(&tight).await;
    emit(&env, &out, "after-fix", 4, "").await;
    published(&out, 2);
    assert!(kafka::read_all(&tight).is_empty(), "a failed row is not sent again by itself");
    assert!(rows(&env, &tight).await.iter().all(|r| r.failed), "nor made pending");

    // That row only, through the host's API: a redrive names its rows, or
    // says "all" outright.
    let redrive = |body: serde_json::Value| {
        let request = client.post(format!("{admin}/outbox/redrive")).json(&body);
        async move {
            let response = request.send().await.expect("POST /outbox/redrive");
            (response.status().as_u16(), response.json::<serde_json::Value>().await.unwrap_or_default())
        }
    };
    let (status, refused) = redrive(serde_json::json!({})).await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused["error"].as_str().is_some_and(|e| e.contains("all: true")), "{refused}");
    let (status, redriven) = redrive(serde_json::json!({ "ids": [failed[0].id] })).await;
    assert_eq!((status, redriven["redriven"].as_i64()), (200, Some(1)), "{redriven}");
    let records = published(&tight, 1);
    idem_tests::wait_until_async("the re-driven row is marked published", || async {
        rows(&env, &tight).await[0].published
    })
    .await;
    let after = rows(&env, &tight).await;
    assert!(!after[0].failed && after[0].failure.is_none(), "{after:?}");
    assert!(after[1].failed && !after[1].published, "the other row was not re-driven: {after:?}");
    assert_eq!(records.len(), 1, "only the re-driven row reached the topic");

    // Then every failed row.
    let redriven = idem(&["outbox", "--config", config_arg, "--redrive"]);
    assert!(redriven.stdout.contains("idem: outbox: 1 failed row(s) made pending again"), "{redriven:?}");
    idem_tests::wait_until_async("every row is marked published", || async {
        rows(&env, &tight).await.iter().all(|r| r.published && !r.failed)
    })
    .await;
    let records = kafka::read_all(&tight);
    let sent: Vec<(String, String)> =
        records.iter().map(|m| (key(m), value(m)["eventId"].as_str().unwrap_or_default().to_owned())).collect();
    let expected: Vec<(String, String)> = failed.iter().map(|r| (r.key.clone(), r.event_id.to_string())).collect();
    assert_eq!(sent, expected, "each re-driven row reached the topic exactly once, with its event id");
    assert!(records.iter().all(|m| value(m)["pad"] == pad.as_str()), "as written");

    let listed = idem(&["outbox", "--config", config_arg, "--failed"]);
    assert!(listed.stdout.contains("scenarios: 0 pending, 4 published, 0 failed; relay: "), "{listed:?}");
    assert!(!listed.stdout.contains("failed #"), "nothing is listed as failed any more: {listed:?}");
    host::signal(&child, "TERM");
    let (status, _) = host::wait_report(child);
    assert!(status.success(), "{status}");
    env.finish().await;
}
