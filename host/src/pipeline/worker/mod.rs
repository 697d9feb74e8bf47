//! The task that works one lane of an assigned partition (the partition
//! itself under `ordering = "partition"`): it takes the lane's records in
//! offset order and resolves each (processed, a duplicate,
//! skipped, dead-lettered), in batches once the partition has processed an
//! event in this assignment (`batch`), one at a time before that and for
//! whatever a batch cannot settle (`process`). The decision after a failed
//! execution is `decide`'s; a final failure is `final_failure`'s.
//!
//! The worker owns what only it reads: the records it has taken and not
//! resolved, and what it has learnt of this assignment (whether an event
//! was processed, which records must run alone, whether a crashed batch
//! was looked for). What the polling thread shares with it is in
//! `PartitionState`.

mod alone;
mod batch;
mod decide;
mod final_failure;
mod marks;
mod parking;
mod process;
mod route;
mod schemas;
mod shrink;

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::HandlerContext;
use super::partition::PartitionState;
use crate::error::ExecError;
use crate::event::Event;
use crate::validate::{Invalid, Record};

/// A record taken from the lane's queue, validated at most once: by the
/// batch path when it forms a batch (a batch formed again after a split
/// reads the same result), else by the failure path, under the record's
/// `idem.event` span.
struct Taken {
    record: Record,
    /// Shared with the batches it runs in, never copied (`Arc`).
    event: Option<Result<Arc<Event>, Invalid>>,
}

impl Taken {
    fn new(record: Record) -> Self {
        Self { record, event: None }
    }
}

/// `record` validated, in its own span.
fn validated(shared: &HandlerContext, record: &Record) -> Result<Arc<Event>, Invalid> {
    let _span = tracing::trace_span!(target: crate::traces::TARGET, "idem.validate").entered();
    shared.validator.validate(record).map(Arc::new)
}

/// One partition's worker, for one assignment.
pub(crate) struct Worker {
    shared: Arc<HandlerContext>,
    state: Arc<PartitionState>,
    /// Which of the partition's lanes this worker drains (0 when it has one).
    lane: usize,
    queue: mpsc::UnboundedReceiver<Record>,
    /// Records taken from the queue and not yet resolved: a batch being
    /// formed, or what a batch left.
    pending: VecDeque<Taken>,
    /// An event of this assignment past `alone_through` was processed:
    /// executions are no longer counted outside the process (see
    /// `attempts`), and batches may run.
    proven: bool,
    /// Records up to this offset run alone: they were in a batch that a
    /// crash interrupted (counted too, until past it), or in one that
    /// failed as a whole (at BEGIN, at the claim, at COMMIT) where no single
    /// event was to blame.
    alone_through: i64,
    /// What the lane knows of its crash marks (`marks`).
    marks: marks::Marks,
    /// Records up to this offset were offered to the handler's shadow
    /// already (a batch's failing record is not offered again alone).
    shadowed_through: i64,
}

impl Worker {
    pub(crate) fn new(
        shared: Arc<HandlerContext>,
        state: Arc<PartitionState>,
        lane: usize,
        queue: mpsc::UnboundedReceiver<Record>,
    ) -> Self {
        Self {
            shared,
            state,
            lane,
            queue,
            pending: VecDeque::new(),
            proven: false,
            alone_through: -1,
            marks: marks::Marks::default(),
            shadowed_through: -1,
        }
    }

    /// Drains the partition's queue until it is stopped or the queue closes.
    pub(crate) async fn work(mut self) {
        self.drain().await;
        self.unmark().await;
    }

