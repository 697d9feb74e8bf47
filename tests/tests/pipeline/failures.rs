//! Failures lose nothing and stall nothing: retries that reach the guest,
//! outages that spend no attempts, the dead-letter topic and its headers.

use std::time::Duration;

use idem::pipeline::dlq_headers as h;
use idem::pipeline::replay::header;
use idem_tests::host::{self, HandlerSpec, order_payload};
use idem_tests::kafka;
use idem_tests::provider::Fault;
use rdkafka::Message as _;
use rdkafka::message::Headers as _;

use idem_tests::wait_until;

use crate::{CHARGES, DISTINCT_ORDERS, Env};

pub(crate) fn scenario(name: &str, extra: serde_json::Value) -> (uuid::Uuid, Vec<u8>) {
    let id = uuid::Uuid::now_v7();
    let mut payload = serde_json::json!({
        "eventId": id.to_string(), "eventType": "test.scenario.v1",
        "occurredAt": "2026-11-30T12:00:00Z", "scenario": name,
    });
    if let (Some(p), Some(e)) = (payload.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    (id, payload.to_string().into_bytes())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retryable_failure_is_retried_with_the_attempt_reaching_the_guest_then_applied_once() {
    let env = Env::new(1).await;
    let (id, payload) = scenario("retry-until", serde_json::json!({ "succeed_at": 3 }));
    env.send(0, &payload).await;
    let spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.retries, r.failed, r.dead_lettered), (1, 2, 0, 0), "{r:?}");
    let mut labels: Vec<String> = env.provider.keys().into_iter().flatten().collect();
    labels.sort();
    let expected: Vec<String> = (1..=3).map(|a| format!("{id}:attempt{a}")).collect();
    assert_eq!(labels, expected, "the guest saw attempts 1, 2, 3");
    assert_eq!(env.count("SELECT count(*) FROM scenario.effect WHERE note = 'start'").await, 1, "applied once");
    assert!(kafka::read_all(&format!("{}.scenarios.dlq", env.topic)).is_empty());
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn permanent_failures_and_invalid_records_reach_the_dlq_once_byte_for_byte_and_the_partition_flows_on() {
    let env = Env::new(1).await;
    let (_, fail) = scenario("write-then-fail", serde_json::json!({}));
    let (_, trap) = scenario("write-then-trap", serde_json::json!({}));
    let (_, ok) = scenario("ok", serde_json::json!({}));
    let invalid = b"not json at all".to_vec();
    let mut offsets = Vec::new();
    for (i, payload) in [&invalid, &fail, &trap, &ok].into_iter().enumerate() {
        let key = format!("key-{i}");
        let trace = format!("trace-{i}");
        offsets.push(
            kafka::produce_with_headers(
                &env.producer,
                &env.topic,
                0,
                key.as_bytes(),
                payload,
                // A producer's headers named like idem's own (forged
                // provenance and reason) are kept apart in the DLQ copy.
                &[
                    ("traceparent", trace.as_bytes()),
                    (h::REASON, b"forged reason"),
                    (h::OFFSET, b"999999"),
                    ("source.note", b"kept"),
                ],
            )
            .await,
        );
    }
    let spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.invalid, r.failed, r.dead_lettered, r.processed, r.retries), (1, 2, 3, 1, 0), "{r:?}");
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(4)], "the partition flowed on");
    assert_eq!(env.count("SELECT count(*) FROM scenario.effect").await, 1, "only the ok event's effect");

    let dead = kafka::read_all(&format!("{}.scenarios.dlq", env.topic));
    assert_eq!(dead.len(), 3, "each failed record once");
    for (i, (message, (payload, class, attempts))) in
        dead.iter().zip([(&invalid, "invalid", "0"), (&fail, "permanent", "1"), (&trap, "permanent", "1")]).enumerate()
    {
        assert_eq!(message.payload(), Some(payload.as_slice()), "value byte for byte");
        assert_eq!(message.key(), Some(format!("key-{i}").as_bytes()), "key kept");
        let first =
            message.headers().and_then(|hs| hs.iter().next()).map(|x| (x.key.to_owned(), x.value.map(<[u8]>::to_vec)));
        assert_eq!(
            first,
            Some(("traceparent".to_owned(), Some(format!("trace-{i}").into_bytes()))),
            "headers kept first"
        );
        assert_eq!(header(message, h::CLASS).as_deref(), Some(class));
        assert_eq!(header(message, h::ATTEMPTS).as_deref(), Some(attempts));
        assert_eq!(header(message, h::TOPIC).as_deref(), Some(env.topic.as_str()));
        assert_eq!(header(message, h::PARTITION).as_deref(), Some("0"));
        assert_eq!(header(message, h::OFFSET), Some(offsets[i].to_string()));
        assert_eq!(header(message, h::HANDLER).as_deref(), Some("scenarios"));
        assert_eq!(header(message, h::GROUP).as_deref(), Some(spec.group_id.as_str()));
        assert_eq!(header(message, h::MODULE).map(|m| m.len()), Some(64), "the module's sha256");
        assert!(header(message, h::TIMESTAMP).is_some_and(|t| t.parse::<i64>().is_ok()));
        assert!(header(message, h::FAILED_AT).is_some());
        assert!(header(message, h::REASON).is_some_and(|r| !r.is_empty() && r != "forged reason"));
        let named = |name: &str| message.headers().map_or(0, |hs| hs.iter().filter(|x| x.key == name).count());
        assert_eq!((named(h::REASON), named(h::OFFSET)), (1, 1), "one of each, idem's");
        assert_eq!(header(message, &format!("source.{}", h::REASON)).as_deref(), Some("forged reason"));
        assert_eq!(header(message, "source.source.note").as_deref(), Some("kept"), "escaped, so unescaped exactly");
        let keys = idem::pipeline::DlqKeys::from_hex(idem_tests::DLQ_KEY, None).expect("key");
        let last = message.headers().and_then(|hs| hs.iter().last()).map(|x| x.key.to_owned());
        assert_eq!(last.as_deref(), Some(h::SEAL), "the seal comes last");
        assert_eq!(
            idem::pipeline::replay::authenticity(&keys, message),
            idem::pipeline::dlq::seal::Authenticity::Sealed,
            "sealed with the host's key"
        );
    }
    env.finish().await;
}

