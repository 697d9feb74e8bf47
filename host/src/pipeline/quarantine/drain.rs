//! Running parked events: on every host, one task per quarantining handler
//! leases a due key at a time and runs its events in order, each through
//! the handler's executor under one of its `concurrency` permits, as the
//! partition worker would. What each failure does to the key is
//! [`after`]'s; the table's side of it is `store`'s.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::LEASE_SECONDS;
use super::store::{self, Lease, ParkedEvent};
use crate::error::{ErrorClass, ExecError};
use crate::executor::Outcome;
use crate::pipeline::HandlerContext;
use crate::pipeline::dlq::Failure;
use crate::stats::Stats;

/// How often the task looks for a due key when none was.
const LOOK_EVERY: Duration = Duration::from_millis(250);
/// How often it counts the quarantine for the metrics.
const COUNT_EVERY: Duration = Duration::from_secs(5);
/// How long a key waits after an outage (the database, the DLQ).
const OUTAGE_WAIT_MS: u64 = 5_000;

/// Starts the handler's runner of parked events, until `stop`.
pub(crate) fn spawn(shared: Arc<HandlerContext>, mut stop: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut counted = tokio::time::Instant::now() - COUNT_EVERY;
        loop {
            if counted.elapsed() >= COUNT_EVERY {
                counted = tokio::time::Instant::now();
                super::operate::count(&shared).await;
            }
            let leased = store::lease_due(&shared.idem_pool, &shared.name, &shared.quarantine.host, LEASE_SECONDS).await;
            let idle = match leased {
                Ok(Some(lease)) => {
                    run_key(&shared, &lease, &stop).await;
                    false
                }
                Ok(None) => true,
                Err(e) => {
                    tracing::warn!(handler = %shared.name, "failed to look for parked keys that are due: {e}");
                    true
                }
            };
            if *stop.borrow() {
                return;
            }
            if idle {
                tokio::select! {
                    _ = tokio::time::sleep(LOOK_EVERY) => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
        }
    });
}

/// Runs the leased key's events in order until one fails, none is left
/// (the key is let go), the handler or partition is paused, or `stop`.
async fn run_key(shared: &HandlerContext, lease: &Lease, stop: &watch::Receiver<bool>) {
    let (pool, name) = (&shared.idem_pool, &shared.name);
    loop {
        let paused = shared.pauses.holds(name, &lease.topic, lease.partition);
        if *stop.borrow() || paused {
            // Due again at once: whoever runs it next starts where this left.
            let _ = store::wait(pool, name, &lease.key, Some(0), "", "").await;
            return;
        }
        let first = match store::first(pool, name, lease).await {
            Ok(first) => first,
            Err(e) => return outage(shared, lease, &format!("failed to read a parked event: {e}")).await,
        };
        let Some(event) = first else {
            match store::finish(pool, name, &lease.key).await {
                Ok(true) => {
                    shared.quarantine.forget(&lease.key);
                    tracing::info!(handler = %name, key = %shown(&lease.key), "every parked event of the key ran: it is let go");
                    return;
                }
                Ok(false) => continue,
                Err(e) => return outage(shared, lease, &format!("failed to let the key go: {e}")).await,
            }
        };
        match run_event(shared, lease, &event).await {
            Ran::Next => {}
            Ran::Wait(due_ms, reason, class) => {
                if let Err(e) = store::wait(pool, name, &lease.key, due_ms, &reason, class).await {
                    tracing::warn!(handler = %name, "failed to record a parked key's wait (its lease runs out): {e}");
                }
                return;
            }
        }
    }
}

