//! One record through the whole failure path: validated, executed until
//! it is resolved, the decision after each failure taken by `decide`.

use std::time::Duration;

use super::Worker;
use super::decide::{self, Step, Tries};
use crate::error::{ErrorClass, ExecError};
use crate::executor::Outcome;
use crate::pipeline::HandlerContext;
use crate::pipeline::dlq::Failure;
use crate::stats::Stats;
use crate::validate::Record;

/// The longest error text logged or dead-lettered.
const MAX_ERROR_CHARS: usize = 4_000;

/// What comes after a failed execution.
enum Next {
    /// Wait this long, then execute again.
    Wait(Duration),
    /// Give the record up (the handler stops): it is redelivered.
    Abandon,
    /// The failure is final.
    Final(Failure),
}

/// What became of one execution of the event.
enum Execution {
    Done(Result<Outcome, ExecError>),
    /// The partition stopped (or the handler must): abandon the record.
    Abandoned,
    /// Counting the execution failed for a moment: wait, no attempt spent.
    Outage(Duration),
    /// Counted executions show the event ends the host process.
    KillsTheHost(Failure),
}

impl Worker {
    /// Validates and executes `record` until it is resolved: processed, a
    /// duplicate, or dead-lettered (`from_batch`: the failure of its
    /// execution in a batch, which counts as its first). `true`: its offset may be committed;
    /// `false`: abandoned (stopped, blocked or fatal), to be redelivered.
    ///
    /// The handler's `concurrency` permit is held only while an execution
    /// runs, never during a backoff: a partition that waits does not hold up
    /// the handler's other partitions.
    pub(super) async fn process(&mut self, record: &Record, mut from_batch: Option<ExecError>) -> bool {
        let shared = self.shared.clone();
        let validated = {
            let _span = tracing::trace_span!(target: crate::traces::TARGET, "idem.validate").entered();
            shared.validator.validate(record)
        };
        let event = match validated {
            Ok(event) => event,
            Err(invalid) => {
                let (topic, partition, offset) = (&record.topic, record.partition, record.offset);
                tracing::warn!(handler = %shared.name, %topic, partition, offset, reason = %invalid, "invalid record");
                Stats::add(&shared.stats.invalid);
                let failure =
                    Failure { class: ErrorClass::Invalid, reason: invalid.to_string(), attempts: 0, replays: 0 };
                return super::final_failure::resolve(&shared, &self.state, record, failure).await;
            }
        };
        let mut tries = Tries::new();
        let mut counted = false;
        // The module version the last execution ran on.
        let mut ran_on = shared.slot.version();
        loop {
            let ran = match from_batch.take() {
                Some(error) => Execution::Done(Err(error)),
                None => self.execute(&event, record, &mut tries, &mut counted, &mut ran_on).await,
            };
            let error = match ran {
                Execution::Done(Ok(outcome)) => {
                    self.succeeded(record, event.id, outcome);
                    return true;
                }
                Execution::Done(Err(error)) => error,
                Execution::Abandoned => return false,
                Execution::Outage(wait) => {
                    if !self.state.sleep(wait).await {
                        return false;
                    }
                    continue;
                }
                Execution::KillsTheHost(failure) => {
                    return super::final_failure::resolve(&shared, &self.state, record, failure).await;
                }
            };
            // Another version was activated: the same event, on it, at once.
            // If this host cannot load it, the event waits as in an outage: it
            // never spends an attempt on a version it may not run.
            let stale = matches!(error, ExecError::StaleModule(_));
            if stale && crate::pipeline::switch_module(&shared, ran_on).await {
                continue;
            }
            let failure = match self.after_failure(record, event.id, &mut tries, error, stale).await {
                Next::Wait(wait) if self.state.sleep(wait).await => continue,
                Next::Wait(_) | Next::Abandon => return false,
                Next::Final(failure) => failure,
            };
            return super::final_failure::resolve(&shared, &self.state, record, failure).await;
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
        let decision = decide::after_failure(tries, error.class(), stale, shared.config.retry.max_attempts, |n| {
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
                Next::Final(Failure { class, reason: error, attempts: attempt, replays: 0 })
            }
        }
    }

    /// One execution of `event` under the handler's permit (and, until the
    /// partition has processed an event, counted outside the process, one
    /// at a time per handler, so that a crash is blamed on the one event
    /// that was running).
    async fn execute(
        &mut self,
        event: &crate::event::Event,
        record: &Record,
        tries: &mut Tries,
        counted: &mut bool,
        ran_on: &mut Option<i32>,
    ) -> Execution {
        let shared = self.shared.clone();
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
                    return Execution::KillsTheHost(Failure {
                        class: ErrorClass::Permanent,
                        reason,
                        attempts: started - 1,
                        replays: 0,
                    });
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
        let executor = shared.slot.executor();
        *ran_on = executor.handler().version();
        let result = executor.execute(event, tries.attempt).await;
        shared.slot.count(*ran_on, result.as_ref().map(|o| *o).map_err(drop));
        drop((serial, permit));
        Execution::Done(result)
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

async fn database_answers(shared: &HandlerContext) -> bool {
    let executor = shared.slot.executor();
    let probe = sqlx::query("SELECT 1").execute(executor.pool());
    matches!(tokio::time::timeout(Duration::from_secs(2), probe).await, Ok(Ok(_)))
}