    async fn drain(&mut self) {
        loop {
            if self.pending.is_empty() {
                let record = match self.queue.try_recv() {
                    Ok(record) => record,
                    // Nothing to do for now: the lane's last batch ended.
                    Err(_) => {
                        self.unmark().await;
                        let Some(record) = self.state.next(&mut self.queue).await else { return };
                        record
                    }
                };
                self.pending.push_back(Taken::new(record));
            }
            // An operator's pause: the record waits, fetched, until the
            // partition is resumed or revoked; nothing runs meanwhile. The
            // worker reads the latest pauses itself too: the polling thread
            // applies them at its next pass, which a slow broker call delays.
            let (name, topic, partition) = (&self.shared.name, &self.state.topic, self.state.partition);
            self.state.hold(self.shared.pauses.holds(name, topic, partition));
            if !self.state.until_released().await {
                return;
            }
            // A parked key's record waits behind its key's parked events.
            if self.shared.quarantine.on() && !self.parked_known().await {
                return;
            }
            let batched = self.shared.config.batch.max_events > 1;
            if batched && !self.marks.checked {
                self.check_crash().await;
            }
            let Some(front) = self.pending.front().map(|t| t.record.offset) else { continue };
            let path = route::route(&route::Known {
                batched,
                proven: self.proven,
                crash_checked: self.marks.checked,
                front,
                alone_through: self.alone_through,
                behind_parked: self.behind_parked(),
            });
            if path == route::Route::Batch {
                self.fill().await;
                // Paused while the batch filled: back to the wait above.
                if self.state.is_held() {
                    continue;
                }
            }
            // A registry format's records are decoded once their writer
            // schemas are fetched: a registry that does not answer holds
            // the lane here, with nothing spent.
            if self.shared.validator.reads_registry() && !self.decode_pending().await {
                return;
            }
            // Busy before the stopped check: whoever stops the partition
            // then waits for it to clear, so it never misses this record.
            // Every wait inside (a permit, a backoff) ends when it is stopped.
            if !self.state.set_busy(self.lane) {
                return;
            }
            match path {
                route::Route::ParkBehind => self.park_behind().await,
                route::Route::Batch => self.run_batch().await,
                route::Route::Alone => self.resolve_alone(None).await,
            }
            self.state.set_idle(self.lane);
        }
    }

    /// Takes the first pending record and resolves it alone, through the
    /// whole failure path; `from_batch` is the failure of the execution it
    /// already had in a batch.
    async fn resolve_alone(&mut self, from_batch: Option<(Option<i32>, ExecError)>) {
        let Some(Taken { record, event }) = self.pending.pop_front() else { return };
        self.state.taken(&record);
        let unproven = !self.proven;
        let span = tracing::trace_span!(
            target: crate::traces::TARGET, "idem.event", handler = %self.shared.name,
            topic = %record.topic, partition = record.partition, offset = record.offset
        );
        crate::traces::continue_from(&span, &record.headers);
        let resolved = tracing::Instrument::instrument(self.process(&record, event, from_batch), span).await;
        // This process is alive: whatever became of the record (resolved,
        // or abandoned at a revocation), its execution did not kill it, so
        // the count outside the process goes. Only a crash leaves it.
        if unproven {
            super::attempts::forget(&self.shared.idem_pool, &self.shared.name, &record, resolved).await;
        }
        if resolved {
            self.completed(&record);
        }
    }

    /// Offers `events`, about to run, to the handler's shadow version if it
    /// has one (`crate::shadow`): those this lane has not offered before.
    async fn shadow(&mut self, events: &[Arc<Event>]) {
        let Some(shadow) = self.shared.slot.shadow() else { return };
        let fresh: Vec<Event> =
            events.iter().filter(|e| e.offset > self.shadowed_through).map(|e| Event::clone(e)).collect();
        let Some(last) = fresh.last() else { return };
        self.shadowed_through = last.offset;
        let shared = &self.shared;
        let active = shared.slot.executor();
        let offered = shadow.offer(&active, &fresh, &shared.permits, &shared.idem_pool);
        // A partition stopped (revoked, the host stopping) waits for no shadow.
        self.state.until_stopped(offered).await;
    }

    /// Removes this lane's mark, if it has one, and the crashed host's
    /// once every record they cover is resolved.
    async fn unmark(&mut self) {
        let (shared, state) = (self.shared.clone(), self.state.clone());
        self.marks.end(&batch::ledger(&shared, &state, self.lane)).await;
    }

    /// `record` is resolved: its offset may be committed.
    fn completed(&self, record: &Record) {
        self.state.tracker().completed(record.offset);
        self.shared.stats.resolved(record.timestamp);
    }
}
