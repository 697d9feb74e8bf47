//! A partition's records in batches, the fast path (`[handler.batch]`): up
//! to `max_events` records in one transaction (see `executor::batch` for
//! the scheme and why it is correct). Whatever a batch cannot settle goes
//! through the failure path (`process`), one record at a time, before any
//! record after it runs.

use std::collections::HashSet;
use std::time::Duration;

use super::Worker;
use crate::executor::{BatchFailure, Outcome};
use crate::pipeline::Shared;
use crate::pipeline::attempts;
use crate::stats::Stats;

impl Worker {
    /// Reads whether a crash interrupted a batch of this partition; if so,
    /// its records run alone, counted, until past it. A failure to read
    /// leaves the partition running records alone and tries again with the
    /// next record.
    pub(super) async fn check_crash(&mut self) {
        let (shared, state) = (&self.shared, &self.state);
        match attempts::crashed_batch(&shared.idem_pool, &shared.name, &state.topic, state.partition).await {
            Ok(last) => {
                if let Some(last) = last {
                    tracing::info!(
                        handler = %shared.name, topic = %state.topic, partition = state.partition, last,
                        "a batch of this partition was interrupted by a crash: its records run alone, counted"
                    );
                    self.alone_through = self.alone_through.max(last);
                }
                self.crash_checked = true;
            }
            Err(e) => refused(shared, "read", e),
        }
    }

    /// Tops the pending records up to `max_events` with what the queue
    /// holds, waiting up to `max_wait_ms` for more while the batch is not
    /// full.
    pub(super) async fn fill(&mut self) {
        let max = self.shared.config.batch.max_events;
        while self.pending.len() < max {
            match self.queue.try_recv() {
                Ok(record) => self.pending.push_back(record),
                Err(_) => break,
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.shared.config.batch.max_wait_ms);
        while self.pending.len() < max {
            match self.state.until_stopped(tokio::time::timeout_at(deadline, self.queue.recv())).await {
                Some(Ok(Some(record))) => self.pending.push_back(record),
                _ => break,
            }
        }
    }

    /// Resolves a prefix of the pending records (at least the first, unless
    /// the partition is stopped): the longest run of valid records with
    /// distinct event ids in one transaction; if one of them fails, the ones
    /// before it in one transaction again, then the failing one alone.
    pub(super) async fn run_batch(&mut self) {
        let shared = self.shared.clone();
        let state = self.state.clone();
        let mut ids = HashSet::new();
        let mut events = Vec::new();
        for record in self.pending.iter() {
            // An invalid record, or an id already in the batch (redelivered
            // within it), ends the batch; the next one starts with it.
            match shared.validator.validate(record) {
                Ok(event) if ids.insert(event.id) => events.push(event),
                _ => break,
            }
        }
        if events.is_empty() {
            return self.resolve_alone(None).await;
        }
        let range = (events[0].offset, events[events.len() - 1].offset);
        let (name, topic, partition) = (&shared.name, &state.topic, state.partition);
        if let Err(e) = attempts::batch_started(&shared.idem_pool, name, topic, partition, range).await {
            // Without the mark a crash in this batch could not be traced: the
            // first record goes alone (the failure path rides out an outage).
            refused(&shared, "write", e);
            return self.resolve_alone(None).await;
        }
        let Some(Ok(permit)) = state.until_stopped(shared.permits.acquire()).await else {
            attempts::batch_ended(&shared.idem_pool, name, topic, partition).await;
            return;
        };
        for event in &events {
            shared.abort_point(&event.payload);
        }
        // The events `..end` run; the one at `end` failed (its own error, if any).
        let (mut end, mut failed) = (events.len(), None);
        while end > 0 && !state.is_stopped() {
            let executor = shared.slot.executor();
            let version = executor.handler().version();
            let between = |done: usize| {
                shared.mid_batch_point(&events[done - 1].payload);
                state.is_stopped()
            };
            let failure = match executor.execute_batch(&events[..end], between).await {
                Ok(outcomes) => {
                    self.committed(version, outcomes);
                    break;
                }
                Err(failure) => failure,
            };
            let (at, own) = match failure {
                BatchFailure::Stopped => break,
                // Another version was activated: the same batch, on it.
                BatchFailure::StaleModule if crate::pipeline::switch_module(&shared, version).await => continue,
                BatchFailure::StaleModule => (0, None),
                BatchFailure::Whole(error) => {
                    shared.slot.count(version, Err(()));
                    // Nothing names an event (BEGIN, the claim, COMMIT): the
                    // batch's records run alone, so that a deterministic
                    // failure at COMMIT is found in one pass, not by
                    // re-running the batch once per record.
                    self.alone_through = self.alone_through.max(events[end - 1].offset);
                    (0, error)
                }
                BatchFailure::At { index, own } => {
                    shared.slot.count(version, Err(()));
                    (index, own)
                }
            };
            tracing::debug!(
                handler = %name, %topic, partition, size = end, at, own = ?own,
                "batch rolled back; the events before the failing one run again"
            );
            Stats::add(&shared.stats.batch_splits);
            (end, failed) = (at, Some(own));
        }
        drop(permit);
        attempts::batch_ended(&shared.idem_pool, name, topic, partition).await;
        if state.is_stopped() {
            return;
        }
        if let Some(own) = failed {
            self.resolve_alone(own).await;
        }
    }

    /// A batch of `outcomes` committed on `version`: its records are resolved.
    fn committed(&mut self, version: Option<i32>, outcomes: Vec<Outcome>) {
        let shared = &self.shared;
        Stats::add(&shared.stats.transactions);
        shared.fault_point();
        for outcome in outcomes {
            shared.slot.count(version, Ok(outcome));
            match outcome {
                Outcome::Processed => Stats::add(&shared.stats.processed),
                Outcome::Duplicate => Stats::add(&shared.stats.duplicates),
                Outcome::Skipped => Stats::add(&shared.stats.skipped),
            }
            if let Some(record) = self.pending.pop_front() {
                self.state.taken(&record);
                self.completed(&record);
            }
        }
    }
}

/// A failure on `idem.batch_in_flight`: fatal when idem's role may not use
/// it (the handler stops, naming the table), else logged.
fn refused(shared: &Shared, what: &str, e: sqlx::Error) {
    let error = crate::ExecError::from_host_sql(e);
    if error.class() == crate::error::ErrorClass::Fatal {
        tracing::error!(handler = %shared.name, "fatal: cannot {what} idem.batch_in_flight: {error}");
        shared.fatal(format!("handler {}: cannot {what} idem.batch_in_flight: {error}", shared.name));
    } else {
        tracing::warn!(handler = %shared.name, "failed to {what} idem.batch_in_flight: {error}");
    }
}
