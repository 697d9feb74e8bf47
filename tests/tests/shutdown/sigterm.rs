//! SIGTERM with an event in flight that outlasts the half of `[shutdown]
//! timeout` in-flight events get.

use std::time::Duration;

use crate::{Env, Host, scenario, slow};

/// README: on SIGTERM "in-flight events get half of it to finish (one
/// still running is not committed: its transaction is rolled back when
/// the process exits, and it is redelivered)". An event holding its
/// transaction for 7 s, running at SIGTERM under the default 10 s timeout
/// (half: 5 s): the host exits 0 before the 7 s are up, leaving neither the
/// event's effect row nor its dedup row and its offset uncommitted; the
/// next host (the same identity, a restart) gets it again and its effect
/// happens once. Were it committed at the exit, its rows would be there
/// after the first host; were it not redelivered, the next host would
/// process nothing.
#[tokio::test(flavor = "multi_thread")]
async fn an_event_running_at_sigterm_is_rolled_back_and_redelivered_to_the_next_host() {
    let env = Env::new(1).await;
    let spec = env.scenarios();
    let config = env.config(&spec, None);
    let identity = idem_tests::unique_name("sigterm");
    let vars = [("IDEM_INSTANCE_ID", identity.as_str())];
    let host = Host::start(&config, &vars, false);
    let (first, payload) = scenario("ok", serde_json::json!({}));
    env.send(0, &payload).await;
    idem_tests::wait_until("the first event committed", || env.committed(&spec.group_id, 1) == vec![Some(1)]).await;
    let (slow_id, payload) = slow(7.0, "running_at_sigterm");
    env.send(0, &payload).await;
    env.running("running_at_sigterm").await;

    let stopped = host.stop("TERM").await;
    assert!(stopped.status.success(), "SIGTERM is a clean exit: {}", stopped.status);
    assert!(stopped.took < Duration::from_secs(7), "it did not wait for the 7 s event: {:?}", stopped.took);
    assert!(
        stopped.log.contains("in-flight events did not finish within"),
        "the host said the event in flight was not finished"
    );
    assert_eq!(env.rows_of(first).await, (1, 1), "the event before it committed");
    assert_eq!(env.rows_of(slow_id).await, (0, 0), "rolled back: neither its effect nor its dedup row");
    assert_eq!(env.committed(&spec.group_id, 1), vec![Some(1)], "its offset not committed");

    let next = Host::start(&config, &vars, true).drained().await;
    assert!(next.status.success(), "{}", next.status);
    let r = &next.reports[0];
    assert_eq!((r.delivered, r.processed, r.duplicates, r.failed), (1, 1, 0, 0), "it alone redelivered: {r:?}");
    assert_eq!(env.rows_of(slow_id).await, (1, 1), "its effect happened once, and its dedup row");
    assert_eq!(env.rows_of(first).await, (1, 1));
    assert_eq!(env.committed(&spec.group_id, 1), vec![Some(2)]);
    env.finish().await;
}
