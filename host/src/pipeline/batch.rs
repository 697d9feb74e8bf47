//! A partition's records in batches, the fast path (`[handler.batch]`): up
//! to `max_events` records in one transaction (see `executor::batch` for
//! the scheme and why it is correct). Whatever a batch cannot settle goes
//! through the failure path of `partition`, one record at a time, before
//! any record after it runs.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;

use super::Shared;
use super::partition::{PartitionState, completed, one};
use crate::executor::Outcome;
use crate::stats::Stats;
use crate::validate::Record;

/// Reads whether a crash interrupted a batch of this partition; if so, its
/// records run alone, counted, until past it. A failure to read leaves the
/// partition running records alone and tries again with the next record.
pub(super) async fn check_crash(shared: &Shared, state: &PartitionState) {
    match super::attempts::crashed_batch(&shared.idem_pool, &shared.name, &state.topic, state.partition).await {
        Ok(last) => {
            if let Some(last) = last {
                tracing::info!(
                    handler = %shared.name, topic = %state.topic, partition = state.partition, last,
                    "a batch of this partition was interrupted by a crash: its records run alone, counted"
                );
                state.alone_through.fetch_max(last, Ordering::SeqCst);
            }
            state.crash_checked.store(true, Ordering::SeqCst);
        }
        Err(e) => refused(shared, "read", e),
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

/// Tops `pending` up to `max_events` with what the queue holds, waiting up
/// to `max_wait_ms` for more while the batch is not full.
pub(super) async fn fill(
    shared: &Shared,
    state: &PartitionState,
    queue: &mut mpsc::UnboundedReceiver<Record>,
    pending: &mut VecDeque<Record>,
) {
    let max = shared.config.batch.max_events;
    while pending.len() < max {
        match queue.try_recv() {
            Ok(record) => pending.push_back(record),
            Err(_) => break,
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_millis(shared.config.batch.max_wait_ms);
    while pending.len() < max {
        match state.until_stopped(tokio::time::timeout_at(deadline, queue.recv())).await {
            Some(Ok(Some(record))) => pending.push_back(record),
            _ => break,
        }
    }
}

/// Resolves a prefix of `pending` (at least its first record, unless the
/// partition is stopped): the longest run of valid records with distinct
/// event ids in one transaction; if one of them fails, the ones before it
/// in one transaction again, then the failing one alone.
pub(super) async fn run(shared: &Shared, state: &PartitionState, pending: &mut VecDeque<Record>) {
    let mut ids = HashSet::new();
    let mut events = Vec::new();
    for record in pending.iter() {
        // An invalid record, or an id already in the batch (redelivered
        // within it), ends the batch; the next one starts with it.
        match shared.validator.validate(record) {
            Ok(event) if ids.insert(event.id) => events.push(event),
            _ => break,
        }
    }
    if events.is_empty() {
        one(shared, state, pending, None).await;
        return;
    }
    let range = (events[0].offset, events[events.len() - 1].offset);
    let marked =
        super::attempts::batch_started(&shared.idem_pool, &shared.name, &state.topic, state.partition, range).await;
    if let Err(e) = marked {
        // Without the mark a crash in this batch could not be traced: the
        // first record goes alone (the failure path rides out an outage).
        refused(shared, "write", e);
        one(shared, state, pending, None).await;
        return;
    }
    let Some(Ok(permit)) = state.until_stopped(shared.permits.acquire()).await else {
        super::attempts::batch_ended(&shared.idem_pool, &shared.name, &state.topic, state.partition).await;
        return;
    };
    for event in &events {
        shared.abort_point(&event.payload);
    }
    let (mut end, mut failed) = (events.len(), None);
    while end > 0 {
        if state.is_stopped() {
            break;
        }
        let executor = shared.slot.executor();
        let version = executor.handler().version();
        let between = |done: usize| {
            shared.mid_batch_point(&events[done - 1].payload);
            state.is_stopped()
        };
        match executor.execute_batch(&events[..end], between).await {
            Ok(outcomes) => {
                Stats::add(&shared.stats.transactions);
                shared.fault_point();
                for outcome in outcomes {
                    shared.slot.count(version, Ok(outcome));
                    match outcome {
                        Outcome::Processed => Stats::add(&shared.stats.processed),
                        Outcome::Duplicate => Stats::add(&shared.stats.duplicates),
                        Outcome::Skipped => Stats::add(&shared.stats.skipped),
                    }
                    if let Some(record) = pending.pop_front() {
                        state.taken(&record);
                        completed(shared, state, &record);
                    }
                }
                break;
            }
            Err(failure) if failure.stopped => break,
            // Another version was activated: the same batch, on it.
            Err(failure) if failure.stale && super::switch_module(shared, version).await => continue,
            Err(failure) => {
                if !failure.stale {
                    shared.slot.count(version, Err(()));
                }
                if failure.whole {
                    // Nothing names an event (BEGIN, the claim, COMMIT): the
                    // batch's records run alone, so that a deterministic
                    // failure at COMMIT is found in one pass, not by
                    // re-running the batch once per record.
                    let last = events[end - 1].offset;
                    state.alone_through.fetch_max(last, Ordering::SeqCst);
                }
                tracing::debug!(
                    handler = %shared.name, topic = %state.topic, partition = state.partition,
                    size = end, at = failure.index, own = ?failure.own,
                    "batch rolled back; the events before the failing one run again"
                );
                Stats::add(&shared.stats.batch_splits);
                end = failure.index;
                failed = Some(failure.own);
            }
        }
    }
    drop(permit);
    super::attempts::batch_ended(&shared.idem_pool, &shared.name, &state.topic, state.partition).await;
    if state.is_stopped() {
        return;
    }
    if let Some(own) = failed {
        one(shared, state, pending, own).await;
    }
}