/// The design notes' charge-then-reset, on 1 charge in 25: the host
/// re-sends each with its key, so no event fails, no batch rolls back,
/// nothing is charged twice. (Re-sends off, each would cost an attempt.)
#[tokio::test(flavor = "multi_thread")]
async fn a_provider_dropping_connections_costs_re_sends_not_failures() {
    let env = Env::new(3).await;
    env.send_orders(300).await;
    env.provider.set_fault(Fault::ResetEvery(25));
    let spec = env.billing();
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.failed, r.retries, r.dead_lettered), (300, 0, 0, 0), "{r:?}");
    assert_eq!(r.batch_splits, 0, "no batch rolled back: {r:?}");
    assert_eq!(r.http_retries, 12, "one re-send per dropped connection (every 25th of 312 POSTs): {r:?}");
    assert_eq!(env.provider.keys().len(), 312, "each drop was re-sent once");
    assert_eq!(env.provider.charges(), 300, "one charge per key");
    assert_eq!(env.count(CHARGES).await, 300);
    assert_eq!(env.count(DISTINCT_ORDERS).await, 300);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_outage_longer_than_the_old_retry_window_loses_nothing() {
    let env = Env::new(2).await;
    env.provider.set_fault(Fault::Unavailable);
    env.send_orders(20).await;
    let mut spec = env.billing();
    spec.max_attempts = 8;
    spec.backoff_ms = (250, 2_000);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let running = host::InProcess::start(&config);
    // Longer than the 3 s the old retries lasted, shorter than the budget.
    // Each partition's first event meets the outage (the others wait behind it).
    wait_until("503s seen", || env.provider.seen().len() >= 2).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(env.count(CHARGES).await, 0, "nothing applied during the outage");
    env.provider.set_fault(Fault::None);
    wait_until("20 charges", || env.provider.charges() >= 20).await;
    let committed = || kafka::committed(&spec.group_id, &env.topic, 2);
    wait_until("offsets committed", || committed() == vec![Some(10), Some(10)]).await;
    let r = &running.stop().await[0];
    assert_eq!((r.processed, r.failed, r.dead_lettered), (20, 0, 0), "{r:?}");
    assert!(r.retries >= 2, "each partition's first event was retried through the outage: {r:?}");
    assert_eq!(env.count(CHARGES).await, 20);
    assert!(kafka::read_all(&format!("{}.billing.dlq", env.topic)).is_empty());
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_that_swallows_an_infrastructure_error_is_not_committed_and_spends_no_attempt() {
    let env = Env::new(1).await;
    // A serialization failure the first two times, then success.
    let (_, payload) = scenario("swallow", serde_json::json!({ "sql": "SELECT scenario.flaky('40001', 2)" }));
    env.send(0, &payload).await;
    let mut spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    spec.max_attempts = 1;
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.unavailable, r.retries, r.dead_lettered), (1, 2, 0, 0), "{r:?}");
    assert_eq!(
        env.count("SELECT count(*) FROM scenario.effect WHERE note LIKE 'swallow:err%'").await,
        0,
        "the transactions in which the guest swallowed the error were not committed"
    );
    assert_eq!(env.count("SELECT count(*) FROM scenario.effect WHERE note = 'swallow:ok'").await, 1);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poison_event_does_not_stall_the_other_partitions_of_a_concurrency_1_handler() {
    let env = Env::new(3).await;
    let (_, poison) = scenario("write-then-retryable", serde_json::json!({}));
    env.send(0, &poison).await;
    let records: Vec<(i32, Vec<u8>)> =
        (0..1000).map(|i| (1 + (i % 2), scenario("ok", serde_json::json!({})).1)).collect();
    kafka::produce_all(&env.producer, &env.topic, &records).await;
    let mut spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    spec.concurrency = 1;
    spec.max_attempts = 1_000;
    spec.backoff_ms = (200, 200);
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let running = host::InProcess::start(&config);
    let committed = || kafka::committed(&spec.group_id, &env.topic, 3);
    wait_until("partitions 1 and 2 committed to their ends", || {
        let c = committed();
        c[1] == Some(500) && c[2] == Some(500)
    })
    .await;
    assert_ne!(committed()[0], Some(1), "the poison event is still being retried, uncommitted");
    let r = &running.stop().await[0];
    assert_eq!(r.processed, 1000, "{r:?}");
    assert!(r.retries >= 1 && r.failed == 0, "{r:?}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_event_id_reused_with_another_payload_is_dead_lettered_and_the_first_effect_stays() {
    let env = Env::new(1).await;
    let (id, first) = order_payload(1);
    let mut second: serde_json::Value = serde_json::from_slice(&order_payload(2).1).expect("json");
    second["eventId"] = id.to_string().into();
    // The same event re-serialised (other key order) is a duplicate, not a reuse.
    let same: serde_json::Value = serde_json::from_slice(&first).expect("json");
    let fields: Vec<String> = same
        .as_object()
        .expect("object")
        .iter()
        .rev()
        .map(|(k, v)| format!("{}: {v}", serde_json::Value::String(k.clone())))
        .collect();
    let reordered = format!("{{ {} }}", fields.join(", "));
    env.send(0, &first).await;
    env.send(0, second.to_string().as_bytes()).await;
    env.send(0, reordered.as_bytes()).await;
    let spec = env.billing();
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.duplicates, r.failed, r.dead_lettered), (1, 1, 1, 1), "{r:?}");
    assert_eq!(env.count("SELECT count(*) FROM billing.charge WHERE order_id = 1").await, 1, "the first effect stays");
    assert_eq!(env.count("SELECT count(*) FROM billing.charge WHERE order_id = 2").await, 0);
    let dead = kafka::read_all(&format!("{}.billing.dlq", env.topic));
    assert_eq!(dead.len(), 1);
    assert_eq!(header(&dead[0], h::CLASS).as_deref(), Some("conflicting"));
    assert!(header(&dead[0], h::REASON).is_some_and(|r| r.contains("eventId reused with a different payload")));
    assert_eq!(dead[0].payload(), Some(second.to_string().as_bytes()));
    env.finish().await;
}

