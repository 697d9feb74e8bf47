//! Restarts and shutdowns through the real binary on the real broker:
//! static membership brings a restarted host's partitions back in seconds,
//! SIGTERM is bounded whatever the group is doing, and a rolling restart
//! under load has no duplicate effect. Sessions are 30 s here, so that
//! anything waiting on the group's session timeout shows as a failure.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use idem_tests::host::{self, HandlerSpec, order_payload};
use idem_tests::kafka;

use crate::{CHARGES, DISTINCT_ORDERS, Env};

const SESSION: &str = "30000";

/// A config of `spec` with 30 s sessions (one per host: each has its own
/// admin port; one spec, so one group).
fn long_sessions(env: &Env, spec: &HandlerSpec) -> PathBuf {
    let path = host::write_config(&env.db.url, std::slice::from_ref(spec));
    let text = std::fs::read_to_string(&path).expect("config");
    let default = "\"session.timeout.ms\" = \"6000\"";
    assert!(text.contains(default), "the harness's config sets {default}: {}", path.display());
    let text = text.replace(default, &format!("\"session.timeout.ms\" = \"{SESSION}\""));
    std::fs::write(&path, text).expect("config");
    path
}

fn start(config: &Path, id: &str) -> Child {
    host::spawn(config, false, &[("IDEM_INSTANCE_ID", id)])
}

/// Orders `from..from + n` round-robin over the partitions.
async fn send(env: &Env, from: i64, n: i64) {
    let records: Vec<(i32, Vec<u8>)> =
        (from..from + n).map(|i| ((i % i64::from(env.partitions)) as i32, order_payload(i).1)).collect();
    kafka::produce_all(&env.producer, &env.topic, &records).await;
}

