//! Fault points for the crash tests: abort the process (or panic a
//! partition's worker) at a chosen place, so that a test can show what a
//! crash there leaves behind. They exist only with the `test-hooks` cargo
//! feature, which the test harness's `idem-under-test` enables; the `idem`
//! binary built on its own has none, and reads none of these variables:
//!
//! - `IDEM_TEST_CRASH_AFTER_COMMITS=N`: abort right after the handler's
//!   N-th committed transaction, before its offset can be committed;
//! - `IDEM_TEST_ABORT_ON=<text>`: abort when about to execute an event whose
//!   payload contains the text;
//! - `IDEM_TEST_PANIC_ON=<text>`: panic the partition's worker there instead;
//! - `IDEM_TEST_ABORT_AFTER=<text>`: abort inside a running batch, right
//!   after the event whose payload contains the text ran (its statements and
//!   requests done), before the next event and the batch's COMMIT; only
//!   where a next event follows it in the batch (never on a batch's last
//!   event, nor on a record run alone);
//! - `IDEM_TEST_NO_MODULE_WATCH`: no module watcher, so the host hears of
//!   no activation, as one whose notifications and polls were lost would;
//! - `IDEM_TEST_OUTBOX_ABORT_AFTER_PUBLISH`: abort once the broker has
//!   acknowledged an outbox relay's rows, before they are marked published
//!   (in `outbox/relay.rs`: the outbox does not depend on the pipeline);
//! - `IDEM_TEST_OUTBOX_NO_RELAY`: start no outbox relay, so that what the
//!   handlers commit stays unpublished (in `outbox/relay.rs` too);
//! - `IDEM_TEST_HOLD_POLL_UNTIL=<path>`: the consumers do not poll (so they
//!   serve no rebalance: their group join does not complete) until the
//!   file exists, so a test sees the host before its join whatever the load.

#[cfg(feature = "test-hooks")]
mod enabled {
    use std::sync::atomic::{AtomicU64, Ordering};

    #[derive(Debug, Default)]
    pub(crate) struct FaultPoints {
        crash_after: Option<u64>,
        abort_on: Option<String>,
        panic_on: Option<String>,
        abort_after: Option<String>,
        committed: AtomicU64,
    }

    fn marker(variable: &str) -> Option<String> {
        crate::env::get(variable).filter(|m| !m.is_empty())
    }

    fn matches(marker: &Option<String>, payload: &str) -> bool {
        marker.as_ref().is_some_and(|m| payload.contains(m.as_str()))
    }

    impl FaultPoints {
        pub(crate) fn from_env() -> Self {
            Self {
                crash_after: crate::env::get("IDEM_TEST_CRASH_AFTER_COMMITS").and_then(|v| v.parse().ok()),
                abort_on: marker("IDEM_TEST_ABORT_ON"),
                panic_on: marker("IDEM_TEST_PANIC_ON"),
                abort_after: marker("IDEM_TEST_ABORT_AFTER"),
                committed: AtomicU64::new(0),
            }
        }

        /// Before an event executes.
        pub(crate) fn before(&self, payload: &str) {
            if matches(&self.abort_on, payload) {
                eprintln!("idem: IDEM_TEST_ABORT_ON matched: aborting mid-execution");
                std::process::abort();
            }
            if matches(&self.panic_on, payload) {
                panic!("IDEM_TEST_PANIC_ON matched: a partition worker panics");
            }
        }

        /// Inside a batch, after the event `ran` executed.
        pub(crate) fn after_in_batch(&self, ran: &str) {
            if matches(&self.abort_after, ran) {
                eprintln!("idem: IDEM_TEST_ABORT_AFTER matched: aborting inside a batch, before its COMMIT");
                std::process::abort();
            }
        }

        /// After a transaction committed, before its offsets are.
        pub(crate) fn committed(&self) {
            let n = self.committed.fetch_add(1, Ordering::SeqCst) + 1;
            if self.crash_after == Some(n) {
                eprintln!("idem: IDEM_TEST_CRASH_AFTER_COMMITS={n} reached: aborting before the offset commit");
                std::process::abort();
            }
        }
    }
}

#[cfg(not(feature = "test-hooks"))]
mod disabled {
    /// Without `test-hooks`: no fault points, nothing read, nothing checked.
    #[derive(Debug, Default)]
    pub(crate) struct FaultPoints;

    impl FaultPoints {
        pub(crate) fn from_env() -> Self {
            Self
        }
        #[inline]
        pub(crate) fn before(&self, _payload: &str) {}
        #[inline]
        pub(crate) fn after_in_batch(&self, _ran: &str) {}
        #[inline]
        pub(crate) fn committed(&self) {}
    }
}

/// Whether this host runs without a module watcher
/// (`IDEM_TEST_NO_MODULE_WATCH`; never without `test-hooks`).
pub(crate) fn no_module_watch() -> bool {
    #[cfg(feature = "test-hooks")]
    return crate::env::get("IDEM_TEST_NO_MODULE_WATCH").is_some();
    #[cfg(not(feature = "test-hooks"))]
    false
}

/// Waits before a consumer's first poll until `IDEM_TEST_HOLD_POLL_UNTIL`'s
/// file exists, or `stop` (never without `test-hooks`).
pub(crate) fn hold_poll(stop: &tokio::sync::watch::Receiver<bool>) {
    #[cfg(feature = "test-hooks")]
    if let Some(path) = crate::env::get("IDEM_TEST_HOLD_POLL_UNTIL") {
        while !std::path::Path::new(&path).exists() && !*stop.borrow() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    #[cfg(not(feature = "test-hooks"))]
    let _ = stop;
}

/// Whether `handler`'s consumer hides its signs of health
/// (`IDEM_TEST_SILENT_CONSUMER`; never without `test-hooks`).
pub(crate) fn silent_consumer(handler: &str) -> bool {
    #[cfg(feature = "test-hooks")]
    return crate::env::get("IDEM_TEST_SILENT_CONSUMER").is_some_and(|h| h == handler);
    #[cfg(not(feature = "test-hooks"))]
    {
        let _ = handler;
        false
    }
}

#[cfg(not(feature = "test-hooks"))]
pub(crate) use disabled::FaultPoints;
#[cfg(feature = "test-hooks")]
pub(crate) use enabled::FaultPoints;