/// Writes `payload` into `dlq` as idem would have dead-lettered it from
/// `topic`/0 at `offset` (sealed with the suite's key).
pub(crate) async fn dead_letter(env: &Env, dlq: &str, payload: &[u8], offset: usize) {
    let (offset, at) = (offset.to_string(), chrono::Utc::now().to_rfc3339());
    let headers: [(&str, &[u8]); 11] = [
        (h::CLASS, b"permanent"),
        (h::REASON, b"handler failed (permanent): provider said no"),
        (h::ATTEMPTS, b"1"),
        (h::FAILED_AT, at.as_bytes()),
        (h::TOPIC, env.topic.as_bytes()),
        (h::PARTITION, b"0"),
        (h::OFFSET, offset.as_bytes()),
        (h::TIMESTAMP, b"1764504000000"),
        (h::HANDLER, b"billing"),
        (h::MODULE, b"0000"),
        (h::GROUP, b"billing"),
    ];
    kafka::produce_sealed(&env.producer, dlq, 0, b"k", payload, &headers).await;
}

pub(crate) fn idem_json(args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(idem_tests::idem_bin())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run idem: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "idem {args:?}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_applies_exactly_the_missing_events_to_that_handler_only() {
    let env = Env::new(1).await;
    let processed = env.send_orders(3).await;
    let spec = env.billing();
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    host::run_until_drained(&config).await;
    assert_eq!(env.count(CHARGES).await, 3);

    // The DLQ holds the three (processed since, say) and two never processed.
    let dlq = format!("{}.billing.dlq", env.topic);
    let missing: Vec<Vec<u8>> = (10..12).map(|i| order_payload(i).1).collect();
    for (i, payload) in processed.iter().chain(&missing).enumerate() {
        dead_letter(&env, &dlq, payload, i).await;
    }
    // And one that fails again whenever it is replayed.
    dead_letter(&env, &dlq, b"not json", 5).await;
    let source = kafka::read_all(&env.topic).len();
    let path = config.to_str().expect("path");

    let listing = idem_json(&["dlq", "list", "--config", path, "--handler", "billing", "--json"]);
    assert_eq!(listing["records"], 6, "{listing}");
    assert_eq!(listing["by_reason"]["permanent: handler failed (permanent): provider said no"], 6, "{listing}");

    let one =
        idem_json(&["dlq", "replay", "--config", path, "--handler", "billing", "--dry-run", "--limit", "1", "--json"]);
    assert_eq!(one["read"].as_u64(), Some(1), "--limit: {one}");
    let dry = idem_json(&["dlq", "replay", "--config", path, "--handler", "billing", "--dry-run", "--json"]);
    assert_eq!((dry["applied"].as_u64(), dry["duplicates"].as_u64()), (Some(2), Some(3)), "{dry}");
    assert_eq!(env.count(CHARGES).await, 3, "a dry run executes nothing");

    let first = idem_json(&["dlq", "replay", "--config", path, "--handler", "billing", "--json"]);
    assert_eq!(
        (first["applied"].as_u64(), first["duplicates"].as_u64(), first["failed_again"].as_u64()),
        (Some(2), Some(3), Some(1)),
        "{first}"
    );
    assert_eq!(kafka::read_all(&dlq).len(), 7, "the one that failed again is back in the DLQ");
    assert_eq!(env.count(CHARGES).await, 5);
    assert_eq!(env.count(DISTINCT_ORDERS).await, 5, "each missing event applied once");
    assert_eq!(env.provider.charges(), 5);

    let second = idem_json(&["dlq", "replay", "--config", path, "--handler", "billing", "--json"]);
    assert_eq!(
        ["applied", "duplicates", "failed_again", "superseded"].map(|k| second[k].as_u64()),
        [Some(0), Some(5), Some(1), Some(1)],
        "only the latest copy of the failing record ran: {second}"
    );
    assert_eq!(kafka::read_all(&dlq).len(), 8, "one more copy per replay, never a doubling");
    assert_eq!(env.count(CHARGES).await, 5, "a second replay applies nothing");
    assert_eq!(kafka::read_all(&env.topic).len(), source, "no record went into the shared source topic");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_event_that_kills_the_host_is_dead_lettered_after_max_attempts_restarts() {
    killed_by_an_event("classic").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_event_that_kills_the_host_under_kip_848_is_dead_lettered_after_max_attempts_restarts() {
    killed_by_an_event("consumer").await;
}

async fn killed_by_an_event(protocol: &'static str) {
    let env = Env::new(1).await;
    let (_, killer) = scenario("ok", serde_json::json!({ "note": "kill-the-host" }));
    env.send(0, &killer).await;
    for _ in 0..3 {
        env.send(0, &scenario("ok", serde_json::json!({})).1).await;
    }
    let mut spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    if protocol == "consumer" {
        spec = spec.with_consumer_protocol();
    }
    spec.max_attempts = 2;
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let abort = [("IDEM_TEST_ABORT_ON", "kill-the-host")];
    for run in 1..=2 {
        let (status, _) = host::wait_report(host::spawn(&config, true, &abort));
        assert!(!status.success(), "run {run}: the event brought the host down");
    }
    let (status, reports) = host::wait_report(host::spawn(&config, true, &abort));
    assert!(status.success(), "the third run dead-letters the event instead of running it: {status}");
    let r = &reports[0];
    assert_eq!((r.dead_lettered, r.processed), (1, 3), "{r:?}");
    let dead = kafka::read_all(&format!("{}.scenarios.dlq", env.topic));
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].payload(), Some(killer.as_slice()));
    assert!(
        header(&dead[0], h::REASON).is_some_and(|r| r.contains("ends the host process")),
        "{:?}",
        header(&dead[0], h::REASON)
    );
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(4)], "the partition flowed on");
    assert_eq!(env.count("SELECT count(*) FROM idem.execution_attempt").await, 0, "counts are forgotten once resolved");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_failure_block_stops_the_partition_at_the_failed_record_and_the_others_flow() {
    let env = Env::new(2).await;
    for name in ["ok", "write-then-fail", "ok"] {
        env.send(0, &scenario(name, serde_json::json!({})).1).await;
    }
    for _ in 0..3 {
        env.send(1, &scenario("ok", serde_json::json!({})).1).await;
    }
    let mut spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    spec.max_attempts = 1;
    spec.retry = "on_failure = \"block\"\n".into();
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let running = host::InProcess::start(&config);
    let committed = || kafka::committed(&spec.group_id, &env.topic, 2);
    wait_until("partition 1 committed to its end, partition 0 up to the failed record", || {
        committed() == vec![Some(1), Some(3)]
    })
    .await;
    let r = &running.stop().await[0];
    assert_eq!((r.blocked, r.failed, r.dead_lettered, r.processed), (1, 1, 0, 4), "{r:?}");
    assert_eq!(committed(), vec![Some(1), Some(3)], "nothing committed past the failed record");
    assert_eq!(env.count("SELECT count(*) FROM scenario.effect WHERE note = 'start'").await, 4);
    assert!(kafka::read_all(&format!("{}.scenarios.dlq", env.topic)).is_empty(), "block never dead-letters");
    env.finish().await;
}

