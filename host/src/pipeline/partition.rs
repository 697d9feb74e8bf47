//! One assigned partition: its queue, its offsets, and the task that
//! processes its records one at a time in offset order.
//!
//! A partition's state belongs to one assignment. When the
//! partition is revoked, its state leaves the consumer's map: a worker that
//! finishes late updates a state nobody commits from any more, so a late
//! completion never commits for a partition this process no longer owns.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::mpsc;

use super::Shared;
use crate::error::ErrorClass;
use crate::executor::Outcome;
use crate::offsets::OffsetTracker;
use crate::stats::Stats;
use crate::validate::Record;

pub(crate) struct PartitionState {
    pub topic: String,
    pub partition: i32,
    tracker: Mutex<OffsetTracker>,
    /// Set on revocation or shutdown: take no new record.
    stopped: AtomicBool,
    /// A record is being executed right now.
    busy: AtomicBool,
    /// Records queued and not yet taken by the worker.
    pub queued: AtomicUsize,
    /// The consumer paused fetching for this partition (queue too long).
    pub paused: AtomicBool,
    /// Where the partition resumed, to detect offset resets.
    pub start: Mutex<Start>,
    sender: mpsc::UnboundedSender<Record>,
}

impl PartitionState {
    /// A new state and the receiver its worker drains.
    pub(crate) fn new(topic: &str, partition: i32) -> (Arc<Self>, mpsc::UnboundedReceiver<Record>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let state = Self {
            topic: topic.to_owned(),
            partition,
            tracker: Mutex::new(OffsetTracker::default()),
            stopped: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            queued: AtomicUsize::new(0),
            paused: AtomicBool::new(false),
            start: Mutex::new(Start::default()),
            sender,
        };
        (Arc::new(state), receiver)
    }

    pub(crate) fn start(&self) -> MutexGuard<'_, Start> {
        self.start.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn tracker(&self) -> MutexGuard<'_, OffsetTracker> {
        self.tracker.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `record` for the worker (called by the polling thread only).
    pub(crate) fn push(&self, record: Record) {
        self.tracker().delivered(record.offset);
        self.queued.fetch_add(1, Ordering::SeqCst);
        if self.sender.send(record).is_err() {
            // The worker is gone (stopped): the record stays unresolved and
            // uncommitted, so it is redelivered to whoever owns it next.
            self.queued.fetch_sub(1, Ordering::SeqCst);
        }
    }

    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    pub(crate) fn is_busy(&self) -> bool {
        self.busy.load(Ordering::SeqCst)
    }
}

/// Where a partition resumed in this assignment. The group's committed
/// offset is looked up after the assignment and the first record may arrive
/// before or after that answer; whichever comes second completes the check.
#[derive(Debug, Default)]
pub(crate) struct Start {
    /// The group's committed offset at assignment (`Some(None)`: none).
    pub committed: Option<Option<i64>>,
    /// The first offset delivered in this assignment.
    pub first: Option<i64>,
    checked: bool,
}

/// An offset reset: the partition did not resume at a committed offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reset {
    /// The group had no committed offset: `auto.offset.reset` chose.
    NoCommittedOffset,
    /// The first record delivered was not at the committed offset.
    Moved { committed: i64, resumed_at: i64 },
}

impl Start {
    /// The reset to report, once, when enough is known.
    pub(crate) fn check(&mut self) -> Option<Reset> {
        if self.checked {
            return None;
        }
        let reset = match (self.committed?, self.first) {
            (None, _) => Some(Reset::NoCommittedOffset),
            (Some(committed), Some(first)) if first != committed => Some(Reset::Moved { committed, resumed_at: first }),
            (Some(_), Some(_)) => None,
            (Some(_), None) => return None,
        };
        self.checked = true;
        reset
    }
}