/// What running one parked event left to do.
enum Ran {
    /// It is resolved and its row gone: the next one.
    Next,
    /// The key waits: this long (`None`: held for an operator), with the
    /// failure's reason and class (empty: unchanged).
    Wait(Option<u64>, String, &'static str),
}

/// Runs `event`, counted first (an execution that kills the host is spent).
async fn run_event(shared: &HandlerContext, lease: &Lease, event: &ParkedEvent) -> Ran {
    let (pool, name, record) = (&shared.idem_pool, &shared.name, &event.record);
    let max = shared.config.retry.max_attempts;
    let attempts = match store::spend(pool, name, &lease.key, event.seq, 1).await {
        Ok(n) => u32::try_from(n).unwrap_or(0),
        Err(e) => return waiting_out(&format!("failed to count a parked event's execution: {e}")),
    };
    if attempts > max {
        let reason = format!("{} executions started and none finished: the event ends the host process", attempts - 1);
        tracing::error!(handler = %name, offset = record.offset, "{reason}");
        return Ran::Wait(None, reason, ErrorClass::Permanent.as_str());
    }
    let valid = match shared.validator.validate(record) {
        Ok(valid) => valid,
        Err(invalid) => {
            let failure = Failure { class: ErrorClass::Invalid, reason: invalid.to_string(), attempts: 0, replays: 0 };
            return dead_letter(shared, lease, event, &failure).await;
        }
    };
    let _ = shared.slot.executor().throttles().pass(crate::throttle::EVENTS, None).await;
    let Ok(permit) = shared.permits.acquire().await else { return waiting_out("the handler is closing") };
    let executor = shared.slot.executor();
    let on = executor.handler().version();
    let result = executor.execute(&valid, attempts).await;
    shared.slot.count(on, result.as_ref().map(|o| *o).map_err(drop));
    drop(permit);
    match result {
        Ok(outcome) => {
            counted(&shared.stats, outcome);
            resolved(shared, lease, event).await
        }
        Err(error) => after(shared, lease, event, on, error, attempts).await,
    }
}

/// The event failed on version `on`, its `attempts`-th execution.
async fn after(shared: &HandlerContext, lease: &Lease, event: &ParkedEvent, on: Option<i32>, error: ExecError, attempts: u32) -> Ran {
    let (pool, name) = (&shared.idem_pool, &shared.name);
    let class = error.class();
    let reason = crate::text::controls_escaped(&error.to_string(), 4_000);
    let offset = event.record.offset;
    let unspend = || store::spend(pool, name, &lease.key, event.seq, -1);
    match class {
        // Never an attempt spent on a version no longer active, nor on an outage.
        _ if matches!(error, ExecError::StaleModule(_)) => {
            let _ = unspend().await;
            crate::pipeline::switch_module(shared, on).await;
            Ran::Wait(Some(0), String::new(), "")
        }
        ErrorClass::Unavailable | ErrorClass::Fatal => {
            let _ = unspend().await;
            if class == ErrorClass::Fatal {
                shared.incident(crate::stats::IncidentKind::LedgerRefused, reason.clone());
            }
            tracing::warn!(handler = %name, offset, "a parked event met an outage; its key waits: {reason}");
            Stats::add(&shared.stats.unavailable);
            Ran::Wait(Some(OUTAGE_WAIT_MS), String::new(), "")
        }
        ErrorClass::Retryable if attempts < shared.config.retry.max_attempts => {
            let wait = shared.config.backoff(attempts);
            tracing::warn!(handler = %name, offset, attempts, "a parked event failed again; its key retries later: {reason}");
            Stats::add(&shared.stats.retries);
            Ran::Wait(Some(wait.as_millis() as u64), reason, class.as_str())
        }
        ErrorClass::Retryable => {
            tracing::error!(handler = %name, offset, attempts, "a parked event's attempts are spent: its key is held for an operator: {reason}");
            shared.stats.failed(class);
            Ran::Wait(None, reason, class.as_str())
        }
        _ => {
            shared.stats.failed(class);
            let failure = Failure { class, reason, attempts, replays: 0 };
            dead_letter(shared, lease, event, &failure).await
        }
    }
}

/// The event leaves the quarantine.
async fn resolved(shared: &HandlerContext, lease: &Lease, event: &ParkedEvent) -> Ran {
    match store::done(&shared.idem_pool, &shared.name, &lease.key, event.seq, LEASE_SECONDS).await {
        Ok(()) => {
            Stats::add(&shared.stats.unparked);
            Ran::Next
        }
        // Run again later: a duplicate then, so it takes effect once.
        Err(e) => waiting_out(&format!("failed to remove a parked event that ran: {e}")),
    }
}

/// Sends `event` to the dead-letter topic and out of the quarantine.
async fn dead_letter(shared: &HandlerContext, lease: &Lease, event: &ParkedEvent, failure: &Failure) -> Ran {
    match super::operate::send_to_dlq(shared, &event.record, failure).await {
        Ok(()) => resolved(shared, lease, event).await,
        Err(why) => waiting_out(&why),
    }
}

fn waiting_out(why: &str) -> Ran {
    tracing::warn!("the quarantine's runner waits: {why}");
    Ran::Wait(Some(OUTAGE_WAIT_MS), String::new(), "")
}

async fn outage(shared: &HandlerContext, lease: &Lease, why: &str) {
    tracing::warn!(handler = %shared.name, "{why}; the key is tried again later");
    let _ = store::wait(&shared.idem_pool, &shared.name, &lease.key, Some(OUTAGE_WAIT_MS), "", "").await;
}

fn counted(stats: &Stats, outcome: Outcome) {
    match outcome {
        Outcome::Processed => {
            Stats::add(&stats.processed);
            Stats::add(&stats.transactions);
        }
        Outcome::Duplicate => Stats::add(&stats.duplicates),
        Outcome::Skipped => Stats::add(&stats.skipped),
    }
}

/// A key as logs show it: its text, controls escaped.
pub(super) fn shown(key: &[u8]) -> String {
    crate::text::controls_escaped(&String::from_utf8_lossy(key), 200)
}