/// A partition worker that panics is its handler's incident: nothing is
/// committed past its record, the handler's consumer is made again (and,
/// the record panicking again, again after a longer wait), and the host
/// and its other handler go on.
#[tokio::test(flavor = "multi_thread")]
async fn a_panicking_worker_is_its_handlers_incident_and_nothing_else_stops() {
    let env = Env::new(1).await;
    env.send(0, &scenario("ok", serde_json::json!({})).1).await;
    env.send(0, &scenario("ok", serde_json::json!({ "note": "panic-here" })).1).await;
    env.send(0, &scenario("ok", serde_json::json!({})).1).await;
    let spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    let orders = kafka::create_topic(1).await;
    let billing = HandlerSpec::billing(&orders, &env.provider.base_url());
    let config = host::write_config(&env.db.url, &[spec.clone(), billing]);
    let mut child = host::spawn(&config, false, &[("IDEM_TEST_PANIC_ON", "panic-here")]);
    let panicked = |metrics: &[String]| {
        metrics
            .iter()
            .find_map(|l| {
                l.strip_prefix("idem_handler_incidents_total{handler=\"scenarios\",kind=\"worker_panicked\"} ")
                    .and_then(|n| n.parse::<u64>().ok())
            })
            .unwrap_or(0)
    };
    // Twice: the record panics again once the consumer is made again.
    idem_tests::wait_until_async("two incidents of the panicking handler", || async {
        panicked(&host::metrics(&config).await) >= 2
    })
    .await;
    let records: Vec<(i32, Vec<u8>)> = (1..=10).map(|i| (0, order_payload(i).1)).collect();
    kafka::produce_all(&env.producer, &orders, &records).await;
    idem_tests::wait_until_async("billing charges every order meanwhile", || async {
        env.count("SELECT count(*) FROM billing.charge").await == 10
    })
    .await;
    assert!(child.try_wait().expect("wait").is_none(), "the host stays up");
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(1)], "nothing committed past the record");
    assert_eq!(env.count("SELECT count(*) FROM scenario.effect WHERE note = 'start'").await, 1);
    host::signal(&child, "TERM");
    let (status, _) = host::wait_report(child);
    assert!(status.success(), "a clean stop: {status}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partition_paused_when_revoked_is_resumed_when_assigned_again() {
    let env = Env::new(2).await;
    // Slow events and long queues (1,000 over the 10,000 records a queue of
    // one of two partitions holds): both partitions are paused for
    // backpressure when the second host joins and takes one away.
    env.provider.set_latency(Duration::from_millis(2));
    env.send_orders(22_000).await;
    let mut a = env.billing();
    a.assignor = "range";
    a.key_prefix = Some("a".into());
    let b = HandlerSpec { key_prefix: Some("b".into()), ..a.clone() };
    let config_a = host::write_config(&env.db.url, std::slice::from_ref(&a));
    let config_b = host::write_config(&env.db.url, std::slice::from_ref(&b));
    let first = host::InProcess::start(&config_a);
    wait_until("the first host charging", || env.provider.charges() >= 100).await;
    // Both partitions paused at once: whichever the second host takes was
    // paused when it was revoked.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let m = host::metrics(&config_a).await;
        if (0..2).all(|p| host::partition_gauge(&m, "idem_partition_paused", p, "1")) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "both partitions were never paused at once");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = host::spawn(&config_b, false, &[]);
    let by_b = || env.provider.keys().iter().flatten().any(|k| k.starts_with("b:"));
    wait_until("the second host took a partition", by_b).await;
    host::signal(&second, "TERM");
    let (status, _) = host::wait_report(second);
    assert!(status.success());
    // Its partition comes back to the first host, paused in librdkafka's
    // state from before: it must be resumed and drained (at full speed now).
    env.provider.set_latency(Duration::ZERO);
    let committed = || kafka::committed(&a.group_id, &env.topic, 2);
    wait_until("both partitions committed to their ends", || committed() == vec![Some(11_000), Some(11_000)]).await;
    let r = &first.stop().await[0];
    assert!(r.pauses >= 2, "both partitions were paused: {r:?}");
    assert_eq!(env.count(CHARGES).await, 22_000);
    assert_eq!(env.count(DISTINCT_ORDERS).await, 22_000, "none twice");
    env.finish().await;
}

