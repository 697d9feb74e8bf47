//! A final commit the broker cannot confirm: the broker is down at SIGTERM.
//! On a broker of the test's own (`broker.rs`): stopping the suite's
//! shared one would fail every test beside it.

use std::time::Duration;

use idem_tests::host::HandlerSpec;

use crate::broker::Broker;
use crate::{Env, Host, scenario, slow};

/// README: "A commit not confirmed in time is logged at error level with
/// the positions whose records will be redelivered (and skipped as
/// duplicates)". An event processed (committed in PostgreSQL) while the
/// only broker is down, then SIGTERM (the session, 30 s, still holds): the
/// host cannot commit its position (offset 2), says so at error level
/// naming `<topic>/0 at Offset(2)`, and exits within its 4 s bound. Once
/// the broker is back the group's offset is still 1, so the restarted host
/// gets the event again and skips it as a duplicate: its effect stays once.
#[tokio::test(flavor = "multi_thread")]
async fn a_final_commit_the_broker_cannot_confirm_is_logged_with_its_positions() {
    let (o, host) = Outage::new("30000").await;
    let stopped = host.stop("TERM").await;
    assert!(stopped.took < Duration::from_secs(5), "ended within its 4 s bound (+1 s to exit): {:?}", stopped.took);
    let logged = stopped.log.lines().find(|l| l.contains("the final offset commit was not confirmed"));
    let logged = logged.unwrap_or_else(|| panic!("no line about the unconfirmed commit"));
    assert!(
        logged.contains(" ERROR ") && logged.contains(&o.position),
        "at error level, naming {}: {logged}",
        o.position
    );
    o.redelivered_and_skipped().await;
}

/// The same, the broker down long enough for the host's session (6 s) to
/// expire first: the partition is revoked while the broker is down, and
/// SIGTERM comes then. The revocation's commit of offset 2 cannot be
/// confirmed either; README promises the same error naming the position.
#[tokio::test(flavor = "multi_thread")]
async fn a_commit_left_unconfirmed_by_a_revocation_during_an_outage_is_logged_with_its_position_at_sigterm() {
    let (o, host) = Outage::new("6000").await;
    idem_tests::wait_until("the session expired: the partition revoked", || {
        std::fs::read_to_string(&host.log).is_ok_and(|l| l.contains("partitions revoked"))
    })
    .await;
    let stopped = host.stop("TERM").await;
    assert!(stopped.took < Duration::from_secs(5), "ended within its 4 s bound (+1 s to exit): {:?}", stopped.took);
    let logged = stopped.log.lines().any(|l| l.contains(" ERROR ") && l.contains(&o.position));
    assert!(logged, "an error naming {} (the watchdog's line names no position)", o.position);
    o.redelivered_and_skipped().await;
}

/// What a host whose second event was processed while the broker was down
/// ran on.
struct Outage {
    broker: Broker,
    env: Env,
    spec: HandlerSpec,
    config: std::path::PathBuf,
    identity: String,
    event: uuid::Uuid,
    /// How the host names the position that cannot be committed.
    position: String,
}

impl Outage {
    /// `session`: the consumers' `session.timeout.ms`; `[shutdown] timeout` 4 s.
    async fn new(session: &str) -> (Self, Host) {
        let broker = Broker::start();
        let topic = broker.topic().await;
        let env = Env::on(broker.address(), topic, idem_tests::kafka::producer_from(broker.client())).await;
        let spec = env.scenarios();
        let config = env.config(&spec, Some("4s"));
        let text = std::fs::read_to_string(&config).expect("config");
        let default = "\"session.timeout.ms\" = \"6000\"";
        assert!(text.contains(default), "the harness's config sets {default}");
        let session = format!("\"session.timeout.ms\" = \"{session}\"");
        std::fs::write(&config, text.replace(default, &session)).expect("config");
        let identity = idem_tests::unique_name("unconfirmed");
        let host = Host::start(&config, &[("IDEM_INSTANCE_ID", &identity)], false);
        let (_, payload) = scenario("ok", serde_json::json!({}));
        env.send(0, &payload).await;
        idem_tests::wait_until("the first event committed", || env.committed(&spec.group_id, 1) == vec![Some(1)]).await;
        let (event, payload) = slow(3.0, "unconfirmed_commit");
        env.send(0, &payload).await;
        env.running("unconfirmed_commit").await;
        broker.stop();
        assert_eq!(env.rows_of(event).await, (0, 0), "the broker was down before the event was done");
        idem_tests::wait_until_async("the event committed in PostgreSQL", || async {
            env.rows_of(event).await == (1, 1)
        })
        .await;
        let position = format!("{}/0 at Offset(2)", env.topic);
        (Self { broker, env, spec, config, identity, event, position }, host)
    }

    /// The broker back, the position was never committed: the host
    /// restarted gets the event again and skips it as a duplicate.
    async fn redelivered_and_skipped(self) {
        let Self { broker, env, spec, config, identity, event, position: _ } = self;
        broker.again();
        assert_eq!(env.committed(&spec.group_id, 1), vec![Some(1)], "the position never reached the broker");
        let next = Host::start(&config, &[("IDEM_INSTANCE_ID", &identity)], true).drained().await;
        assert!(next.status.success(), "{}", next.status);
        let r = &next.reports[0];
        assert_eq!((r.delivered, r.processed, r.duplicates), (1, 0, 1), "redelivered and skipped: {r:?}");
        assert_eq!(env.rows_of(event).await, (1, 1), "its effect once");
        assert_eq!(env.committed(&spec.group_id, 1), vec![Some(2)]);
        env.finish().await;
        broker.remove();
    }
}
