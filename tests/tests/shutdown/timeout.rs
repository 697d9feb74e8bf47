//! `[shutdown] timeout` other than the default 10 s is the one obeyed.

use std::time::Duration;

use crate::{Env, Host, slow};

/// README: "SIGTERM (and SIGINT) ends the host within `[shutdown] timeout`
/// … in-flight events get half of it to finish". With `timeout = "2s"` and
/// an event that would run 30 s: the host waits about 1 s for it (idem
/// keeps 300 ms of the bound for the exit), then exits 0 within the 2 s,
/// the event rolled back. Under the default 10 s it would wait 5 s (the
/// test above), so a host that ignored the setting fails the upper bound;
/// one that did not wait for in-flight events fails the lower one.
#[tokio::test(flavor = "multi_thread")]
async fn a_short_shutdown_timeout_ends_the_host_within_it() {
    let env = Env::new(1).await;
    let spec = env.scenarios();
    let config = env.config(&spec, Some("2s"));
    let host = Host::start(&config, &[], false);
    let (id, payload) = slow(30.0, "short_timeout");
    env.send(0, &payload).await;
    env.running("short_timeout").await;

    let stopped = host.stop("TERM").await;
    assert!(stopped.status.success(), "{}", stopped.status);
    assert!(
        stopped.took >= Duration::from_millis(800) && stopped.took < Duration::from_secs(2),
        "waited about half of the 2 s for the event in flight, then exited within the 2 s: {:?}",
        stopped.took
    );
    assert!(stopped.log.contains("in-flight events did not finish within"), "said so");
    assert_eq!(env.rows_of(id).await, (0, 0), "the event rolled back");
    assert_eq!(env.committed(&spec.group_id, 1), vec![None], "and not committed");
    env.finish().await;
}

/// The other way: `timeout = "30s"` gives in-flight events 15 s, so an
/// event of 8 s running at SIGTERM, which the default 10 s (5 s for it)
/// would roll back, finishes and commits: its effect and dedup rows, its
/// offset committed, counted processed, no warning; the host exits 0 once
/// it is done, well within the 30 s.
#[tokio::test(flavor = "multi_thread")]
async fn a_long_shutdown_timeout_lets_a_slow_event_finish_and_commit() {
    let env = Env::new(1).await;
    let spec = env.scenarios();
    let config = env.config(&spec, Some("30s"));
    let host = Host::start(&config, &[], false);
    let (id, payload) = slow(8.0, "long_timeout");
    env.send(0, &payload).await;
    env.running("long_timeout").await;

    let stopped = host.stop("TERM").await;
    assert!(stopped.status.success(), "{}", stopped.status);
    assert!(stopped.took < Duration::from_secs(15), "ended once the event was done: {:?}", stopped.took);
    assert!(!stopped.log.contains("did not finish"), "nothing left unfinished");
    assert_eq!(env.rows_of(id).await, (1, 1), "the event finished and committed");
    assert_eq!(env.committed(&spec.group_id, 1), vec![Some(1)], "and its offset");
    let r = &stopped.reports[0];
    assert_eq!((r.processed, r.failed), (1, 0), "{r:?}");
    env.finish().await;
}