/// Records deleted under a consumer's position while its partition is
/// paused (retention, or an operator's DeleteRecords): when the host resumes,
/// its fetch position is out of range and librdkafka resets it.
#[tokio::test(flavor = "multi_thread")]
async fn an_offset_reset_in_the_middle_of_an_assignment_is_detected_and_counted() {
    let env = Env::new(1).await;
    let mut spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    spec.concurrency = 1;
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let running = host::InProcess::start(&config);
    // Assigned and consuming.
    env.send(0, &scenario("ok", serde_json::json!({})).1).await;
    wait_until("the first event", || kafka::committed(&spec.group_id, &env.topic, 1) == vec![Some(1)]).await;
    // 30 MB of slow events (50 ms each): the host's queue fills (16 MiB, 80
    // records) and pauses the partition, so that it has fetched at most
    // some 100 of them when all but the last 5 are deleted.
    let pad = "x".repeat(200_000);
    let slow =
        |i: usize| scenario("statement", serde_json::json!({ "sql": "SELECT pg_sleep(0.05)", "pad": pad, "i": i })).1;
    let records: Vec<(i32, Vec<u8>)> = (0..150).map(|i| (0, slow(i))).collect();
    kafka::produce_all(&env.producer, &env.topic, &records).await;
    let end = kafka::high_watermarks(&env.topic, 1)[0];
    assert_eq!(kafka::delete_records(&env.topic, 0, end - 5).await, end - 5);
    wait_until("committed to the end", || kafka::committed(&spec.group_id, &env.topic, 1) == vec![Some(end)]).await;
    let r = &running.stop().await[0];
    assert!(r.processed < 146, "records were skipped by the reset: {r:?}");
    assert!(r.offset_resets >= 1, "the reset in the middle of the assignment was counted: {r:?}");
    env.finish().await;
}

