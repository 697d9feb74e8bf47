//! Operators' pauses (issue 42): a partition or a whole handler paused
//! through one host's admin API is obeyed by every host of the group
//! within seconds, through a rebalance and a restart, shown in `/metrics`
//! and `idem status`, recorded in the audit trail with its actor; a resume
//! drains what waited, each event once.

use std::time::Duration;

use idem_tests::host::{self, order_payload};
use idem_tests::{kafka, wait_until_async};
use serde_json::{Value, json};

use crate::operate::{get, named, owners, post};
use crate::{CHARGES, DISTINCT_ORDERS, Env};

/// A pause is obeyed within 2 s (docs/operating.md, "Pausing a handler"); a little
/// more for the test's own clock.
const OBEYED: Duration = Duration::from_millis(2_500);

/// How long the test watches a paused partition run nothing.
const WATCHED: Duration = Duration::from_secs(3);

/// Orders `from..=to`, order `i` on partition `i % partitions`.
async fn send(env: &Env, from: i64, to: i64) {
    let on = |i: i64| (i % i64::from(env.partitions)) as i32;
    let records: Vec<(i32, String, Vec<u8>)> =
        (from..=to).map(|i| (on(i), format!("customer-{}", i % 50), order_payload(i).1)).collect();
    kafka::produce_all_keyed(&env.producer, &env.topic, &records).await;
}

/// Charges of orders from `from` on partition `partition`.
async fn charged_on(env: &Env, partition: i64, from: i64) -> i64 {
    env.count(&format!("SELECT count(*) FROM billing.charge WHERE order_id >= {from} AND order_id % 4 = {partition}"))
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_partition_runs_nothing_on_any_host_through_a_rebalance_and_a_restart_and_a_resume_drains_it_once() {
    let env = Env::new(4).await;
    let spec = env.billing();
    let a = named(&host::write_config(&env.db.url, std::slice::from_ref(&spec)), "pause-a");
    let b = named(&host::write_config(&env.db.url, std::slice::from_ref(&spec)), "pause-b");
    let (admin_a, admin_b) = (host::admin_url(&a), host::admin_url(&b));
    let host_a = host::InProcess::start(&a);
    let host_b = host::InProcess::start(&b);
    send(&env, 1, 40).await;
    env.charged(40, Duration::from_secs(60)).await;

    // Refusals name what is wrong; nothing is paused by them.
    let topic = env.topic.clone();
    for (body, code, said) in [
        (json!({ "topic": "other" }), 404, "not `other`"),
        (json!({ "topic": "" }), 400, "topic is empty"),
        (json!({ "topic": topic, "partition": -3 }), 400, "0 or more"),
        (json!({ "topic": topic, "color": "red" }), 400, "color"),
        (json!([null, null]), 400, "not an object"),
        (json!({ "reason": "a\u{0}" }), 400, "NUL"),
    ] {
        let (status, answer) = post(&admin_a, "/handlers/billing/pause", body).await;
        assert_eq!(status, code, "{answer}");
        assert!(answer["error"].as_str().is_some_and(|e| e.contains(said)), "{answer}");
    }
    let (status, _) = post(&admin_a, "/handlers/nobody/pause", json!({})).await;
    assert_eq!(status, 404);

    // Partition 1 paused through host A, whichever host owns it: the other
    // partitions' orders are charged, its own wait.
    let (status, answer) =
        post(&admin_a, "/handlers/billing/pause", json!({ "topic": topic, "partition": 1, "reason": "incident 7" }))
            .await;
    assert_eq!((status, &answer["paused"]), (200, &json!(true)), "{answer}");
    tokio::time::sleep(OBEYED).await;
    send(&env, 41, 80).await;
    env.charged(70, Duration::from_secs(60)).await;
    tokio::time::sleep(WATCHED).await;
    assert_eq!(charged_on(&env, 1, 41).await, 0, "nothing of the paused partition ran");
    assert_eq!(env.count(CHARGES).await, 70);
    let metrics = format!(
        "{}{}",
        get(&admin_a, "/metrics").await.unwrap_or_default(),
        get(&admin_b, "/metrics").await.unwrap_or_default()
    );
    let held = format!("idem_partition_held{{handler=\"billing\",topic=\"{topic}\",partition=\"1\"}} 1");
    assert!(metrics.contains(&held), "its owner's /metrics shows it held: {metrics}");

    // A rebalance (host B stops; host A takes every partition) and a
    // restart (host B again): partition 1 stays paused on its new owners.
    host_b.stop().await;
    wait_until_async("host A owns all four partitions", || async {
        let owners = owners(&admin_a).await;
        owners.len() == 4 && owners.iter().all(|o| o == "pause-a")
    })
    .await;
    tokio::time::sleep(WATCHED).await;
    assert_eq!(charged_on(&env, 1, 41).await, 0, "nor on host A after the rebalance");
    let host_b = host::InProcess::start(&b);
    wait_until_async("hosts A and B share the partitions again", || async {
        let owners = owners(&admin_a).await;
        owners.len() == 4 && owners.iter().any(|o| o == "pause-b") && owners.iter().any(|o| o == "pause-a")
    })
    .await;
    tokio::time::sleep(WATCHED).await;
    assert_eq!(charged_on(&env, 1, 41).await, 0, "nor after host B's restart");
    let status = std::process::Command::new(idem_tests::idem_bin())
        .args(["status", "--once", "--url", &admin_b])
        .output()
        .expect("idem status");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("paused by an operator"), "idem status shows the pause: {text}");

    // The whole handler paused through host B (with the CLI): nothing runs.
    let paused = std::process::Command::new(idem_tests::idem_bin())
        .args(["pause", "--handler", "billing", "--reason", "provider down", "--url", &admin_b])
        .output()
        .expect("idem pause");
    let said = String::from_utf8_lossy(&paused.stdout);
    assert!(
        paused.status.success() && said.contains("paused `billing`"),
        "{said}{}",
        String::from_utf8_lossy(&paused.stderr)
    );
    tokio::time::sleep(OBEYED).await;
    send(&env, 81, 100).await;
    tokio::time::sleep(WATCHED).await;
    assert_eq!(env.count(CHARGES).await, 70, "nothing of a paused handler ran");
    let listed = get(&admin_a, "/handlers/billing/pauses").await.unwrap_or_default();
    let listed: Value = serde_json::from_str(&listed).expect("JSON");
    assert_eq!(listed["pauses"].as_array().map(Vec::len), Some(2), "{listed}");

    // A partition's resume under the handler's pause lifts it but says
    // the broader pause still holds; the handler's resume lifts the rest.
    // (A partition named alone is one of the handler's own topic.)
    let (status, answer) = post(&admin_a, "/handlers/billing/resume", json!({ "partition": 1 })).await;
    assert_eq!((status, &answer["lifted"]), (200, &json!(1)), "{answer}");
    assert!(answer["message"].as_str().is_some_and(|m| m.contains("still held")), "{answer}");
    tokio::time::sleep(OBEYED).await;
    assert_eq!(env.count(CHARGES).await, 70, "still held by the handler's pause");
    let (status, answer) = post(&admin_a, "/handlers/billing/resume", json!({})).await;
    assert_eq!((status, &answer["lifted"]), (200, &json!(1)), "{answer}");
    env.charged(100, Duration::from_secs(60)).await;
    assert_eq!(env.count(DISTINCT_ORDERS).await, 100);
    assert_eq!(env.count(CHARGES).await, 100, "each order charged once");
    assert_eq!(env.provider.charges(), 100, "the provider saw each charge's key once");

    // The audit trail names each pause and resume and who asked.
    let trail = get(&admin_a, "/audit?handler=billing").await.unwrap_or_default();
    for action in ["/handlers/billing/pause", "/handlers/billing/resume"] {
        assert!(trail.contains(action), "{action} in the audit trail: {trail}");
    }
    host_a.stop().await;
    host_b.stop().await;
    env.finish().await;
}

