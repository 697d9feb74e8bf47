//! The dead-letter topic as untrusted ground and as a topic that can say
//! no: replay applies only records idem sealed, a record the topic refuses
//! is dead-lettered as an envelope, a topic that refuses everything holds
//! its partition loudly until it is back.

use std::time::Duration;

use idem::pipeline::dlq_headers as h;
use idem::pipeline::replay::header;
use idem_tests::host::{self, HandlerSpec, order_payload};
use idem_tests::{kafka, wait_until};
use rdkafka::Message as _;

use super::failures::{dead_letter, idem_json, scenario};
use crate::{CHARGES, Env};

/// idem's headers for a record of `topic`/0 at `offset` dead-lettered by billing.
fn idem_headers(topic: &str, offset: &str, at: &str, replays: &'static [u8]) -> Vec<(&'static str, Vec<u8>)> {
    let mut headers = vec![
        (h::CLASS, b"permanent".to_vec()),
        (h::REASON, b"handler failed (permanent): provider said no".to_vec()),
        (h::ATTEMPTS, b"1".to_vec()),
        (h::FAILED_AT, at.as_bytes().to_vec()),
        (h::TOPIC, topic.as_bytes().to_vec()),
        (h::PARTITION, b"0".to_vec()),
        (h::OFFSET, offset.as_bytes().to_vec()),
        (h::TIMESTAMP, b"1764504000000".to_vec()),
        (h::HANDLER, b"billing".to_vec()),
        (h::MODULE, b"0000".to_vec()),
        (h::GROUP, b"billing".to_vec()),
    ];
    if !replays.is_empty() {
        headers.push((h::REPLAY_COUNT, replays.to_vec()));
    }
    headers
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_applies_only_sealed_records_and_no_forgery_supersedes_a_genuine_dead_letter() {
    let env = Env::new(1).await;
    let config = host::write_config(&env.db.url, &[env.billing()]);
    host::run_until_drained(&config).await;
    let dlq = format!("{}.billing.dlq", env.topic);
    let (genuine, unsealed, forged) = (
        idem_tests::host::order_payload(1).1,
        idem_tests::host::order_payload(2).1,
        idem_tests::host::order_payload(3).1,
    );
    let at = chrono::Utc::now().to_rfc3339();
    // A genuine dead letter of offset 0, sealed with the host's key.
    dead_letter(&env, &dlq, &genuine, 0).await;
    let as_refs = |hs: &[(&'static str, Vec<u8>)]| hs.iter().map(|(n, v)| (*n, v.clone())).collect::<Vec<_>>();
    let produce = |headers: Vec<(&'static str, Vec<u8>)>, payload: Vec<u8>| {
        let (producer, dlq) = (&env.producer, dlq.clone());
        async move {
            let refs: Vec<(&str, &[u8])> = headers.iter().map(|(n, v)| (*n, v.as_slice())).collect();
            kafka::produce_with_headers(producer, &dlq, 0, b"k", &payload, &refs).await;
        }
    };
    // An event that was never on the source topic, without a seal.
    produce(as_refs(&idem_headers(&env.topic, "1", &at, b"")), unsealed.clone()).await;
    // Another payload under offset 0's position, claiming 9 earlier
    // replays (it would supersede the genuine copy), sealed with another key.
    let mut other_key = as_refs(&idem_headers(&env.topic, "0", &at, b"9"));
    let wrong = idem::pipeline::DlqKeys::from_hex(&"ab".repeat(32), None).expect("key");
    let seal = wrong.seal(Some(b"k"), Some(&forged), other_key.iter().map(|(n, v)| (*n, Some(v.as_slice()))));
    other_key.push((h::SEAL, seal.into_bytes()));
    produce(other_key, forged.clone()).await;
    // The genuine record's seal copied onto another payload.
    let genuine_seal =
        kafka::read_all(&dlq).first().and_then(|m| header(m, h::SEAL)).expect("the genuine record's seal");
    let mut copied = as_refs(&idem_headers(&env.topic, "0", &at, b""));
    copied.push((h::SEAL, genuine_seal.into_bytes()));
    produce(copied, forged.clone()).await;
    // An unsealed copy of offset 0 claiming 5 replays.
    produce(as_refs(&idem_headers(&env.topic, "0", &at, b"5")), forged.clone()).await;

    let path = config.to_str().expect("path");
    let listing = idem_json(&["dlq", "list", "--config", path, "--handler", "billing", "--json"]);
    assert_eq!((listing["records"].as_u64(), listing["unauthenticated"].as_u64()), (Some(5), Some(4)), "{listing}");
    assert_eq!(listing["by_reason"].as_object().map(|r| r.values().filter_map(|v| v.as_u64()).sum()), Some(1));

    let strict = idem_json(&["dlq", "replay", "--config", path, "--handler", "billing", "--json"]);
    assert_eq!(
        ["applied", "unauthenticated", "superseded", "trusted_unsigned"].map(|k| strict[k].as_u64()),
        [Some(1), Some(4), Some(0), Some(0)],
        "only the sealed record ran: {strict}"
    );
    assert_eq!(env.count(CHARGES).await, 1);
    assert_eq!(env.count("SELECT count(*) FROM billing.charge WHERE order_id = 1").await, 1, "the genuine one");

    // --trust-unsigned runs the unsealed record that no sealed copy
    // covers; the unsealed copy of offset 0 loses to the sealed one
    // whatever replay count it claims, and forged seals never run.
    let trusting =
        idem_json(&["dlq", "replay", "--config", path, "--handler", "billing", "--trust-unsigned", "--json"]);
    assert_eq!(
        ["applied", "duplicates", "unauthenticated", "superseded", "trusted_unsigned"].map(|k| trusting[k].as_u64()),
        [Some(1), Some(1), Some(2), Some(1), Some(1)],
        "{trusting}"
    );
    assert_eq!(env.count("SELECT count(*) FROM billing.charge WHERE order_id = 3").await, 0, "never forged");
    assert_eq!(env.count(CHARGES).await, 2);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_with_a_dlq_and_no_key_refuses_to_start_naming_what_is_missing() {
    let env = Env::new(1).await;
    let config = host::write_config(&env.db.url, &[env.billing()]);
    let text = std::fs::read_to_string(&config).expect("config");
    let check = |text: String, env_key: Option<&str>| {
        std::fs::write(&config, text).expect("config");
        let mut cmd = std::process::Command::new(idem_tests::idem_bin());
        cmd.args(["check", "--config", config.to_str().expect("path")]).env_remove("IDEM_DLQ_KEY");
        if let Some(key) = env_key {
            cmd.env("IDEM_DLQ_KEY", key);
        }
        let out = cmd.output().expect("idem check");
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let without = text.replace("key_file = \"dlq.key\"\n", "");
    let (ok, stderr) = check(without.clone(), None);
    assert!(!ok && stderr.contains("$IDEM_DLQ_KEY is not set"), "{stderr}");
    let (ok, stderr) = check(without.clone(), Some("0011"));
    assert!(!ok && stderr.contains("$IDEM_DLQ_KEY is 2 bytes"), "{stderr}");
    assert!(!stderr.contains("0011"), "the key is never printed: {stderr}");
    let (ok, stderr) = check(without, Some(idem_tests::DLQ_KEY));
    assert!(ok, "the variable is enough: {stderr}");
    let (ok, stderr) = check(text.replace("dlq.key", "no-such.key"), None);
    assert!(!ok && stderr.contains("no-such.key"), "{stderr}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_the_dlq_topic_refuses_as_too_large_is_dead_lettered_as_its_envelope() {
    let env = Env::new(1).await;
    let spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    let dlq = format!("{}.scenarios.dlq", env.topic);
    // The source record fits this DLQ; with idem's headers its copy does not.
    kafka::create_topic_with(&dlq, 1, &[("max.message.bytes", "4000")]).await;
    let (_, big) = scenario("write-then-fail", serde_json::json!({ "pad": "x".repeat(3_600) }));
    assert!(big.len() < 3_800, "the source record alone fits ({} bytes)", big.len());
    let offset = env.send(0, &big).await;
    env.send(0, &scenario("ok", serde_json::json!({})).1).await;
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let report = host::run_until_drained(&config).await;
    assert_eq!((report[0].dead_lettered, report[0].enveloped, report[0].processed), (1, 1, 1), "{report:?}");
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(2)], "the partition moved on");

    let dead = kafka::read_all(&dlq);
    assert_eq!(dead.len(), 1);
    assert_eq!(header(&dead[0], h::ENVELOPE).as_deref(), Some("1"));
    assert_eq!(header(&dead[0], h::CLASS).as_deref(), Some("permanent"), "why it failed, as for any dead letter");
    let keys = idem::pipeline::DlqKeys::from_hex(idem_tests::DLQ_KEY, None).expect("key");
    assert_eq!(idem::pipeline::replay::authenticity(&keys, &dead[0]), idem::pipeline::dlq::seal::Authenticity::Sealed);
    let envelope: serde_json::Value = serde_json::from_slice(dead[0].payload().expect("value")).expect("json");
    assert_eq!((envelope["topic"].as_str(), envelope["offset"].as_i64()), (Some(env.topic.as_str()), Some(offset)));
    use sha2::Digest as _;
    assert_eq!(envelope["value"]["sha256"].as_str(), Some(hex::encode(sha2::Sha256::digest(&big)).as_str()));
    assert!(envelope["refused"].as_str().is_some_and(|r| r.contains("too large")), "{envelope}");

    let path = config.to_str().expect("path");
    let replayed = idem_json(&["dlq", "replay", "--config", path, "--handler", "scenarios", "--json"]);
    assert_eq!((replayed["envelopes"].as_u64(), replayed["applied"].as_u64()), (Some(1), Some(0)), "{replayed}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dlq_topic_that_is_gone_holds_its_partition_loudly_until_it_is_back() {
    let env = Env::new(1).await;
    let spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let running = host::InProcess::start(&config);
    let dlq = format!("{}.scenarios.dlq", env.topic);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !host::partition_gauge(&host::metrics(&config).await, "idem_partition_assigned", 0, "1") {
        assert!(std::time::Instant::now() < deadline, "the partition was not assigned within 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    kafka::delete_topic(&dlq).await;
    env.send(0, &scenario("write-then-fail", serde_json::json!({})).1).await;
    env.send(0, &scenario("ok", serde_json::json!({})).1).await;

    let refused = |lines: &[String]| {
        lines.iter().any(|l| l.starts_with("idem_dlq_refused_total{handler=\"scenarios\"}") && !l.ends_with(" 0"))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !refused(&host::metrics(&config).await) {
        assert!(std::time::Instant::now() < deadline, "no idem_dlq_refused_total within 120 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![None], "the partition waits at the record");
    assert_eq!(env.count("SELECT count(*) FROM scenario.effect").await, 0, "nothing after it ran");

    kafka::create_topic_like(&dlq, &env.topic);
    wait_until("both resolved once the topic is back", || {
        kafka::committed(&spec.group_id, &env.topic, 1) == vec![Some(2)]
    })
    .await;
    let report = &running.stop().await[0];
    assert_eq!((report.dead_lettered, report.processed), (1, 1), "{report:?}");
    assert!(report.dlq_refused >= 1, "{report:?}");
    assert_eq!(kafka::read_all(&dlq).len(), 1, "the record, once");
    env.finish().await;
}

/// A dry run answers what the replay would do (a far-future id fails again
/// in both), and copies of one event in one replay run once, even under
/// `--force` where no dedup row guards an event older than the retention.
#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_answers_like_the_replay_and_copies_of_one_event_run_once() {
    let env = Env::new(1).await;
    let config = host::write_config(&env.db.url, &[env.billing()]);
    host::run_until_drained(&config).await;
    let dlq = format!("{}.billing.dlq", env.topic);
    let at = |days: i64| {
        let secs = (chrono::Utc::now() + chrono::Duration::days(days)).timestamp() as u64;
        uuid::Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, secs, 0))
    };
    let order = |id: uuid::Uuid, n: i64| {
        let mut payload: serde_json::Value = serde_json::from_slice(&order_payload(n).1).expect("json");
        payload["eventId"] = id.to_string().into();
        payload.to_string().into_bytes()
    };
    // An id a year ahead, and one event (30 days old, past the 7-day
    // retention) dead-lettered from two offsets.
    dead_letter(&env, &dlq, &order(at(365), 1), 0).await;
    let old = order(at(-30), 2);
    dead_letter(&env, &dlq, &old, 1).await;
    dead_letter(&env, &dlq, &old, 2).await;
    let path = config.to_str().expect("path");
    let dry = idem_json(&["dlq", "replay", "--config", path, "--handler", "billing", "--dry-run", "--force", "--json"]);
    let real = idem_json(&["dlq", "replay", "--config", path, "--handler", "billing", "--force", "--json"]);
    for (what, r) in [("dry run", &dry), ("replay", &real)] {
        assert_eq!(
            ["applied", "duplicates", "failed_again"].map(|k| r[k].as_u64()),
            [Some(1), Some(1), Some(1)],
            "{what}: the future id fails, the old event runs once: {r}"
        );
    }
    assert_eq!(env.count("SELECT count(*) FROM billing.charge WHERE order_id = 2").await, 1);
    assert_eq!(env.count("SELECT count(*) FROM billing.charge WHERE order_id = 1").await, 0);
    env.finish().await;
}
