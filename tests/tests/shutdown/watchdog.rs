//! The shutdown watchdog: the process ends at `[shutdown] timeout` after
//! SIGTERM whatever still runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::{Env, Host, scenario};

/// README: "a watchdog exits the process at the bound whatever still
/// runs". What still runs here: exporting the last spans, which idem does
/// after its consumers have stopped, to an OTLP collector that accepts the
/// connection and never answers (the exporter gives up after ~5 s: with a
/// 30 s timeout the same host exits 0 after 5.06 s, measured). With
/// `timeout = "2s"` the process ends 2 s after SIGTERM, not before and
/// not at the exporter's 5 s, saying why at error level, with exit status
/// 1 (`app/cli/mod.rs`: the watchdog's `process::exit(1)`; README names no
/// status for it). Without the watchdog the exit would come at ~5 s.
#[tokio::test(flavor = "multi_thread")]
async fn the_watchdog_ends_the_process_at_the_shutdown_timeout_whatever_still_runs() {
    let env = Env::new(1).await;
    let (collector, connections) = black_hole().await;
    let spec = env.scenarios();
    let config = env.config(&spec, Some("2s"));
    let endpoint = format!("http://{collector}");
    let host = Host::start(&config, &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)], false);
    let (id, payload) = scenario("ok", serde_json::json!({}));
    env.send(0, &payload).await;
    idem_tests::wait_until_async("the event processed", || async { env.rows_of(id).await == (1, 1) }).await;

    let stopped = host.stop("TERM").await;
    assert!(connections.load(Ordering::SeqCst) >= 1, "the host connected to the collector that never answers");
    assert!(
        stopped.took >= Duration::from_secs(2) && stopped.took < Duration::from_secs(4),
        "the process ended at the 2 s bound, not before and not when the exporter gave up (~5 s): {:?}",
        stopped.took
    );
    assert_eq!(stopped.status.code(), Some(1), "the watchdog's exit: {}", stopped.status);
    let said = "shutdown did not finish within 2s ([shutdown] timeout): exiting now";
    assert!(
        stopped.log.lines().any(|l| l.contains(" ERROR ") && l.contains(said)),
        "the watchdog said why, at error level: {said}"
    );
    assert_eq!(env.committed(&spec.group_id, 1), vec![Some(1)], "the consumers had stopped and committed first");
    env.finish().await;
}

/// A TCP listener that accepts every connection and never answers nor
/// closes one (for the test's life); its address and how many it took.
async fn black_hole() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            held.push(stream);
        }
    });
    (address, connections)
}
