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
/// exit that says why. Were the signals not listened for yet, the process
/// would die of the signal (a failed status here), or, as PID 1, not at all.
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

/// A stop while a component compiles ends the host and its compiler: the
/// compile runs in a child process of its own (a CPU limit, a crash
/// contained), which a host exiting during start-up kills rather than leave
/// it compiling for nobody until its limit. The Python example (tens of MB
/// of component) compiles for seconds; the cache is off, so it compiles.
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_signal_while_a_component_compiles_ends_the_compiler_too() {
    let env = Env::new(1).await;
    let mut spec = env.billing();
    spec.component = "billing-python";
    spec.extra = "max_module_mib = 64\n".into();
    let config = host::write_config_for(&env.brokers, &env.db.url, &[spec]);
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, format!("[runtime]\ncache_dir = \"off\"\n{text}")).expect("config");
    let host = Host::start(&config, &[], false);
    let command = idem::runtime::compiler::CHILD_COMMAND;
    let pid = host.child.id();
    let found = Mutex::new(Vec::new());
    idem_tests::wait_until("the host's compiler process started", || {
        let running = host::descendants_running(pid, command);
        let started = !running.is_empty();
        *found.lock().expect("found") = running;
        started
    })
    .await;
    let compilers = found.into_inner().expect("found");
    let stopped = host.stop("TERM").await;
    assert!(stopped.status.success(), "SIGTERM while compiling is a clean exit: {}", stopped.status);
    assert!(stopped.took < Duration::from_secs(5), "it did not wait for the compile: {:?}", stopped.took);
    assert!(stopped.log.contains("SIGTERM during start-up"), "the host said it stopped during start-up");
    // Killed, the compiler is gone (or a zombie waiting for its new parent)
    // within a second of the host's exit; left alone it would compile for
    // seconds more (the example takes ~8 s of a 2-core machine in the test
    // build; on a machine so fast that it took under a second this check
    // could not tell, which the start-up line above would then say).
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    while compilers.iter().any(|(pid, _)| alive(*pid)) {
        assert!(std::time::Instant::now() < deadline, "a compiler outlived the host that started it: {compilers:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.finish().await;
}
