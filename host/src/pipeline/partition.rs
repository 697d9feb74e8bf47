//! One assigned partition, as the polling thread and the partition's
//! workers (`worker`, one per lane) share it: its lanes' queues, its
//! offsets, whether it is stopped or busy, flow control, and where it
//! resumed. Which lane a record goes to is `ordering`'s (see
//! `config/ordering.rs`).
//!
//! A partition's state belongs to one assignment. When the
//! partition is revoked, its state leaves the consumer's map: a worker that
//! finishes late updates a state nobody commits from any more, so a late
//! completion never commits for a partition this process no longer owns.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::config::Ordering as RecordOrder;
use crate::offsets::OffsetTracker;
use crate::validate::Record;

pub(crate) struct PartitionState {
    pub topic: String,
    pub partition: i32,
    tracker: Mutex<OffsetTracker>,
    /// Set on revocation or shutdown: take no new record.
    stopped: AtomicBool,
    /// The same, for a worker waiting (for a permit, a backoff) to wake on.
    stop_signal: watch::Sender<bool>,
    /// Per lane: a record is being executed right now.
    busy: Vec<AtomicBool>,
    /// Records queued and not yet taken by the worker.
    pub queued: AtomicUsize,
    /// Their payloads' and keys' bytes: flow control bounds both.
    pub queued_bytes: AtomicUsize,
    /// The consumer paused fetching for this partition (its queue is too
    /// long, or an operator paused it).
    pub paused: AtomicBool,
    /// Its queue is too long (flow control's own state, with hysteresis).
    pub full: AtomicBool,
    /// librdkafka was told `paused` at least once in this assignment.
    pub told: AtomicBool,
    /// An operator paused it ([`super::pauses`]): its workers take no record.
    held: watch::Sender<bool>,
    /// Where the partition resumed, to detect offset resets.
    pub start: Mutex<Start>,
    /// The last offset of any lane's batch a crash interrupted, as read
    /// once for this assignment (`worker::batch::check_crash`).
    pub(super) crash_mark: tokio::sync::OnceCell<Option<i64>>,
    /// The crashed host's marks were cleared (`worker::Worker::unmark`).
    pub(super) crash_cleared: AtomicBool,
    /// The handler's parked keys were read for this assignment, before
    /// any lane of it ran a record (`worker::parking`).
    pub(super) parked_read: tokio::sync::OnceCell<()>,
    /// One queue per lane.
    lanes: Vec<mpsc::UnboundedSender<Record>>,
    ordering: RecordOrder,
    /// Under `ordering = "none"`: the lane the next record goes to.
    turn: AtomicUsize,
}

impl PartitionState {
    /// A new state with one lane, and the receiver its worker drains.
    #[cfg(test)]
    pub(crate) fn new(topic: &str, partition: i32) -> (Arc<Self>, mpsc::UnboundedReceiver<Record>) {
        let (state, mut receivers) = Self::with_lanes(topic, partition, RecordOrder::Partition, 1);
        (state, receivers.remove(0))
    }

