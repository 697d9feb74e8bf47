//! A partition's records in batches, the fast path (`[handler.batch]`): up
//! to `max_events` records in one transaction (see `executor::batch` for
//! the scheme and why it is correct). Whatever a batch cannot settle goes
//! through the failure path (`process`), one record at a time, before any
//! record after it runs.

use std::sync::Arc;
use std::time::Duration;

use super::{Taken, Worker};
use super::marks::PgLedger;
use super::shrink::BatchLane;
use crate::event::Event;
use crate::executor::Outcome;
use crate::pipeline::HandlerContext;
use crate::pipeline::attempts;
use crate::pipeline::combine::{BatchEnd, Combiner};
use crate::pipeline::partition::PartitionState;
use crate::stats::Stats;

impl Worker {
    /// Reads whether a crash interrupted a batch of this partition; if so,
    /// its records run alone, counted, until past it. A failure to read
    /// leaves the partition running records alone and tries again with the
    /// next record (`marks`).
    pub(super) async fn check_crash(&mut self) {
        let (shared, state) = (self.shared.clone(), self.state.clone());
        match self.marks.check(&ledger(&shared, &state, self.lane)).await {
            Ok(Some(last)) => {
                tracing::info!(
                    handler = %shared.name, topic = %state.topic, partition = state.partition, lane = self.lane,
                    last, "a batch of this partition was interrupted by a crash: its records run alone, counted"
                );
                self.alone_through = self.alone_through.max(last);
            }
            Ok(None) => {}
            Err(e) => refused(&shared, "read", e),
        }
    }

    /// Tops the pending records up to `max_events` with what the queue
    /// holds, waiting up to `max_wait_ms` for more while the batch is not
    /// full.
    pub(super) async fn fill(&mut self) {
        let max = self.batch_cap();
        while self.pending.len() < max {
            match self.queue.try_recv() {
                Ok(record) => self.pending.push_back(Taken::new(record)),
                Err(_) => break,
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.shared.config.batch.max_wait_ms);
        while self.pending.len() < max {
            match self.state.until_stopped(tokio::time::timeout_at(deadline, self.queue.recv())).await {
                Some(Ok(Some(record))) => self.pending.push_back(Taken::new(record)),
                _ => break,
            }
        }
    }

    /// The next batch of the pending records (`route::compose`), all on
    /// one version: under a canary, the first events on the same side of
    /// it as the first (`modules::canary`).
    fn next_batch(&mut self) -> Vec<Arc<Event>> {
        let (cap, shared) = (self.batch_cap(), &self.shared);
        let parked = |record: &crate::validate::Record| shared.quarantine.holds(record.key.as_deref());
        let events =
            super::route::compose(self.pending.iter_mut(), cap, parked, |record| super::validated(shared, record));
        let Some(canary) = shared.slot.canary() else { return events };
        let side = events.first().is_some_and(|e| canary.takes(e));
        events.into_iter().take_while(|e| canary.takes(e) == side).collect()
    }

    /// Resolves a prefix of the pending records (at least the first, unless
    /// the partition is stopped): the longest run of valid records with
    /// distinct event ids in one transaction; if one of them fails, the ones
    /// before it in one transaction again, then the failing one alone.
    pub(super) async fn run_batch(&mut self) {
        let (shared, state) = (self.shared.clone(), self.state.clone());
        let events = self.next_batch();
        let Some(last) = events.last() else {
            return self.resolve_alone(None).await;
        };
        let range = (events[0].offset, last.offset);
        // Replaces the lane's previous mark, if it still has one.
        if let Err(e) = self.marks.start(&ledger(&shared, &state, self.lane), range).await {
            // Without the mark a crash in this batch could not be traced: the
            // first record goes alone (the failure path rides out an outage).
            refused(&shared, "write", e);
            return self.resolve_alone(None).await;
        }
        // The handler's events' rate, for the batch's events at once.
        let n = u32::try_from(events.len()).unwrap_or(u32::MAX);
        let throttles = shared.slot.executor().throttles().clone();
        if state.until_stopped(throttles.pass_many(crate::throttle::EVENTS, n, None)).await.is_none() {
            return self.unmark().await;
        }
        for event in &events {
            shared.abort_point(&event.payload);
        }
        self.shadow(&events).await;
        let failed = super::shrink::until_committed(&mut Lane(self), &events).await;
        if state.is_stopped() {
            // Before the lane is idle, so before the partition's next owner
            // can read the marks.
            return self.unmark().await;
        }
        if let Some((version, own)) = failed {
            self.resolve_alone(own.map(|e| (version, e))).await;
        }
    }

    /// Events one batch holds at most: `max_events`, or fewer under an
    /// events' rate (its burst).
    fn batch_cap(&self) -> usize {
        self.shared.slot.executor().throttles().batch_cap(self.shared.config.batch.max_events)
    }

    /// A batch of `outcomes` committed on `version`: its records are resolved.
    fn committed(&mut self, version: Option<i32>, outcomes: Vec<Outcome>) {
        let shared = &self.shared;
        shared.fault_point();
        for outcome in outcomes {
            shared.slot.count(version, Ok(outcome));
            match outcome {
                Outcome::Processed => Stats::add(&shared.stats.processed),
                Outcome::Duplicate => Stats::add(&shared.stats.duplicates),
                Outcome::Skipped => Stats::add(&shared.stats.skipped),
            }
            if let Some(Taken { record, .. }) = self.pending.pop_front() {
                self.state.taken(&record);
                self.completed(&record);
            }
        }
    }
}

/// A worker's crash marks, in `idem.batch_in_flight`.
pub(super) fn ledger<'a>(shared: &'a HandlerContext, state: &'a PartitionState, lane: usize) -> PgLedger<'a> {
    let at = attempts::BatchPlace { handler: &shared.name, topic: &state.topic, partition: state.partition, lane };
    PgLedger { pool: &shared.marks, state, at }
}

/// A worker's lane, as the fast path's loop sees it (`shrink`).
struct Lane<'a>(&'a mut Worker);