/// A deferred constraint fails at COMMIT, which names no event: the batch
/// runs record by record, the failing record's COMMIT fails alone, it is
/// retried as a retryable failure and then dead-lettered; the records
/// around it commit once.
#[tokio::test(flavor = "multi_thread")]
async fn a_deferred_constraint_failing_at_commit_splits_the_batch_and_only_its_record_is_dead_lettered() {
    let env = Env::new(1).await;
    env.send(0, &scenario("ok", serde_json::json!({})).1).await;
    let orphan = serde_json::json!({ "sql": "INSERT INTO scenario.deferred_child (parent) VALUES (42)" });
    let (bad, bad_payload) = scenario("statement", orphan);
    let ok = || scenario("ok", serde_json::json!({})).1;
    let records: Vec<(i32, Vec<u8>)> =
        [ok(), ok(), bad_payload.clone(), ok(), ok()].into_iter().map(|p| (0, p)).collect();
    kafka::produce_all(&env.producer, &env.topic, &records).await;
    let mut spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    spec.batch = Some((5, 50));
    spec.max_attempts = 2;
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let reports = host::run_until_drained(&config).await;
    let r = &reports[0];
    assert_eq!((r.processed, r.dead_lettered), (5, 1), "{r:?}");
    assert_eq!(
        r.batch_splits, 1,
        "found in one pass: after the failure at COMMIT its batch ran record by record: {r:?}"
    );
    assert!(r.retries >= 1, "the failure at COMMIT was retried as retryable: {r:?}");
    let dead = kafka::read_all(&format!("{}.scenarios.dlq", env.topic));
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].payload(), Some(bad_payload.as_slice()));
    assert_eq!(header(&dead[0], h::CLASS).as_deref(), Some("retryable"), "{:?}", header(&dead[0], h::REASON));
    assert_eq!(header(&dead[0], h::ATTEMPTS).as_deref(), Some("2"));
    let starts = "SELECT count(*) FROM scenario.effect WHERE note = 'start'";
    assert_eq!(env.count(starts).await, 5, "every other record once, the failing one's writes undone");
    let bad_rows = format!("SELECT count(*) FROM scenario.effect WHERE event_id = '{bad}'");
    assert_eq!(env.count(&bad_rows).await, 0);
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(6)], "the partition flowed on");
    env.finish().await;
}

