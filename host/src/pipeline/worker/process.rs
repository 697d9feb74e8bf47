//! One record through the whole failure path: an invalid one resolved at
//! once, a valid one executed until it is resolved (the loop is `alone`'s,
//! the decision after each failure `decide`'s); what an execution is (the
//! permit, the count outside the process) and what a decision does (the
//! log line, the counter, the probe) are here.

use std::sync::Arc;
use std::time::Duration;

use super::Worker;
use super::alone::{AloneLane, Execution, Next, Resolution};
use super::decide::{self, Step, Tries};
use crate::error::{ErrorClass, ExecError};
use crate::executor::Outcome;
use crate::pipeline::HandlerContext;
use crate::pipeline::dlq::Failure;
use crate::event::Event;
use crate::stats::Stats;
use crate::validate::{Invalid, Record};

/// The longest error text logged or dead-lettered.
const MAX_ERROR_CHARS: usize = 4_000;

impl Worker {
    /// Executes `record` (`validated` already by the batch path, or not)
    /// until it is
    /// resolved: processed, a duplicate, or dead-lettered (`from_batch`: the failure of its
    /// execution in a batch, which counts as its first). `true`: its offset may be committed;
    /// `false`: abandoned (stopped, blocked or fatal), to be redelivered.
    ///
    /// The handler's `concurrency` permit is held only while an execution
    /// runs, never during a backoff: a partition that waits does not hold up
    /// the handler's other partitions.
    pub(super) async fn process(
        &mut self,
        record: &Record,
        validated: Option<Result<Arc<Event>, Invalid>>,
        from_batch: Option<(Option<i32>, ExecError)>,
    ) -> bool {
        let shared = self.shared.clone();
        let event = match validated.unwrap_or_else(|| super::validated(&shared, record)) {
            Ok(event) => event,
            Err(invalid) => {
                let (topic, partition, offset) = (&record.topic, record.partition, record.offset);
                tracing::warn!(handler = %shared.name, %topic, partition, offset, reason = %invalid, "invalid record");
                Stats::add(&shared.stats.invalid);
                let failure =
                    Failure::first(ErrorClass::Invalid, invalid.to_string(), 0);
                return super::final_failure::resolve(&shared, &self.state, record, failure).await;
            }
        };
        if from_batch.is_none() {
            self.shadow(std::slice::from_ref(&event)).await;
        }
        let mut lane = Alone { worker: self, event: &event, record, counted: false };
        // A batch's failure names the version the batch ran on.
        match super::alone::until_resolved(&mut lane, from_batch).await {
            Resolution::Succeeded(outcome) => {
                self.succeeded(record, event.id, outcome);
                true
            }
            Resolution::Abandoned => false,
            Resolution::Park(failure, wait) => self.park_failed(record, failure, Some(wait)).await,
            // A retryable failure whose attempts are spent parks its key,
            // held, where the handler quarantines (and the record has a key).
            Resolution::Final(failure) if parks(&shared, record, &failure) => self.park_failed(record, failure, None).await,
            Resolution::Final(failure) => super::final_failure::resolve(&shared, &self.state, record, failure).await,
        }
    }

    /// Takes `decide`'s decision after `error` and applies what it says
    /// besides the next step: the log line, the counter, the probe.
    async fn after_failure(
        &self,
        record: &Record,
        event_id: uuid::Uuid,
        tries: &mut Tries,
        error: ExecError,
        stale: bool,
    ) -> Next {
        let shared = &self.shared;
        let at = *tries;
        // A throttled event is never blamed either: the destination said
        // when to come back, and the database answering changes nothing.
        let unblamed = stale || matches!(error, ExecError::Throttled(_));
        let decision = decide::after_failure(tries, error.class(), unblamed, shared.config.retry.max_attempts, |n| {
            shared.config.backoff(n)
        });
        // Shown as data wherever it goes (logs, the DLQ reason): a guest's
        // words or values can reach it through a database error's detail.
        let error = crate::text::controls_escaped(&error.to_string(), MAX_ERROR_CHARS);
        let (name, topic, partition, offset) = (&shared.name, &record.topic, record.partition, record.offset);
        let (attempt, outages) = (tries.attempt, tries.outages);
        if decision.blamed {
            // (The outages before this failure and it: the retry counts afresh.)
            let outages = at.outages + 1;
            tracing::warn!(
                handler = %name, %topic, partition, offset, %event_id, outages,
                "the failure persists while the database answers: counted as the event's"
            );
        }
        if decision.probe {
            tries.suspect = database_answers(shared).await;
        }
        match decision.step {
            Step::Outage(wait) => {
                tracing::warn!(
                    handler = %name, %topic, partition, offset, %event_id, attempt, outages,
                    "infrastructure unavailable, retrying without spending an attempt: {error}"
                );
                Stats::add(&shared.stats.unavailable);
                Next::Wait(wait)
            }
            Step::Retry(wait) if shared.quarantine.on() && record.key.is_some() => {
                Stats::add(&shared.stats.retries);
                let failure = Failure::first(ErrorClass::Retryable, error, at.attempt);
                Next::Park(failure, wait)
            }
            Step::Retry(wait) => {
                let attempt = at.attempt;
                tracing::warn!(handler = %name, %topic, partition, offset, %event_id, attempt, "retrying: {error}");
                Stats::add(&shared.stats.retries);
                Next::Wait(wait)
            }
            Step::Fatal => {
                tracing::error!(handler = %name, %topic, partition, offset, %event_id, "fatal: {error}");
                shared.incident(crate::stats::IncidentKind::LedgerRefused, error.to_string());
                Next::Abandon
            }
            Step::Final(class) => {
                tracing::error!(
                    handler = %name, %topic, partition, offset, %event_id, attempt, class = class.as_str(),
                    "event failed (its transaction rolled back): {error}"
                );
                shared.stats.failed(class);
                Next::Final(Failure::first(class, error, attempt))
            }
        }
    }