/// Until the group is settled: every partition of the topic owned, each
/// of `ids` owning some (as `GET /fleet` of the host of `config` says). An
/// orchestrator starts a rolling restart from a settled deployment; a
/// static member stopped while the group still forms is waited for until
/// its session times out (`SESSION`), longer than the test waits.
async fn settled(config: &Path, ids: &[String], partitions: usize) {
    let url = format!("{}/fleet", host::admin_url(config));
    idem_tests::wait_until_async("every partition owned, by both hosts", || async {
        let Ok(answer) = reqwest::get(&url).await else { return false };
        let Ok(fleet) = answer.json::<serde_json::Value>().await else { return false };
        let owners: Vec<&str> = fleet["partitions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["owned"] == true)
            .filter_map(|p| p["host"].as_str())
            .collect();
        owners.len() == partitions && ids.iter().all(|id| owners.contains(&id.as_str()))
    })
    .await;
}

async fn charged(env: &Env, n: i64) {
    idem_tests::wait_until_async(&format!("{n} charged"), || async { env.count(CHARGES).await >= n }).await;
}

/// SIGTERMs `child` and returns how long it took to exit, and whether it
/// exited 0 with its report.
async fn terminate(child: Child, signal: &'static str) -> (Duration, bool) {
    let began = Instant::now();
    host::signal(&child, signal);
    let (status, reports) = tokio::task::spawn_blocking(move || host::wait_report(child)).await.expect("wait");
    (began.elapsed(), status.success() && !reports.is_empty())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_killed_and_restarted_gets_its_partitions_back_in_seconds() {
    let env = Env::new(3).await;
    let config = long_sessions(&env, &env.billing());
    let id = idem_tests::unique_name("restart");
    let first = start(&config, &id);
    send(&env, 1, 30).await;
    charged(&env, 30).await;
    host::signal(&first, "KILL");
    let _ = tokio::task::spawn_blocking(move || host::wait_report(first)).await;

    let began = Instant::now();
    let second = start(&config, &id);
    send(&env, 31, 30).await;
    charged(&env, 60).await;
    let resumed = began.elapsed();
    // A dynamic member would be assigned nothing until the dead one's 30 s
    // session ran out.
    assert!(resumed < Duration::from_secs(10), "every partition processing again {resumed:?} after the restart");
    let (took, clean) = terminate(second, "TERM").await;
    assert!(clean && took < Duration::from_secs(10), "SIGTERM: exit 0 with a report in {took:?}");
    assert_eq!(env.count(DISTINCT_ORDERS).await, 60);
    assert_eq!(env.provider.charges(), 60);
    env.finish().await;
}

/// The case seen on the mock cluster, on the real broker: of two hosts in
/// a group, one leaves (SIGUSR1, a scale-in) and the other gets SIGTERM the
/// moment the first has exited, while the group rebalances the leaver's
/// partitions to it. Both exit in time, and nothing is applied twice.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_in_the_middle_of_a_rebalance_exits_within_the_bound() {
    let env = Env::new(4).await;
    let spec = env.billing();
    let (config, other) = (long_sessions(&env, &spec), long_sessions(&env, &spec));
    let group = spec.group_id.clone();
    let (a_id, b_id) = (idem_tests::unique_name("a"), idem_tests::unique_name("b"));
    let a = start(&config, &a_id);
    send(&env, 1, 40).await;
    charged(&env, 40).await;
    let b = start(&other, &b_id);
    idem_tests::wait_until("A and B in one stable group", || {
        kafka::classic_group_members(&group).is_ok_and(|(state, members)| state == "Stable" && members == 2)
    })
    .await;
    send(&env, 41, 200).await;
    let (a_took, a_clean) = terminate(a, "USR1").await;
    let (b_took, b_clean) = terminate(b, "TERM").await;
    assert!(a_clean && a_took < Duration::from_secs(10), "A (leaving): exit 0 with a report in {a_took:?}");
    assert!(b_clean && b_took < Duration::from_secs(10), "B (mid-rebalance): exit 0 with a report in {b_took:?}");

    // Whatever was left uncommitted is redelivered and skipped.
    let (status, reports) = host::wait_report(host::spawn(&config, true, &[("IDEM_INSTANCE_ID", "off")]));
    assert!(status.success(), "{reports:?}");
    assert_eq!(env.count(CHARGES).await, 240);
    assert_eq!(env.count(DISTINCT_ORDERS).await, 240, "no order charged twice");
    assert_eq!(env.provider.charges(), 240);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rolling_restart_of_two_hosts_under_load_has_no_duplicate_effect() {
    let env = Env::new(4).await;
    let spec = env.billing();
    let configs = [long_sessions(&env, &spec), long_sessions(&env, &spec)];
    let ids = [idem_tests::unique_name("roll-a"), idem_tests::unique_name("roll-b")];
    let mut hosts = vec![start(&configs[0], &ids[0]), start(&configs[1], &ids[1])];
    let load = {
        let (producer, topic, partitions) = (kafka::producer(), env.topic.clone(), env.partitions);
        tokio::spawn(async move {
            for batch in 0..40_i64 {
                let records: Vec<(i32, Vec<u8>)> = (0..15)
                    .map(|i| batch * 15 + i + 1)
                    .map(|i| ((i % i64::from(partitions)) as i32, order_payload(i).1))
                    .collect();
                kafka::produce_all(&producer, &topic, &records).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    charged(&env, 30).await;
    let partitions = usize::try_from(env.partitions).unwrap_or_default();
    settled(&configs[0], &ids, partitions).await;
    // One host at a time, as a rolling deploy does.
    for (i, id) in ids.iter().enumerate() {
        let old = hosts.remove(i);
        let (took, clean) = terminate(old, "TERM").await;
        assert!(clean && took < Duration::from_secs(10), "host {i}: exit 0 with a report in {took:?}");
        hosts.insert(i, start(&configs[i], id));
        // As an orchestrator does: the next host stops only once this one
        // is ready (joined) and the group has settled again. A static
        // member stopped while the group rebalances is waited for until
        // its session times out.
        host::ready(&configs[i]).await;
        settled(&configs[i], &ids, partitions).await;
    }
    load.await.expect("load");
    charged(&env, 600).await;
    for child in hosts {
        let (took, clean) = terminate(child, "TERM").await;
        assert!(clean && took < Duration::from_secs(10), "exit 0 with a report in {took:?}");
    }
    assert_eq!(env.count(CHARGES).await, 600);
    assert_eq!(env.count(DISTINCT_ORDERS).await, 600, "no order charged twice");
    assert_eq!(env.provider.charges(), 600, "and none twice at the provider");
    env.finish().await;
}

/// Under KIP-848 the broker refuses a returning identity whose process died
/// until its session timeout (6 s on the test broker) runs out, and
/// librdkafka makes that fatal: the host joins again until it is let in,
/// instead of stopping.
#[tokio::test(flavor = "multi_thread")]
async fn under_kip_848_a_restarted_host_waits_out_its_unreleased_identity() {
    let env = Env::new(2).await;
    let spec = env.billing().with_consumer_protocol();
    let config = host::write_config(&env.db.url, std::slice::from_ref(&spec));
    let id = idem_tests::unique_name("kip848");
    let first = start(&config, &id);
    send(&env, 1, 20).await;
    charged(&env, 20).await;
    host::signal(&first, "KILL");
    let _ = tokio::task::spawn_blocking(move || host::wait_report(first)).await;

    let mut second = start(&config, &id);
    send(&env, 21, 20).await;
    charged(&env, 40).await;
    assert!(second.try_wait().expect("wait").is_none(), "the restarted host kept running");
    let (took, clean) = terminate(second, "TERM").await;
    assert!(clean && took < Duration::from_secs(10), "exit 0 with a report in {took:?}");
    assert_eq!(env.count(DISTINCT_ORDERS).await, 40);
    assert_eq!(env.provider.charges(), 40);
    env.finish().await;
}

/// `idem check` with an identity a live member of the group holds already
/// warns naming it; with another identity it does not.
#[tokio::test(flavor = "multi_thread")]
async fn check_warns_of_an_identity_a_live_member_holds() {
    let env = Env::new(1).await;
    let spec = env.billing();
    let (config, other) = (long_sessions(&env, &spec), long_sessions(&env, &spec));
    let id = idem_tests::unique_name("dup");
    let running = start(&config, &id);
    send(&env, 1, 5).await;
    charged(&env, 5).await;
    let check = |id: &str| {
        let out = std::process::Command::new(idem_tests::idem_bin())
            .args(["check", "--config", other.to_str().expect("path")])
            .env("IDEM_INSTANCE_ID", id)
            .output()
            .expect("idem check");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    };
    let (ok, out) = check(&id);
    assert!(ok, "a warning, not a refusal: {out}");
    // The id ends in a mark made from the database's secret (`identity`).
    assert!(out.contains(&format!("instance id `{id}.billing.")) && out.contains("` already"), "{out}");
    let (ok, out) = check(&idem_tests::unique_name("other"));
    assert!(ok && !out.contains("instance id"), "{out}");
    let (ok, out) = check("two words");
    assert!(!ok && out.contains("IDEM_INSTANCE_ID") && out.contains("must be 1 to 200"), "refused at check: {out}");
    let (took, clean) = terminate(running, "TERM").await;
    assert!(clean && took < Duration::from_secs(10), "{took:?}");
    env.finish().await;
}

/// The `group.instance.id` of `group`'s static member whose id starts with
/// `prefix`, as any client with Describe on the group reads it: a static
/// member's id is `<instance id>-<uuid>`.
fn instance_in_group(group: &str, prefix: &str) -> Option<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    let probe: BaseConsumer =
        rdkafka::ClientConfig::new().set("bootstrap.servers", kafka::brokers()).create().expect("probe");
    let list = probe.fetch_group_list(Some(group), Duration::from_secs(10)).ok()?;
    let group = list.groups().first()?;
    let member = group.members().iter().find(|m| m.id().starts_with(prefix))?;
    // `-` and a UUID's 36 characters.
    member.id().get(..member.id().len().checked_sub(37)?).map(str::to_owned)
}

/// A Kafka client that joins one handler's group with that handler's
/// instance id (read from the group, as a tenant with Describe on it can)
/// fences idem's consumer. That is the handler's incident only: the host
/// stays up, the other handler processes throughout, the incident is
/// counted and named by `/readyz`, and once the client is gone the fenced
/// handler takes its identity back and processes every event once.
#[tokio::test(flavor = "multi_thread")]
async fn a_fenced_handler_is_its_own_incident_and_every_other_handler_goes_on() {
    let env = Env::new(2).await;
    let (billing, notification) = (env.billing(), HandlerSpec::notification(&env.topic));
    let config = host::write_config(&env.db.url, &[billing.clone(), notification]);
    let id = idem_tests::unique_name("fenced");
    let mut child = start(&config, &id);
    send(&env, 1, 10).await;
    charged(&env, 10).await;
    let mut instance = None;
    for _ in 0..100 {
        instance = instance_in_group(&billing.group_id, &format!("{id}.billing."));
        if instance.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let instance = instance.expect("billing's static member in its group within 10 s");
    assert!(instance.len() > format!("{id}.billing.").len() + 8, "the id ends in its secret mark: {instance}");

    // The tenant's client joins as billing's consumer.
    let rogue: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka::brokers())
        .set("group.id", &billing.group_id)
        .set("group.instance.id", &instance)
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", "6000")
        .set("enable.auto.commit", "false")
        .create()
        .expect("rogue consumer");
    {
        use rdkafka::consumer::Consumer as _;
        rogue.subscribe(&[env.topic.as_str()]).expect("subscribe");
    }
    let notified = "SELECT count(*) FROM notification.sent";
    let fenced = |m: &[String]| {
        m.iter().any(|l| {
            l.starts_with("idem_handler_incidents_total{handler=\"billing\",kind=\"fenced\"}") && !l.ends_with(" 0")
        })
    };
    let ready_url = format!("{}/readyz", host::admin_url(&config));
    let said = "handler `billing`: in an incident (fenced)";
    let mut named_by_readyz = false;
    let began = Instant::now();
    // Fenced within 30 s; meanwhile, and for 12 s at least while the client
    // holds billing's place, notification goes on.
    let mut sent_more = false;
    loop {
        let _ = rogue.poll(Duration::from_millis(100));
        if let Ok(r) = reqwest::get(&ready_url).await {
            named_by_readyz |= r.text().await.unwrap_or_default().contains(said);
        }
        assert!(child.try_wait().expect("wait").is_none(), "the host stays up when one handler is fenced");
        let is_fenced = fenced(&host::metrics(&config).await);
        assert!(is_fenced || began.elapsed() < Duration::from_secs(30), "billing was not fenced within 30 s");
        if is_fenced && !sent_more {
            send(&env, 11, 10).await;
            sent_more = true;
        }
        if sent_more && began.elapsed() >= Duration::from_secs(12) && env.count(notified).await == 20 {
            break;
        }
        assert!(began.elapsed() < Duration::from_secs(60), "notification processed {}", env.count(notified).await);
    }
    assert!(named_by_readyz, "/readyz named the fenced handler");
    drop(rogue);

    // The fenced handler takes its identity back and catches up, once each.
    send(&env, 21, 10).await;
    charged(&env, 30).await;
    idem_tests::wait_until_async("notification sent 30", || async { env.count(notified).await == 30 }).await;
    let (took, clean) = terminate(child, "TERM").await;
    assert!(clean && took < Duration::from_secs(10), "exit 0 with a report in {took:?}");
    assert_eq!(env.count(DISTINCT_ORDERS).await, 30);
    assert_eq!(env.count(CHARGES).await, 30, "no order charged twice");
    assert_eq!(env.provider.charges(), 30);
    env.finish().await;
}

/// A consumer that gives no sign of being in its group — as librdkafka
/// did in CI after a broker restart, waiting minutes for a group
/// coordinator (`IDEM_TEST_SILENT_CONSUMER` hides its statistics and
/// confirmed commits) — while its broker answers is the handler's
/// incident (`consumer_stalled`): after a minute's silence, its brokers
/// answering for the last 30 s of it, its consumer is made again, the
/// other handler never stops, and
/// every event is processed once.
#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_silent_for_a_minute_while_its_broker_answers_is_made_again() {
    let env = Env::new(2).await;
    let (billing, notification) = (env.billing(), HandlerSpec::notification(&env.topic));
    let config = host::write_config(&env.db.url, &[billing, notification]);
    let id = idem_tests::unique_name("silent");
    let mut child =
        host::spawn(&config, false, &[("IDEM_INSTANCE_ID", id.as_str()), ("IDEM_TEST_SILENT_CONSUMER", "billing")]);
    send(&env, 1, 10).await;
    charged(&env, 10).await;
    let stalled = |m: &[String]| {
        m.iter().any(|l| {
            l.starts_with("idem_handler_incidents_total{handler=\"billing\",kind=\"consumer_stalled\"}")
                && !l.ends_with(" 0")
        })
    };
    let notified = "SELECT count(*) FROM notification.sent";
    let began = Instant::now();
    let mut sent = 10;
    // Events keep coming, one every 5 s: the other handler takes each.
    while !stalled(&host::metrics(&config).await) {
        assert!(child.try_wait().expect("wait").is_none(), "the host stays up");
        let waited = began.elapsed();
        assert!(waited < Duration::from_secs(150), "no consumer_stalled incident within 150 s");
        if waited >= Duration::from_secs(5 * u64::try_from(sent - 9).unwrap_or(0)) {
            send(&env, sent + 1, 1).await;
            sent += 1;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let took = began.elapsed();
    // Its silence began with its last confirmed commit, a moment before
    // `began`: a minute less that moment, and never the 30 s at which the
    // probing starts.
    assert!(took >= Duration::from_secs(50), "a stall is a minute's silence, the brokers answering, first: {took:?}");
    idem_tests::wait_until_async("notification caught up", || async { env.count(notified).await == sent }).await;
    // The other consumer, committing all along, gave its signs of health
    // (its commits confirmed): never taken for stalled.
    let others: Vec<String> = host::metrics(&config)
        .await
        .into_iter()
        .filter(|l| l.starts_with("idem_handler_incidents_total{handler=\"notification\"") && !l.ends_with(" 0"))
        .collect();
    assert!(others.is_empty(), "notification had incidents: {others:?}");

    // Made again, the consumer takes the rest; each order once.
    send(&env, sent + 1, 10).await;
    sent += 10;
    charged(&env, sent).await;
    let (_, clean) = terminate(child, "TERM").await;
    assert!(clean, "exit 0 with a report");
    assert_eq!(env.count(DISTINCT_ORDERS).await, sent);
    assert_eq!(env.count(CHARGES).await, sent, "no order charged twice");
    env.finish().await;
}