/// Drains the partition's queue until it is stopped or the queue closes.
pub(crate) async fn work(shared: Arc<Shared>, state: Arc<PartitionState>, mut queue: mpsc::UnboundedReceiver<Record>) {
    while let Some(record) = queue.recv().await {
        state.queued.fetch_sub(1, Ordering::SeqCst);
        let Ok(_permit) = shared.permits.acquire().await else { return };
        // `busy` before the `stopped` check: whoever stops the partition
        // then waits for `busy` to clear, so it never misses this record.
        state.busy.store(true, Ordering::SeqCst);
        if state.is_stopped() {
            state.busy.store(false, Ordering::SeqCst);
            return;
        }
        let offset = record.offset;
        if process(&shared, &state, record).await {
            state.tracker().completed(offset);
        }
        state.busy.store(false, Ordering::SeqCst);
    }
}

/// Validates and executes one record. `true`: resolved, its offset may be
/// committed; `false`: abandoned (stopped or fatal), to be redelivered.
async fn process(shared: &Shared, state: &PartitionState, record: Record) -> bool {
    let stats = &shared.stats;
    let name = &shared.name;
    let (topic, partition, offset) = (&record.topic, record.partition, record.offset);
    let event = match shared.validator.validate(&record) {
        Ok(event) => event,
        Err(invalid) => {
            tracing::warn!(handler = %name, %topic, partition, offset, reason = %invalid, "invalid record skipped");
            Stats::add(&stats.invalid);
            return true;
        }
    };
    let event_id = event.id;
    let mut attempt = 1;
    loop {
        let error = match shared.executor.execute(&event, attempt).await {
            Ok(Outcome::Processed) => {
                Stats::add(&stats.processed);
                shared.fault_point();
                return true;
            }
            Ok(Outcome::Duplicate) => {
                tracing::debug!(handler = %name, %topic, partition, offset, %event_id, "duplicate skipped");
                Stats::add(&stats.duplicates);
                return true;
            }
            Err(error) => error,
        };
        // A database outage is not the event's fault: retry it for as long
        // as it lasts instead of spending the event's attempts.
        let infrastructure = matches!(error, crate::ExecError::Database(_));
        match error.class() {
            ErrorClass::Retryable if infrastructure || attempt < shared.max_attempts => {
                tracing::warn!(handler = %name, %topic, partition, offset, %event_id, attempt, "retrying: {error}");
                Stats::add(&stats.retries);
            }
            ErrorClass::Retryable | ErrorClass::Permanent => {
                tracing::error!(
                    handler = %name, %topic, partition, offset, %event_id, attempt,
                    "event failed and is skipped (its transaction rolled back): {error}"
                );
                Stats::add(&stats.failed);
                return true;
            }
            ErrorClass::Fatal => {
                tracing::error!(handler = %name, %topic, partition, offset, %event_id, "fatal: {error}");
                shared.fatal(format!("handler {name}: {error}"));
                return false;
            }
        }
        let backoff = Duration::from_millis(100 * 2u64.pow(attempt.min(6))).min(Duration::from_secs(5));
        tokio::time::sleep(backoff).await;
        if state.is_stopped() {
            return false;
        }
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::{Reset, Start};

    #[test]
    fn a_reset_is_reported_once_whichever_comes_first() {
        let mut before = Start { first: Some(7), ..Start::default() };
        assert_eq!(before.check(), None, "the committed offset is not known yet");
        before.committed = Some(Some(5));
        assert_eq!(before.check(), Some(Reset::Moved { committed: 5, resumed_at: 7 }));
        assert_eq!(before.check(), None, "reported once");

        let mut after = Start { committed: Some(Some(5)), ..Start::default() };
        assert_eq!(after.check(), None, "nothing delivered yet");
        after.first = Some(5);
        assert_eq!(after.check(), None, "resumed where committed: no reset");

        let mut fresh = Start { committed: Some(None), ..Start::default() };
        assert_eq!(fresh.check(), Some(Reset::NoCommittedOffset));
    }
}
