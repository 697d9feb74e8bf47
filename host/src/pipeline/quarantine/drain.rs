//! Running parked events: on every host, one task per quarantining handler
//! leases a due key at a time and runs its events in order, each through
//! the handler's executor under its events' rate and one of its
//! `concurrency` permits, as the partition worker would. What each failure
//! does to the key is [`after`]'s; the table's side, fenced by the lease,
//! is `lease`'s.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::LEASE_SECONDS;
use super::lease::{self, Finished, Lease, ParkedEvent};
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
/// How long a key of a paused partition waits before it is looked at again.
const PAUSED_WAIT_MS: u64 = 1_000;

/// Starts the handler's runner of parked events, until `stop`.
pub(crate) fn spawn(shared: Arc<HandlerContext>, mut stop: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut counted = tokio::time::Instant::now() - COUNT_EVERY;
        loop {
            if counted.elapsed() >= COUNT_EVERY {
                counted = tokio::time::Instant::now();
                super::operate::count(&shared).await;
            }
            let token = lease::token(&shared.quarantine.host);
            let busy = match lease::due(&shared.idem_pool, &shared.name, &token, LEASE_SECONDS).await {
                Ok(Some(lease)) => run_key(&shared, &lease, &stop).await,
                Ok(None) => false,
                Err(e) => {
                    tracing::warn!(handler = %shared.name, "failed to look for parked keys that are due: {e}");
                    false
                }
            };
            if *stop.borrow() {
                return;
            }
            if !busy {
                tokio::select! {
                    _ = tokio::time::sleep(LOOK_EVERY) => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
        }
    });
}

/// Runs the leased key's events in order until one fails, none is left
/// (the key is let go), the handler or partition is paused, the lease is
/// lost, or `stop`: whether it ran anything (else the task rests).
async fn run_key(shared: &HandlerContext, lease: &Lease, stop: &watch::Receiver<bool>) -> bool {
    let (pool, name) = (&shared.idem_pool, &shared.name);
    // Renewed for as long as this runner has the key, waits included.
    let _renewing = lease::keep_renewed(pool, name, lease, LEASE_SECONDS);
    loop {
        if *stop.borrow() || shared.pauses.holds(name, &lease.topic, lease.partition) {
            // Due again soon: whoever runs it next starts where this left.
            let _ = lease::wait(pool, name, lease, Some(PAUSED_WAIT_MS), ("", "")).await;
            return false;
        }
        let first = match lease::first(pool, name, lease, None).await {
            Ok(first) => first,
            Err(e) => return outage(shared, lease, &format!("failed to read a parked event: {e}")).await,
        };
        let Some(event) = first else {
            let stamp = shared.quarantine.stamp();
            match lease::finish(pool, name, lease).await {
                Ok(Finished::LetGo) => {
                    shared.quarantine.forget(&lease.key, stamp);
                    tracing::info!(handler = %name, key = %shown(&lease.key), "every parked event of the key ran: it is let go");
                    return true;
                }
                Ok(Finished::More) => continue,
                Ok(Finished::Lost) => return true,
                Err(e) => return outage(shared, lease, &format!("failed to let the key go: {e}")).await,
            }
        };
        match run_event(shared, lease, &event).await {
            Ran::Next => {}
            Ran::Lost => return true,
            Ran::Wait(due_ms, reason, class) => {
                if let Err(e) = lease::wait(pool, name, lease, due_ms, (&reason, class)).await {
                    tracing::warn!(handler = %name, "failed to record a parked key's wait (its lease runs out): {e}");
                }
                return true;
            }
        }
    }
}

/// What running one parked event left to do.
enum Ran {
    /// It is resolved and its row gone: the next one.
    Next,
    /// The lease was lost: another runner has the key; stop.
    Lost,
    /// The key waits: this long (`None`: held for an operator), with the
    /// failure's reason and class (empty: unchanged).
    Wait(Option<u64>, String, &'static str),
}

/// Runs `event`: its turn under the events' rate and a permit first, then
/// counted (an execution that kills the host is spent), then executed. A
/// lease lost meanwhile lets the execution end (its effect is the
/// ledger's to keep once), and nothing after it is written.
async fn run_event(shared: &HandlerContext, lease: &Lease, event: &ParkedEvent) -> Ran {
    let (pool, name, record) = (&shared.idem_pool, &shared.name, &event.record);
    let checked = shared.validator.check(record).await;
    let Ok(checked) = checked else { return waiting_out("the schema registry does not answer") };
    let valid = match checked {
        Ok(valid) => valid,
        Err(invalid) => {
            let failure = Failure::first(ErrorClass::Invalid, invalid.to_string(), 0);
            return dead_letter(shared, lease, event, &failure).await;
        }
    };
    let _ = shared.slot.executor().throttles().pass(crate::throttle::EVENTS, None).await;
    let Ok(permit) = shared.permits.acquire().await else { return waiting_out("the handler is closing") };
    let attempts = match lease::spend(pool, name, lease, event.seq, 1).await {
        Ok(Some(n)) => u32::try_from(n).unwrap_or(0),
        Ok(None) => return Ran::Lost,
        Err(e) => return waiting_out(&format!("failed to count a parked event's execution: {e}")),
    };
    let max = shared.config.retry.max_attempts;
    if attempts > max {
        let reason = format!("{} executions started and none finished: the event ends the host process", attempts - 1);
        tracing::error!(handler = %name, offset = record.offset, "{reason}");
        return Ran::Wait(None, reason, ErrorClass::Permanent.as_str());
    }
    let executor = shared.slot.executor_for(&valid);
    let on = executor.handler().version();
    let result = executor.execute(&valid, attempts).await;
    shared.slot.count(on, result.as_ref().map(|o| *o));
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
async fn after(
    shared: &HandlerContext,
    lease: &Lease,
    event: &ParkedEvent,
    on: Option<i32>,
    error: ExecError,
    attempts: u32,
) -> Ran {
    let (pool, name) = (&shared.idem_pool, &shared.name);
    let class = error.class();
    let reason = crate::text::controls_escaped(&error.to_string(), 4_000);
    let offset = event.record.offset;
    let unspend = || lease::spend(pool, name, lease, event.seq, -1);
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
            tracing::error!(
                handler = %name, offset, attempts,
                "a parked event's attempts are spent: its key is held for an operator: {reason}"
            );
            shared.stats.failed(class);
            Ran::Wait(None, reason, class.as_str())
        }
        _ => {
            shared.stats.failed(class);
            let failure = Failure::first(class, reason, attempts);
            dead_letter(shared, lease, event, &failure).await
        }
    }
}

/// The event leaves the quarantine.
async fn resolved(shared: &HandlerContext, lease: &Lease, event: &ParkedEvent) -> Ran {
    match lease::done(&shared.idem_pool, &shared.name, lease, event.seq, LEASE_SECONDS).await {
        Ok(true) => {
            Stats::add(&shared.stats.unparked);
            Ran::Next
        }
        Ok(false) => Ran::Lost,
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

/// An outage outside an execution: the key waits; the task goes on.
async fn outage(shared: &HandlerContext, lease: &Lease, why: &str) -> bool {
    tracing::warn!(handler = %shared.name, "{why}; the key is tried again later");
    let _ = lease::wait(&shared.idem_pool, &shared.name, lease, Some(OUTAGE_WAIT_MS), ("", "")).await;
    false
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