impl BatchLane for Lane<'_> {
    /// Runs `events` once the partition is not paused (a split's re-run
    /// too); a batch of a partition paused while it waited for a
    /// connection is answered `Again` by the combiner and waits here.
    async fn submit(&mut self, events: Vec<Arc<Event>>) -> (Option<i32>, BatchEnd) {
        if !self.0.state.until_released().await {
            return (None, BatchEnd::Failed(crate::executor::BatchFailure::Stopped));
        }
        let canary = events.first().is_some_and(|e| self.0.shared.slot.on_canary(e));
        Combiner::submit(&self.0.shared, events, &self.0.state, canary).await
    }

    async fn switch_module(&mut self, version: Option<i32>) -> bool {
        crate::pipeline::switch_module(&self.0.shared, version).await
    }

    fn stopped(&self) -> bool {
        self.0.state.is_stopped()
    }

    fn committed(&mut self, version: Option<i32>, outcomes: Vec<Outcome>) {
        self.0.committed(version, outcomes);
    }

    fn failed(&mut self, version: Option<i32>, size: usize, at: usize, whole: Option<i64>, counted: bool) {
        let (shared, state) = (&self.0.shared, &self.0.state);
        if counted {
            shared.slot.count_failed(version);
        }
        if let Some(last) = whole {
            self.0.alone_through = self.0.alone_through.max(last);
        }
        tracing::debug!(
            handler = %shared.name, topic = %state.topic, partition = state.partition, size, at,
            "batch rolled back; the events before the failing one run again"
        );
        Stats::add(&shared.stats.batch_splits);
    }
}

/// A failure on `idem.batch_in_flight`: the handler's incident when idem's
/// role may not use it (naming the table), else logged.
fn refused(shared: &HandlerContext, what: &str, e: sqlx::Error) {
    let error = crate::ExecError::from_host_sql(e);
    if error.class() == crate::error::ErrorClass::Fatal {
        shared.incident(
            crate::stats::IncidentKind::LedgerRefused,
            format!("cannot {what} idem.batch_in_flight: {error}"),
        );
    } else {
        tracing::warn!(handler = %shared.name, "failed to {what} idem.batch_in_flight: {error}");
    }
}