    /// A new state with `lanes` lanes (at least one) filled by `ordering`,
    /// and the receivers their workers drain, one per lane.
    pub(crate) fn with_lanes(
        topic: &str,
        partition: i32,
        ordering: RecordOrder,
        lanes: u32,
    ) -> (Arc<Self>, Vec<mpsc::UnboundedReceiver<Record>>) {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..lanes.max(1)).map(|_| mpsc::unbounded_channel()).unzip();
        let state = Self {
            topic: topic.to_owned(),
            partition,
            tracker: Mutex::new(OffsetTracker::default()),
            stopped: AtomicBool::new(false),
            stop_signal: watch::channel(false).0,
            busy: senders.iter().map(|_| AtomicBool::new(false)).collect(),
            queued: AtomicUsize::new(0),
            queued_bytes: AtomicUsize::new(0),
            // librdkafka keeps a partition's pause flag across assignments:
            // a partition paused when it was revoked would come back paused
            // for good. Assume it may be, so that flow control resumes it.
            paused: AtomicBool::new(true),
            full: AtomicBool::new(false),
            told: AtomicBool::new(false),
            held: watch::channel(false).0,
            start: Mutex::new(Start::default()),
            crash_mark: tokio::sync::OnceCell::new(),
            crash_cleared: AtomicBool::new(false),
            parked_read: tokio::sync::OnceCell::new(),
            lanes: senders,
            ordering,
            turn: AtomicUsize::new(0),
        };
        (Arc::new(state), receivers)
    }

    /// The lane `record` goes to: by its key's hash under `"key"` (records
    /// without a key share one lane), in turn under `"none"`.
    fn lane_of(&self, record: &Record) -> usize {
        let n = self.lanes.len();
        match self.ordering {
            _ if n == 1 => 0,
            RecordOrder::Partition => 0,
            RecordOrder::Key => crate::config::key_lane(record.key.as_deref(), n),
            RecordOrder::None => self.turn.fetch_add(1, Ordering::Relaxed) % n,
        }
    }

    pub(crate) fn start(&self) -> MutexGuard<'_, Start> {
        self.start.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An operator rewound the partition to `to`: it resumes there, and
    /// that is its position to commit until a record moves it.
    pub(crate) fn rewound(&self, to: i64) {
        *self.tracker() = OffsetTracker::starting_at(to);
        self.start().rewound(to);
    }

    pub(crate) fn tracker(&self) -> MutexGuard<'_, OffsetTracker> {
        self.tracker.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `record` for the worker (called by the polling thread only).
    pub(crate) fn push(&self, record: Record) {
        self.tracker().delivered(record.offset);
        let bytes = record.weight();
        self.queued.fetch_add(1, Ordering::SeqCst);
        self.queued_bytes.fetch_add(bytes, Ordering::SeqCst);
        if self.lanes[self.lane_of(&record)].send(record).is_err() {
            // The worker is gone (stopped): the record stays unresolved and
            // uncommitted, so it is redelivered to whoever owns it next.
            self.queued.fetch_sub(1, Ordering::SeqCst);
            self.queued_bytes.fetch_sub(bytes, Ordering::SeqCst);
        }
    }

    /// Accounts for `record` leaving the worker's hands (the queue and the
    /// batch being formed count alike, so flow control bounds both).
    pub(crate) fn taken(&self, record: &Record) {
        self.queued.fetch_sub(1, Ordering::SeqCst);
        self.queued_bytes.fetch_sub(record.weight(), Ordering::SeqCst);
    }

    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.stop_signal.send_replace(true);
    }

    /// `fut`'s output, or `None` if the partition is stopped first.
    pub(super) async fn until_stopped<F: std::future::Future>(&self, fut: F) -> Option<F::Output> {
        let mut stopped = self.stop_signal.subscribe();
        tokio::select! {
            out = fut => Some(out),
            _ = stopped.wait_for(|s| *s) => None,
        }
    }

    /// The worker's next record; `None` once the partition is stopped, even
    /// with an empty queue: the state holds the queue's sender, so `recv`
    /// alone would wait for ever and leak the worker at every revocation.
    pub(super) async fn next(&self, queue: &mut mpsc::UnboundedReceiver<Record>) -> Option<Record> {
        self.until_stopped(queue.recv()).await.flatten()
    }

    /// Sleeps `duration`; `false` if the partition was stopped meanwhile.
    pub(super) async fn sleep(&self, duration: Duration) -> bool {
        self.until_stopped(tokio::time::sleep(duration)).await.is_some() && !self.is_stopped()
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// A lane's worker is gone (it panicked): the partition stops, so
    /// nothing more is taken or committed past its records, and that lane
    /// has nothing in flight any more.
    pub(crate) fn worker_died(&self, lane: usize) {
        self.stop();
        self.busy[lane].store(false, Ordering::SeqCst);
    }

    /// Holds the partition (an operator's pause) or releases it.
    pub(crate) fn hold(&self, held: bool) {
        self.held.send_if_modified(|h| std::mem::replace(h, held) != held);
    }

    pub(crate) fn is_held(&self) -> bool {
        *self.held.borrow()
    }

    /// Waits while the partition is held; `false` if it is stopped first.
    pub(super) async fn until_released(&self) -> bool {
        if !self.is_held() {
            return !self.is_stopped();
        }
        let mut held = self.held.subscribe();
        self.until_stopped(held.wait_for(|h| !*h)).await.is_some_and(|r| r.is_ok()) && !self.is_stopped()
    }

    /// A lane is executing a record.
    pub(crate) fn is_busy(&self) -> bool {
        self.busy.iter().any(|b| b.load(Ordering::SeqCst))
    }

    /// `lane`'s worker starts on a record: busy, unless the partition is
    /// stopped (`false`). Busy is set before the stopped check: whoever
    /// stops the partition then waits for it to clear, so it never misses
    /// this record.
    pub(super) fn set_busy(&self, lane: usize) -> bool {
        self.busy[lane].store(true, Ordering::SeqCst);
        if self.is_stopped() {
            self.busy[lane].store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// `lane`'s worker is done with the record it was on.
    pub(super) fn set_idle(&self, lane: usize) {
        self.busy[lane].store(false, Ordering::SeqCst);
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
    /// The partition was rewound to `to` by an operator: it resumes there,
    /// and a first record elsewhere (the offset deleted before the seek,
    /// librdkafka resetting it) is a reset to report.
    fn rewound(&mut self, to: i64) {
        *self = Self { committed: Some(Some(to)), first: None, checked: false };
    }

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

#[cfg(test)]
mod tests {
    use super::{PartitionState, Reset, Start};

    #[tokio::test]
    async fn a_stopped_partition_releases_its_worker_even_with_an_empty_queue() {
        let (state, mut queue) = PartitionState::new("t", 0);
        let waiting = {
            let state = state.clone();
            tokio::spawn(async move { state.next(&mut queue).await.is_none() })
        };
        tokio::task::yield_now().await;
        state.stop();
        let ended = tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await;
        assert!(matches!(ended, Ok(Ok(true))), "the worker still waits on an empty queue after stop");
    }

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
