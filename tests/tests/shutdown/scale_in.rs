//! SIGUSR1 (scale-in) against SIGTERM (a restart) with two static members
//! of one group, under the classic protocol, with 30 s sessions so that
//! anything that waits for the stopped host's session shows.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use idem_tests::host::{self, HandlerSpec, order_payload};
use idem_tests::kafka;

use crate::{Env, Host};

const PARTITIONS: i32 = 4;
const SESSION: Duration = Duration::from_secs(30);
/// Far below [`SESSION`]: a rebalance takes a few seconds.
const AT_ONCE: Duration = Duration::from_secs(10);

/// README: "Scale-in: stop the host with SIGUSR1 … it shuts down the same
/// way and leaves its groups, so its partitions are reassigned at once
/// under the classic protocol." Hosts A and B share a group; A gets
/// SIGUSR1, exits 0, and its orders are charged by B within 10 s of the
/// signal, with 30 s sessions: a host that kept its static membership
/// (SIGTERM, the next test) would hold its partitions for the 30 s.
#[tokio::test(flavor = "multi_thread")]
async fn sigusr1_hands_the_hosts_partitions_to_the_rest_of_its_group_at_once() {
    let env = Env::new(PARTITIONS).await;
    let spec = env.billing();
    let (a, b, of_a) = two_hosts(&env, &spec).await;

    let began = Instant::now();
    let stopped = a.stop("USR1").await;
    assert!(stopped.status.success(), "{}", stopped.status);
    assert!(stopped.log.contains("SIGUSR1: leaving the consumer groups"), "A said it leaves");
    send_to(&env, &of_a, 100).await;
    idem_tests::wait_until_async("B charges the orders of A's partitions", || async {
        charged(&env).await == of_a.len() as i64
    })
    .await;
    let took = began.elapsed();
    assert!(took < AT_ONCE, "A's partitions {of_a:?} processed by B {took:?} after SIGUSR1 (session {SESSION:?})");
    assert!(env.provider.keys().iter().flatten().all(|k| k.starts_with("b:")), "B charged them");
    assert_eq!(kafka::classic_group_members(&spec.group_id).map(|(_, n)| n), Ok(1), "A left the group");
    b.stop("TERM").await;
    env.finish().await;
}

/// README: "A static member keeps its membership on SIGTERM: its
/// partitions wait for its restart." A gets SIGTERM: for 12 s B charges
/// none of the orders sent to A's partitions and the group still counts
/// two members; A restarted with its identity charges them within 10 s.
/// This is what SIGUSR1 (above) must not do.
#[tokio::test(flavor = "multi_thread")]
async fn a_static_member_stopped_with_sigterm_keeps_its_partitions_for_its_restart() {
    let env = Env::new(PARTITIONS).await;
    let spec = env.billing();
    let (a, b, of_a) = two_hosts(&env, &spec).await;
    let config_a = a.config.clone();

    let stopped = a.stop("TERM").await;
    assert!(stopped.status.success(), "{}", stopped.status);
    send_to(&env, &of_a, 100).await;
    let waiting = Instant::now();
    while waiting.elapsed() < Duration::from_secs(12) {
        assert_eq!(charged(&env).await, 0, "B took A's partitions {:?} after SIGTERM", waiting.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(kafka::classic_group_members(&spec.group_id).map(|(_, n)| n), Ok(2), "A is still a member");

    let restarted = Instant::now();
    let a = Host::start(&config_a, &[("IDEM_INSTANCE_ID", &identity(&spec, "a"))], false);
    idem_tests::wait_until_async("A, restarted, charges them", || async { charged(&env).await == of_a.len() as i64 })
        .await;
    assert!(restarted.elapsed() < AT_ONCE, "A's partitions back with A within {:?}", restarted.elapsed());
    for host in [a, b] {
        assert!(host.stop("TERM").await.status.success());
    }
    env.finish().await;
}

/// A config of `spec` with 30 s sessions, its requests' keys prefixed
/// `prefix` (which host charged an order).
fn config(env: &Env, spec: &HandlerSpec, prefix: &str) -> PathBuf {
    let spec = HandlerSpec { key_prefix: Some(prefix.into()), ..spec.clone() };
    let path = env.config(&spec, None);
    let text = std::fs::read_to_string(&path).expect("config");
    let default = "\"session.timeout.ms\" = \"6000\"";
    assert!(text.contains(default), "the harness's config sets {default}: {}", path.display());
    let text = text.replace(default, &format!("\"session.timeout.ms\" = \"{}\"", SESSION.as_millis()));
    std::fs::write(&path, text).expect("config");
    path
}

/// The host's static identity: one per test and host.
fn identity(spec: &HandlerSpec, host: &str) -> String {
    format!("{}-{host}", spec.group_id)
}

/// Hosts A and B of `spec`'s group, each with some of the partitions;
/// returns them and A's partitions.
async fn two_hosts(env: &Env, spec: &HandlerSpec) -> (Host, Host, Vec<i32>) {
    let a = Host::start(&config(env, spec, "a"), &[("IDEM_INSTANCE_ID", &identity(spec, "a"))], false);
    let b = Host::start(&config(env, spec, "b"), &[("IDEM_INSTANCE_ID", &identity(spec, "b"))], false);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (of_a, of_b) = (host::assigned(&a.config, PARTITIONS).await, host::assigned(&b.config, PARTITIONS).await);
        let stable = kafka::classic_group_members(&spec.group_id).is_ok_and(|(s, n)| s == "Stable" && n == 2);
        if stable && !of_a.is_empty() && !of_b.is_empty() && of_a.len() + of_b.len() == PARTITIONS as usize {
            return (a, b, of_a);
        }
        assert!(Instant::now() < deadline, "no stable group of A {of_a:?} and B {of_b:?} within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One order per partition of `partitions`, order ids from `from`.
async fn send_to(env: &Env, partitions: &[i32], from: i64) {
    for (i, p) in partitions.iter().enumerate() {
        env.send(*p, &order_payload(from + i as i64).1).await;
    }
}

async fn charged(env: &Env) -> i64 {
    env.count("SELECT count(*) FROM billing.charge").await
}