/// The documented use of a pause: the provider fails, an event is being
/// retried, the operator pauses. From then on the host makes no call for it
/// (an execution in flight ends; the retries wait for the resume) and spends
/// no attempt; a host restarted meanwhile holds the partition from its
/// assignment, its fetching paused; after the resume, with the provider
/// back, the event is charged once.
#[tokio::test(flavor = "multi_thread")]
async fn an_event_being_retried_when_its_handler_is_paused_makes_no_call_until_the_resume() {
    let env = Env::new(1).await;
    env.provider.set_fault(idem_tests::provider::Fault::Unavailable);
    let spec = idem_tests::host::HandlerSpec { max_attempts: 1_000, backoff_ms: (100, 200), ..env.billing() };
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let admin = host::admin_url(&config);
    let running = host::InProcess::start(&config);
    send(&env, 1, 1).await;
    let posts = || env.provider.keys().len();
    wait_until_async("the event is being retried", || async { posts() >= 3 }).await;

    let (status, answer) = post(&admin, "/handlers/billing/pause", json!({ "reason": "provider down" })).await;
    assert_eq!(status, 200, "{answer}");
    tokio::time::sleep(OBEYED).await;
    let before = posts();
    tokio::time::sleep(WATCHED).await;
    assert_eq!(posts(), before, "no call while paused");

    // Restarted while paused: held from its assignment, fetching paused.
    running.stop().await;
    let running = host::InProcess::start(&config);
    let topic = env.topic.clone();
    wait_until_async("the restarted host holds the partition and pauses its fetching", || async {
        let metrics = get(&admin, "/metrics").await.unwrap_or_default();
        let labels = format!("{{handler=\"billing\",topic=\"{topic}\",partition=\"0\"}} 1");
        metrics.contains(&format!("idem_partition_held{labels}"))
            && metrics.contains(&format!("idem_partition_paused{labels}"))
    })
    .await;
    tokio::time::sleep(WATCHED).await;
    assert_eq!(posts(), before, "no call after the restart either");

    env.provider.set_fault(idem_tests::provider::Fault::None);
    let (status, answer) = post(&admin, "/handlers/billing/resume", json!({})).await;
    assert_eq!((status, &answer["lifted"]), (200, &json!(1)), "{answer}");
    env.charged(1, Duration::from_secs(60)).await;
    assert_eq!(env.provider.charges(), 1, "charged once");
    let reports = running.stop().await;
    assert_eq!(reports[0].failed, 0, "no attempt ran out: {reports:?}");
    env.finish().await;
}