/// An "infrastructure" failure that persists while the database answers is
/// the event's own (here a guest raising XX000 on every call): every 3rd
/// one probes the database and then spends an attempt, so the event is
/// dead-lettered after `max_attempts` instead of retried for ever.
#[tokio::test(flavor = "multi_thread")]
async fn a_persistent_infrastructure_failure_while_the_database_answers_spends_attempts_and_is_dead_lettered() {
    let env = Env::new(1).await;
    let internal = serde_json::json!({ "sql": "SELECT scenario.flaky('XX000', 1000000)" });
    let (_, payload) = scenario("statement", internal);
    env.send(0, &payload).await;
    env.send(0, &scenario("ok", serde_json::json!({})).1).await;
    let mut spec = HandlerSpec::scenarios(&env.topic, &env.provider.base_url());
    spec.max_attempts = 2;
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let reports = host::run_until_drained(&config).await;
    let r = &reports[0];
    assert_eq!((r.processed, r.dead_lettered), (1, 1), "{r:?}");
    // Two attempts spent, each after two retries that spent none.
    assert!(r.unavailable >= 4, "retried as an outage before spending attempts: {r:?}");
    let dead = kafka::read_all(&format!("{}.scenarios.dlq", env.topic));
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].payload(), Some(payload.as_slice()));
    assert_eq!(header(&dead[0], h::ATTEMPTS).as_deref(), Some("2"), "{:?}", header(&dead[0], h::REASON));
    assert_eq!(kafka::committed(&spec.group_id, &env.topic, 1), vec![Some(2)]);
    env.finish().await;
}

