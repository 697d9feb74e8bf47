//! The signals that stop `idem run`, listened for from its first moment.
//!
//! A process handles a signal only once something listens for it; until
//! then the kernel's default applies, and for a container's PID 1 (idem's
//! image runs it so) that default is to ignore SIGTERM and SIGINT. Were
//! they listened for only once the handlers ran, a pod stopped during a
//! long start-up (components compiling, PostgreSQL not answering) would
//! wait out its whole grace period. So `idem run` listens before it
//! prepares anything, and a stop during start-up ends the process there
//! ([`StopSignals::guard_start_up`]), from a task of its own: start-up
//! blocks the thread it runs on while a component compiles.

use anyhow::Context as _;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// What a stop signal asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// SIGINT or SIGTERM (named): a restart is expected, so static
    /// members keep their partitions.
    Restart(&'static str),
    /// SIGUSR1: scale-in; the host leaves its consumer groups.
    Leave,
}

/// SIGINT, SIGTERM and SIGUSR1, listened for since [`StopSignals::listen`].
pub(super) struct StopSignals {
    int: Option<Signal>,
    term: Option<Signal>,
    usr1: Option<Signal>,
}

impl StopSignals {
    /// Listens from now on. A signal that cannot be listened for keeps the
    /// system's default (logged): the others still stop idem.
    pub(super) fn listen() -> Self {
        let listen = |kind: SignalKind, name: &str| {
            signal(kind)
                .map_err(|e| tracing::error!("cannot listen for {name} ({e}): it acts as the system's default"))
                .ok()
        };
        Self {
            int: listen(SignalKind::interrupt(), "SIGINT"),
            term: listen(SignalKind::terminate(), "SIGTERM"),
            usr1: listen(SignalKind::user_defined1(), "SIGUSR1"),
        }
    }

    /// Until [`StartUp::over`], a stop signal ends the process at once,
    /// with status 0, the compilers it started killed and an empty report
    /// on stdout: nothing ran yet, and nothing is left half done that a
    /// kill would not leave (the database's transactions roll back).
    pub(super) fn guard_start_up(mut self) -> StartUp {
        let (over, mut told) = oneshot::channel();
        let guard = tokio::spawn(async move {
            let stopped = tokio::select! {
                biased;
                stop = self.next() => Some(stop),
                _ = &mut told => None,
            };
            if let Some(stop) = stopped {
                tracing::warn!("{stop} during start-up: exiting before any handler ran");
                crate::runtime::compiler::kill_running();
                let _ = super::report(&[]);
                std::process::exit(0);
            }
            self
        });
        StartUp { over, guard }
    }

    /// The next stop signal. SIGUSR1 first: a scale-in's hook sends it just
    /// before the SIGTERM that stops the pod, and it must not be lost.
    pub(super) async fn next(&mut self) -> Stop {
        /// A signal's next delivery; never, for one not listened for.
        async fn delivered(signal: &mut Option<Signal>) {
            match signal {
                // `None`: the runtime is going away, which stops idem too.
                Some(signal) => drop(signal.recv().await),
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            biased;
            () = delivered(&mut self.usr1) => Stop::Leave,
            () = delivered(&mut self.term) => Stop::Restart("SIGTERM"),
            () = delivered(&mut self.int) => Stop::Restart("SIGINT"),
        }
    }
}

/// Start-up under [`StopSignals::guard_start_up`].
pub(super) struct StartUp {
    over: oneshot::Sender<()>,
    guard: JoinHandle<StopSignals>,
}

impl StartUp {
    /// Start-up is over: the signals, for the shutdown to wait on.
    pub(super) async fn over(self) -> anyhow::Result<StopSignals> {
        let _ = self.over.send(());
        self.guard.await.context("the start-up's signal guard failed")
    }
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Restart(name) => f.write_str(name),
            Self::Leave => f.write_str("SIGUSR1"),
        }
    }
}