/// The summed `idem_consumer_lag_records` of `topic` on the hosts at `admins`.
async fn lag(admins: &[&str], topic: &str) -> f64 {
    let mut sum = 0.0;
    for admin in admins {
        let metrics = get(admin, "/metrics").await.unwrap_or_default();
        let prefix = format!("idem_consumer_lag_records{{handler=\"billing\",topic=\"{topic}\",");
        sum += metrics
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    sum
}

/// Transactions open in the test database for more than a second (the
/// hosts' own short reads of pauses and rates come and go).
async fn open_transactions(env: &Env) -> i64 {
    env.count(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND xact_start < now() - interval '1 second' AND pid <> pg_backend_pid()",
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_topic_paused_while_its_events_flow_stops_within_2_s_on_every_host_holding_nothing_while_its_lag_grows() {
    let env = Env::new(4).await;
    let spec = env.billing();
    let a = named(&host::write_config(&env.db.url, std::slice::from_ref(&spec)), "flow-a");
    let b = named(&host::write_config(&env.db.url, std::slice::from_ref(&spec)), "flow-b");
    let (admin_a, admin_b) = (host::admin_url(&a), host::admin_url(&b));
    let host_a = host::InProcess::start(&a);
    let host_b = host::InProcess::start(&b);
    send(&env, 1, 40).await;
    env.charged(40, Duration::from_secs(60)).await;

    // Orders keep coming, 20 every 100 ms, until the test ends.
    let sending = {
        let (producer, topic) = (kafka::producer(), env.topic.clone());
        tokio::spawn(async move {
            for round in 0..400_i64 {
                let from = 41 + round * 20;
                let records: Vec<(i32, String, Vec<u8>)> = (from..from + 20)
                    .map(|i| ((i % 4) as i32, format!("customer-{}", i % 50), order_payload(i).1))
                    .collect();
                kafka::produce_all_keyed(&producer, &topic, &records).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    wait_until_async("orders flowing", || async { env.count(CHARGES).await > 200 }).await;

    let topic = env.topic.clone();
    let (status, answer) =
        post(&admin_b, "/handlers/billing/pause", json!({ "topic": topic, "reason": "provider degraded" })).await;
    assert_eq!((status, &answer["paused"]), (200, &json!(true)), "{answer}");
    tokio::time::sleep(OBEYED).await;
    let stopped_at = env.count(CHARGES).await;
    let lag_then = lag(&[&admin_a, &admin_b], &topic).await;
    tokio::time::sleep(WATCHED).await;
    assert_eq!(env.count(CHARGES).await, stopped_at, "2 s after the pause nothing more ran, on either host");
    assert_eq!(open_transactions(&env).await, 0, "a paused handler holds no transaction");
    // Each host looks its paused partitions' ends up every 5 s.
    wait_until_async("the lag grows visibly while paused", || async {
        lag(&[&admin_a, &admin_b], &topic).await >= lag_then + 300.0
    })
    .await;

    // Host B leaves: host A takes its partitions, paused.
    host_b.stop().await;
    wait_until_async("host A owns all four partitions", || async {
        let owners = owners(&admin_a).await;
        owners.len() == 4 && owners.iter().all(|o| o == "flow-a")
    })
    .await;
    tokio::time::sleep(WATCHED).await;
    assert_eq!(env.count(CHARGES).await, stopped_at, "nor on host A after the rebalance");

    let (status, answer) = post(&admin_a, "/handlers/billing/resume", json!({ "topic": topic })).await;
    assert_eq!((status, &answer["lifted"]), (200, &json!(1)), "{answer}");
    sending.await.expect("the producer");
    let all = 40 + 400 * 20;
    env.charged(all, Duration::from_secs(120)).await;
    assert_eq!(env.count(DISTINCT_ORDERS).await, all, "each order charged once");
    // A batch a rebalance rolled back (the second host joining, at the
    // start) runs again on the new owner, its requests sent again under the
    // same key: the provider charges each key once.
    let keys = env.provider.keys();
    assert!(keys.iter().all(Option::is_some), "every request carried its key");
    assert_eq!(env.provider.charges(), all as usize, "one charge per order at the provider ({} requests)", keys.len());
    host_a.stop().await;
    env.finish().await;
}