/// Under `max_concurrent > 1` a batch's events see each other's uncommitted
/// rows: B posts a count that includes A's row while A waits for a slow
/// answer; then A fails and its row is rolled back. B's next run would send
/// a different request under the same Idempotency-Key: it is not sent, and
/// B is dead-lettered as conflicting, naming the key. The provider never
/// holds two different requests under one key.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_from_a_rolled_back_batch_mate_is_never_followed_by_another_under_its_key() {
    let env = Env::new(1).await;
    let (_, a) = scenario("slow-then-fail", serde_json::json!({}));
    let (b_id, b) = scenario("post-what-it-sees", serde_json::json!({ "seq": 2 }));
    // A partition's first event runs alone (a crash is then its own:
    // `pipeline/attempts.rs`); A and B come after it, in one batch.
    let (_, first) = scenario("ok", serde_json::json!({}));
    kafka::produce(&env.producer, &env.topic, 0, "z", &first).await;
    kafka::produce(&env.producer, &env.topic, 0, "a", &a).await;
    kafka::produce(&env.producer, &env.topic, 0, "b", &b).await;
    // One lane (so one batch), two keys: two chains that run side by side.
    // A batch waits 500 ms to fill, so both records are in it.
    let mut spec =
        HandlerSpec::scenarios(&env.topic, &env.provider.base_url()).with_lanes("key", 1).with_max_concurrent(2);
    spec.batch = Some((10, 500));
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let r = &host::run_until_drained(&config).await[0];
    assert_eq!((r.processed, r.dead_lettered), (1, 2), "{r:?}: {:?}", env.provider.seen());
    let mut bodies: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    for seen in env.provider.seen() {
        if let Some(key) = seen.idempotency_key {
            bodies.entry(key).or_default().insert(seen.body);
        }
    }
    let b_key = b_id.hyphenated().to_string();
    assert_eq!(
        bodies.get(&b_key).map(|b| b.iter().cloned().collect::<Vec<_>>()),
        Some(vec![r#"{"seen":2}"#.to_owned()]),
        "B's first request saw the first event's row and A's uncommitted one: {bodies:?}"
    );
    for (key, sent) in &bodies {
        assert_eq!(sent.len(), 1, "one request under each key: {key} had {sent:?}");
    }
    let dead = kafka::read_all(&format!("{}.scenarios.dlq", env.topic));
    let reason = dead
        .iter()
        .find(|m| m.payload().is_some_and(|p| p == b.as_slice()))
        .and_then(|m| header(m, h::REASON))
        .unwrap_or_else(|| panic!("B dead-lettered with a reason: {} dead letters", dead.len()));
    assert!(
        reason.contains(&format!("a different request was sent under Idempotency-Key `{b_key}` before")),
        "{reason}"
    );
    env.finish().await;
}
