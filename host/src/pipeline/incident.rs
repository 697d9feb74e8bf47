//! A handler's incident: a failure that leaves its pipeline unable to go
//! on as it is — its consumer fenced or failed for good, a partition
//! worker panicked, idem's own tables refusing it.
//!
//! The rule (ARCHITECTURE.md, "Failure stays with its handler"): an
//! incident is that handler's only. Its consumer is closed (its assignment
//! is lost, so nothing past the last resolved record is committed, and
//! whatever was in flight is redelivered and deduplicated) and made again
//! after a backoff that doubles from [`FIRST_WAIT`] to [`LONGEST_WAIT`];
//! every other handler, the relays and the admin API go on. The incident
//! is counted (`idem_handler_incidents_total`), shown while it lasts
//! (`idem_handler_incident`, `/readyz` names the handler), and ends when
//! the new consumer has joined its group. Nothing a handler's consumer,
//! guest, tenant or database does stops the process.
//!
//! Workers report an incident here; the handler's polling thread, which
//! owns the consumer, acts on it at its next turn.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::stats::IncidentKind;

/// The first wait before a consumer is made again.
pub(super) const FIRST_WAIT: Duration = Duration::from_secs(2);
/// The longest: a failure that persists (a revoked grant, a live twin
/// holding the identity) is retried this often.
pub(super) const LONGEST_WAIT: Duration = Duration::from_secs(60);
/// An incident this long after the previous one starts the backoff over.
const QUIET_RESETS: Duration = Duration::from_secs(300);

/// An incident a worker reported, for the polling thread (which looks at
/// every turn: `pending` spares it the lock while there is none).
#[derive(Debug, Default)]
pub(crate) struct Reported {
    pending: AtomicBool,
    report: Mutex<Option<(IncidentKind, String)>>,
}

impl Reported {
    /// Keeps the first report until it is taken: one remake serves all.
    pub(crate) fn report(&self, kind: IncidentKind, account: String) {
        let mut slot = self.report.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some((kind, account));
            self.pending.store(true, Ordering::Release);
        }
    }

    pub(super) fn take(&self) -> Option<(IncidentKind, String)> {
        if !self.pending.swap(false, Ordering::Acquire) {
            return None;
        }
        self.report.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// How long a handler waits before its consumer is made again.
#[derive(Debug)]
pub(super) struct Backoff {
    next: Duration,
    last: Option<Instant>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { next: FIRST_WAIT, last: None }
    }
}

impl Backoff {
    /// The wait for an incident starting now.
    pub(super) fn wait(&mut self) -> Duration {
        if self.last.is_some_and(|at| at.elapsed() >= QUIET_RESETS) {
            self.next = FIRST_WAIT;
        }
        self.last = Some(Instant::now());
        let wait = self.next;
        self.next = (self.next * 2).min(LONGEST_WAIT);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_longest() {
        let mut backoff = Backoff::default();
        let waits: Vec<u64> = (0..7).map(|_| backoff.wait().as_secs()).collect();
        assert_eq!(waits, [2, 4, 8, 16, 32, 60, 60]);
    }

    #[test]
    fn the_first_report_is_kept_until_taken() {
        let reported = Reported::default();
        reported.report(IncidentKind::WorkerPanicked, "first".into());
        reported.report(IncidentKind::LedgerRefused, "second".into());
        assert_eq!(reported.take(), Some((IncidentKind::WorkerPanicked, "first".into())));
        assert_eq!(reported.take(), None);
    }
}
