//! The signals that stop `idem run`, listened for from its first moment.
//!
//! A process handles a signal only once something listens for it; until
//! then the kernel's default applies, and for a container's PID 1 (idem's
//! image runs it so) that default is to ignore SIGTERM and SIGINT. Were
//! they listened for only once the handlers ran, a pod stopped during a
//! long start-up (components compiling, PostgreSQL not answering) would
//! wait out its whole grace period. So `idem run` listens before it
//! prepares anything, and a stop during start-up ends it there.

use tokio::signal::unix::{Signal, SignalKind, signal};

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

    /// The next stop signal.
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
            () = delivered(&mut self.int) => Stop::Restart("SIGINT"),
            () = delivered(&mut self.term) => Stop::Restart("SIGTERM"),
            () = delivered(&mut self.usr1) => Stop::Leave,
        }
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
