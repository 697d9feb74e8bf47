//! One assigned partition: its queue, its offsets, and the task that
//! processes its records one at a time in offset order.
//!
//! A partition's state belongs to one assignment. When the
//! partition is revoked, its state leaves the consumer's map: a worker that
//! finishes late updates a state nobody commits from any more, so a late
//! completion never commits for a partition this process no longer owns.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::Shared;
use super::dlq::Failure;
use crate::error::{ErrorClass, ExecError};
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
    /// The same, for a worker waiting (for a permit, a backoff) to wake on.
    stop_signal: watch::Sender<bool>,
    /// A record is being executed right now.
    busy: AtomicBool,
    /// An event of this assignment past `alone_through` was processed:
    /// executions are no longer counted outside the process (see
    /// `attempts`), and batches may run.
    pub(super) proven: AtomicBool,
    /// Records up to this offset run alone: they were in a batch that a
    /// crash interrupted (counted too, until past it), or in one that
    /// failed as a whole (at BEGIN, at the claim, at COMMIT) where no single
    /// event was to blame.
    pub(super) alone_through: AtomicI64,
    /// Whether `idem.batch_in_flight` was read for this assignment.
    pub(super) crash_checked: AtomicBool,
    /// Records queued and not yet taken by the worker.
    pub queued: AtomicUsize,
    /// Their payloads' and keys' bytes: flow control bounds both.
    pub queued_bytes: AtomicUsize,
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
            stop_signal: watch::channel(false).0,
            busy: AtomicBool::new(false),
            proven: AtomicBool::new(false),
            alone_through: AtomicI64::new(-1),
            crash_checked: AtomicBool::new(false),
            queued: AtomicUsize::new(0),
            queued_bytes: AtomicUsize::new(0),
            // librdkafka keeps a partition's pause flag across assignments:
            // a partition paused when it was revoked would come back paused
            // for good. Assume it may be, so that flow control resumes it.
            paused: AtomicBool::new(true),
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
        let bytes = record.weight();
        self.queued.fetch_add(1, Ordering::SeqCst);
        self.queued_bytes.fetch_add(bytes, Ordering::SeqCst);
        if self.sender.send(record).is_err() {
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

    /// The worker is gone (it panicked): nothing of this partition is in
    /// flight any more, and nothing more is taken or committed past it.
    pub(crate) fn worker_died(&self) {
        self.stop();
        self.busy.store(false, Ordering::SeqCst);
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

/// Drains the partition's queue until it is stopped or the queue closes:
/// in batches once the partition has processed an event in this
/// assignment (see `batch`), one record at a time before that.
pub(crate) async fn work(shared: Arc<Shared>, state: Arc<PartitionState>, mut queue: mpsc::UnboundedReceiver<Record>) {
    let mut pending = VecDeque::new();
    loop {
        if pending.is_empty() {
            let Some(record) = state.next(&mut queue).await else { return };
            pending.push_back(record);
        }
        if shared.config.batch.max_events > 1 && !state.crash_checked.load(Ordering::SeqCst) {
            super::batch::check_crash(&shared, &state).await;
        }
        let alone = pending.front().is_some_and(|r| r.offset <= state.alone_through.load(Ordering::SeqCst));
        let batching = shared.config.batch.max_events > 1
            && state.proven.load(Ordering::SeqCst)
            && state.crash_checked.load(Ordering::SeqCst)
            && !alone;
        if batching {
            super::batch::fill(&shared, &state, &mut queue, &mut pending).await;
        }
        // `busy` before the `stopped` check: whoever stops the partition
        // then waits for `busy` to clear, so it never misses this record.
        // Every wait inside (a permit, a backoff) ends when it is stopped.
        state.busy.store(true, Ordering::SeqCst);
        if state.is_stopped() {
            state.busy.store(false, Ordering::SeqCst);
            return;
        }
        if batching {
            super::batch::run(&shared, &state, &mut pending).await;
        } else {
            one(&shared, &state, &mut pending, None).await;
        }
        state.busy.store(false, Ordering::SeqCst);
    }
}

/// Takes the first of `pending` and resolves it alone, through the whole
/// failure path; `first` is the failure of an execution it already had (in
/// a batch).
pub(super) async fn one(
    shared: &Shared,
    state: &PartitionState,
    pending: &mut VecDeque<Record>,
    first: Option<ExecError>,
) {
    let Some(record) = pending.pop_front() else { return };
    state.taken(&record);
    let unproven = !state.proven.load(Ordering::SeqCst);
    let span = tracing::trace_span!(
        target: crate::telemetry::traces::TARGET, "idem.event", handler = %shared.name, topic = %record.topic,
        partition = record.partition, offset = record.offset
    );
    crate::telemetry::traces::continue_from(&span, &record.headers);
    let resolved = tracing::Instrument::instrument(process(shared, state, &record, first), span).await;
    // This process is alive: whatever became of the record (resolved,
    // or abandoned at a revocation), its execution did not kill it, so
    // the count outside the process goes. Only a crash leaves it.
    if unproven {
        super::attempts::forget(&shared.idem_pool, &shared.name, &record, resolved).await;
    }
    if resolved {
        completed(shared, state, &record);
    }
}

/// `record` is resolved: its offset may be committed.
pub(super) fn completed(shared: &Shared, state: &PartitionState, record: &Record) {
    state.tracker().completed(record.offset);
    shared.stats.resolved(record.timestamp);
}

/// Failures of the infrastructure are retried at least this often, however
/// long they last, so that processing resumes soon after it comes back.
/// The longest error text logged or dead-lettered.
const MAX_ERROR_CHARS: usize = 4_000;

pub(super) const MAX_OUTAGE_BACKOFF: Duration = Duration::from_secs(5);

/// Consecutive infrastructure failures of one event after which the host
/// asks the database whether it is really down.
const SUSPECT_AFTER: u32 = 3;

async fn database_answers(shared: &Shared) -> bool {
    let executor = shared.slot.executor();
    let probe = sqlx::query("SELECT 1").execute(executor.pool());
    matches!(tokio::time::timeout(Duration::from_secs(2), probe).await, Ok(Ok(_)))
}

/// Validates and executes one record until it is resolved: processed, a
/// duplicate, or dead-lettered. `true`: its offset may be committed;
/// `false`: abandoned (stopped, blocked or fatal), to be redelivered.
///
/// The handler's `concurrency` permit is held only while an execution
/// runs, never during a backoff: a partition that waits does not hold up
/// the handler's other partitions.
async fn process(shared: &Shared, state: &PartitionState, record: &Record, mut first: Option<ExecError>) -> bool {
    let stats = &shared.stats;
    let name = &shared.name;
    let (topic, partition, offset) = (&record.topic, record.partition, record.offset);
    let validated = {
        let _span = tracing::trace_span!(target: crate::telemetry::traces::TARGET, "idem.validate").entered();
        shared.validator.validate(record)
    };
    let event = match validated {
        Ok(event) => event,
        Err(invalid) => {
            tracing::warn!(handler = %name, %topic, partition, offset, reason = %invalid, "invalid record");
            Stats::add(&stats.invalid);
            let failure = Failure { class: ErrorClass::Invalid, reason: invalid.to_string(), attempts: 0, replays: 0 };
            return super::final_failure::resolve(shared, state, record, failure).await;
        }
    };
    let event_id = event.id;
    let max_attempts = shared.config.retry.max_attempts;
    let (mut attempt, mut outages) = (1, 0);
    let (mut counted, mut suspect) = (false, false);
    // The module version the last execution ran on.
    let mut ran_on = shared.slot.version();
    loop {
        let result = if let Some(error) = first.take() {
            Err(error)
        } else {
            let Some(Ok(permit)) = state.until_stopped(shared.permits.acquire()).await else { return false };
            if state.is_stopped() {
                return false;
            }
            // Until this partition has processed an event, its executions are
            // counted outside the process, one at a time per handler, so that a
            // crash is blamed on the one event that was running.
            let unproven = !state.proven.load(Ordering::SeqCst);
            let serial = match unproven {
                true => match state.until_stopped(shared.unproven.lock()).await {
                    Some(guard) => Some(guard),
                    None => return false,
                },
                false => None,
            };
            if unproven && !counted {
                match super::attempts::count(&shared.idem_pool, name, record).await {
                    Ok(started) if started > max_attempts => {
                        drop((serial, permit));
                        let reason = format!(
                            "{} executions started and none finished: the event ends the host process",
                            started - 1
                        );
                        tracing::error!(handler = %name, %topic, partition, offset, %event_id, "{reason}");
                        stats.failed(ErrorClass::Permanent);
                        let failure =
                            Failure { class: ErrorClass::Permanent, reason, attempts: started - 1, replays: 0 };
                        return super::final_failure::resolve(shared, state, record, failure).await;
                    }
                    Ok(_) => counted = true,
                    Err(e) => {
                        drop((serial, permit));
                        let error = crate::ExecError::from_host_sql(e);
                        if error.class() == ErrorClass::Fatal {
                            tracing::error!(handler = %name, "fatal: cannot count executions: {error}");
                            shared.fatal(format!(
                                "handler {name}: cannot count executions in idem.execution_attempt: {error}"
                            ));
                            return false;
                        }
                        outages += 1;
                        tracing::warn!(handler = %name, %topic, partition, offset, "failed to count the execution: {error}");
                        Stats::add(&stats.unavailable);
                        if !state.sleep(shared.config.backoff(outages).min(MAX_OUTAGE_BACKOFF)).await {
                            return false;
                        }
                        continue;
                    }
                }
            }
            shared.abort_point(&event.payload);
            let executor = shared.slot.executor();
            ran_on = executor.handler().version();
            let result = executor.execute(&event, attempt).await;
            shared.slot.count(ran_on, result.as_ref().map(|o| *o).map_err(drop));
            drop((serial, permit));
            result
        };
        let error = match result {
            Ok(Outcome::Processed) => {
                Stats::add(&stats.processed);
                if record.offset >= state.alone_through.load(Ordering::SeqCst) {
                    state.proven.store(true, Ordering::SeqCst);
                }
                Stats::add(&stats.transactions);
                shared.fault_point();
                return true;
            }
            Ok(Outcome::Duplicate) => {
                tracing::debug!(handler = %name, %topic, partition, offset, %event_id, "duplicate skipped");
                Stats::add(&stats.duplicates);
                return true;
            }
            Ok(Outcome::Skipped) => {
                Stats::add(&stats.skipped);
                return true;
            }
            Err(error) => error,
        };
        // Another version was activated: the same event, on it, at once.
        // If this host cannot load it, the event waits as in an outage: it
        // never spends an attempt on a version it may not run.
        let stale = matches!(error, crate::ExecError::StaleModule(_));
        if stale && super::switch_module(shared, ran_on).await {
            continue;
        }
        let mut class = error.class();
        // Shown as data wherever it goes (logs, the DLQ reason): a guest's
        // words or values can reach it through a database error's detail.
        let error = crate::text::controls_escaped(&error.to_string(), MAX_ERROR_CHARS);
        if class == ErrorClass::Unavailable {
            outages += 1;
            // A failure of the infrastructure that persists while the
            // database answers is the event's own (a guest raising XX000 or
            // using NOWAIT, a slow deferred trigger at COMMIT): after the
            // database answered a probe, the next such failure spends an
            // attempt, so the event reaches the DLQ instead of stalling the
            // partition for ever. (Not the failure right before the probe:
            // an outage that just ended must not cost one.)
            if suspect && !stale {
                tracing::warn!(
                    handler = %name, %topic, partition, offset, %event_id, outages,
                    "the failure persists while the database answers: counted as the event's"
                );
                class = ErrorClass::Retryable;
                suspect = false;
            } else if outages % SUSPECT_AFTER == 0 {
                suspect = database_answers(shared).await;
            }
        }
        let backoff = match class {
            ErrorClass::Unavailable => {
                tracing::warn!(
                    handler = %name, %topic, partition, offset, %event_id, attempt, outages,
                    "infrastructure unavailable, retrying without spending an attempt: {error}"
                );
                Stats::add(&stats.unavailable);
                shared.config.backoff(outages).min(MAX_OUTAGE_BACKOFF)
            }
            ErrorClass::Retryable if attempt < max_attempts => {
                tracing::warn!(handler = %name, %topic, partition, offset, %event_id, attempt, "retrying: {error}");
                Stats::add(&stats.retries);
                let backoff = shared.config.backoff(attempt);
                (attempt, outages) = (attempt + 1, 0);
                backoff
            }
            ErrorClass::Fatal => {
                tracing::error!(handler = %name, %topic, partition, offset, %event_id, "fatal: {error}");
                shared.fatal(format!("handler {name}: {error}"));
                return false;
            }
            ErrorClass::Retryable | ErrorClass::Permanent | ErrorClass::Conflicting | ErrorClass::Invalid => {
                tracing::error!(
                    handler = %name, %topic, partition, offset, %event_id, attempt, class = class.as_str(),
                    "event failed (its transaction rolled back): {error}"
                );
                stats.failed(class);
                let failure = Failure { class, reason: error, attempts: attempt, replays: 0 };
                return super::final_failure::resolve(shared, state, record, failure).await;
            }
        };
        if !state.sleep(backoff).await {
            return false;
        }
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
