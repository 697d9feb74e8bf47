//! A stop signal while `idem run` is still starting.

use std::sync::Mutex;
use std::time::Duration;

use idem_tests::host;

use crate::{Env, Host};

/// docs/operating.md: idem listens for its stop signals before it starts anything, so
/// a stop during start-up ends it there (as a container's PID 1, a signal
/// nobody listens for is ignored, and the pod would wait out its grace
/// period). The host's start-up waits on a "PostgreSQL" that accepts
/// connections and never answers (10 s before it gives up); SIGTERM,
/// SIGINT and SIGUSR1, sent while it waits, each end it at once, as a clean
/// exit that says why. Were the signals not listened for yet, the process would die
/// of the signal (a failed status here), or, as PID 1, not at all.
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_signal_during_start_up_ends_the_host_there() {
    let env = Env::new(1).await;
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    silent.set_nonblocking(true).expect("non-blocking listener");
    let url = format!("postgres://idem@{}/idem", silent.local_addr().expect("address"));
    let config = host::write_config_for(&env.brokers, &url, &[env.billing()]);
    // The connections the host opened, held open (unanswered) until the end.
    let held = Mutex::new(Vec::new());
    for signal in ["TERM", "INT", "USR1"] {
        let host = Host::start(&config, &[], false);
        let connected = || match silent.accept() {
            Ok((stream, _)) => {
                held.lock().expect("held").push(stream);
                true
            }
            Err(_) => false,
        };
        idem_tests::wait_until("the host's start-up connected to the silent database", connected).await;
        let stopped = host.stop(signal).await;
        assert!(stopped.status.success(), "SIG{signal} during start-up is a clean exit: {}", stopped.status);
        assert!(stopped.took < Duration::from_secs(5), "it did not wait for the database: {:?}", stopped.took);
        assert!(
            stopped.log.contains(&format!("SIG{signal} during start-up")),
            "the host said it stopped during start-up"
        );
    }
    env.finish().await;
}