    /// One execution of `event` under the handler's permit (and, until the
    /// partition has processed an event, counted outside the process, one
    /// at a time per handler, so that a crash is blamed on the one event
    /// that was running).
    async fn execute(
        &mut self,
        event: &Event,
        record: &Record,
        tries: &mut Tries,
        counted: &mut bool,
    ) -> Execution {
        let shared = self.shared.clone();
        // The handler's events' rate (`max_events_per_second`), waited for
        // before a connection is taken.
        let throttles = shared.slot.executor().throttles().clone();
        if self.state.until_stopped(throttles.pass(crate::throttle::EVENTS, None)).await.is_none() {
            return Execution::Abandoned;
        }
        let Some(Ok(permit)) = self.state.until_stopped(shared.permits.acquire()).await else {
            return Execution::Abandoned;
        };
        if self.state.is_stopped() {
            return Execution::Abandoned;
        }
        let unproven = !self.proven;
        let serial = match unproven {
            true => match self.state.until_stopped(shared.unproven.lock()).await {
                Some(guard) => Some(guard),
                None => return Execution::Abandoned,
            },
            false => None,
        };
        // Paused by an operator while it waited for the permit: it does not
        // run; the wait after it (`sleep`) lasts until the pause is lifted,
        // and spends no attempt.
        if self.state.is_held() {
            drop((serial, permit));
            return Execution::Outage(Duration::ZERO);
        }
        if unproven && !*counted {
            match crate::pipeline::attempts::count(&shared.idem_pool, &shared.name, record).await {
                Ok(started) if started > shared.config.retry.max_attempts => {
                    drop((serial, permit));
                    let reason = format!(
                        "{} executions started and none finished: the event ends the host process",
                        started - 1
                    );
                    let (topic, partition, offset) = (&record.topic, record.partition, record.offset);
                    tracing::error!(handler = %shared.name, %topic, partition, offset, event_id = %event.id, "{reason}");
                    shared.stats.failed(ErrorClass::Permanent);
                    return Execution::KillsTheHost(Failure::first(ErrorClass::Permanent, reason, started - 1));
                }
                Ok(_) => *counted = true,
                Err(e) => {
                    drop((serial, permit));
                    let error = ExecError::from_host_sql(e);
                    let name = &shared.name;
                    if error.class() == ErrorClass::Fatal {
                        shared.incident(
                            crate::stats::IncidentKind::LedgerRefused,
                            format!("cannot count executions in idem.execution_attempt: {error}"),
                        );
                        return Execution::Abandoned;
                    }
                    let (topic, partition, offset) = (&record.topic, record.partition, record.offset);
                    tracing::warn!(handler = %name, %topic, partition, offset, "failed to count the execution: {error}");
                    Stats::add(&shared.stats.unavailable);
                    return Execution::Outage(tries.outage(|n| shared.config.backoff(n)));
                }
            }
        }
        shared.abort_point(&event.payload);
        let executor = shared.slot.executor_for(event);
        let on = executor.handler().version();
        let result = executor.execute(event, tries.attempt).await;
        shared.slot.count(on, result.as_ref().map(|o| *o));
        drop((serial, permit));
        Execution::Done { on, result }
    }

    /// Counts an execution that did not fail.
    fn succeeded(&mut self, record: &Record, event_id: uuid::Uuid, outcome: Outcome) {
        let stats = &self.shared.stats;
        match outcome {
            Outcome::Processed => {
                Stats::add(&stats.processed);
                if record.offset >= self.alone_through {
                    self.proven = true;
                }
                Stats::add(&stats.transactions);
                self.shared.fault_point();
            }
            Outcome::Duplicate => {
                let (topic, partition, offset) = (&record.topic, record.partition, record.offset);
                tracing::debug!(handler = %self.shared.name, %topic, partition, offset, %event_id, "duplicate skipped");
                Stats::add(&stats.duplicates);
            }
            Outcome::Skipped => Stats::add(&stats.skipped),
        }
    }
}

/// Whether `failure` parks `record`'s key rather than dead-letters it.
fn parks(shared: &HandlerContext, record: &Record, failure: &Failure) -> bool {
    shared.quarantine.on() && record.key.is_some() && failure.class == ErrorClass::Retryable
}

async fn database_answers(shared: &HandlerContext) -> bool {
    let executor = shared.slot.executor();
    let probe = sqlx::query("SELECT 1").execute(executor.pool());
    matches!(tokio::time::timeout(Duration::from_secs(2), probe).await, Ok(Ok(_)))
}

/// A worker resolving one event alone, as the failure path's loop sees it
/// (`alone`).
struct Alone<'a> {
    worker: &'a mut Worker,
    event: &'a Event,
    record: &'a Record,
    /// The execution was counted outside the process (`attempts`).
    counted: bool,
}

impl AloneLane for Alone<'_> {
    async fn execute(&mut self, tries: &mut Tries) -> Execution {
        self.worker.execute(self.event, self.record, tries, &mut self.counted).await
    }

    async fn switch_module(&mut self, version: Option<i32>) -> bool {
        crate::pipeline::switch_module(&self.worker.shared, version).await
    }

    async fn after_failure(&mut self, tries: &mut Tries, error: ExecError, stale: bool) -> Next {
        self.worker.after_failure(self.record, self.event.id, tries, error, stale).await
    }

    /// A backoff, then as long as an operator's pause holds the partition:
    /// a retrying event makes no call while it is paused.
    async fn sleep(&mut self, wait: Duration) -> bool {
        self.worker.state.sleep(wait).await && self.worker.state.until_released().await
    }
}
