//! Executes a batch of events of one handler in one transaction: one BEGIN,
//! one set-based claim, the handler once per claimed event (each in a fresh
//! store), one COMMIT.
//!
//! The scheme is optimistic and uses no savepoints at all. If anything goes
//! wrong with event `k` (its handler fails, one of its statements fails, its
//! claim conflicts, the database fails), the whole transaction is rolled
//! back and the caller runs events `0..k` again as a batch, then resolves
//! event `k` alone through the failure path (retries, DLQ), before anything
//! after it. Why that is correct:
//! - a rolled-back event leaves nothing behind, its claim included: the
//!   claim was made in the same transaction, and no savepoint can outlive
//!   its rollback, so a redelivery is never mistaken for a duplicate;
//! - the events before `k` run again; their database effects were rolled
//!   back, and their HTTP calls repeat with the same `Idempotency-Key`,
//!   which is what the key is for (the provider answers the first result);
//! - event `k` is resolved before any later event of its partition runs, so
//!   the partition stays in order and the committed offset never passes it;
//! - no subtransaction is ever opened, so PostgreSQL's cache of 64
//!   subtransaction ids per backend is never crossed, however large the
//!   batch or however many statements its handlers run.
//!
//! The price: a failure re-runs the events before it. Failures are rare
//! next to successes, and a batch is bounded (`max_events`).

use tracing::Instrument as _;

use super::{Executor, Outcome};
use crate::dedup::{self, Claim};
use crate::error::{ErrorClass, ExecError};
use crate::event::Event;
use crate::telemetry::traces::TARGET as TRACE;
use crate::transaction::{EventTx, within};

/// Why a batch did not commit.
#[derive(Debug)]
pub enum BatchFailure {
    /// Rolled back because `stop` asked: nothing to resolve.
    Stopped,
    /// The claim found the module version no longer active: switch to the
    /// active one and run the batch again.
    StaleModule,
    /// The failure names no event (BEGIN, the claim, COMMIT failed). The
    /// error when it is fatal (idem's tables are unusable): the first event
    /// meets it as its own.
    Whole(Option<ExecError>),
    /// The event at `index` failed: the events before it may run again as
    /// a batch; it must be resolved alone before any event after it runs.
    /// `own`: its failure when the failure is its own (its handler failed,
    /// trapped or overran): that was its first attempt. `None`: not the
    /// event's doing (a statement that failed without a savepoint, a
    /// conflicting claim, the database); it runs again from attempt 1.
    At { index: usize, own: Option<ExecError> },
}

impl BatchFailure {
    fn whole(error: ExecError) -> Self {
        match error {
            ExecError::StaleModule(_) => Self::StaleModule,
            error => Self::Whole((error.class() == ErrorClass::Fatal).then_some(error)),
        }
    }

    fn at(index: usize, own: Option<ExecError>) -> Self {
        Self::At { index, own }
    }
}

impl Executor {
    /// Executes `events` (distinct ids) in one transaction. `Ok` only
    /// after COMMIT succeeded, with one outcome per event. `stop` is asked
    /// between two events, with the number of events run so far; when it
    /// answers true (the partition was revoked, the host is stopping), the
    /// batch is rolled back at once, so that the
    /// partition's next owner finds its events unclaimed instead of waiting
    /// for up to `max_events` executions; they run again there (HTTP calls
    /// with the same keys).
    pub async fn execute_batch(
        &self,
        events: &[Event],
        stop: impl Fn(usize) -> bool,
    ) -> Result<Vec<Outcome>, BatchFailure> {
        let began = std::time::Instant::now();
        let (mut tx, claims) = self.begin_and_claim(events).await?;
        let budget = self.handler.settings().timeout;
        let mut outcomes = Vec::with_capacity(events.len());
        for (index, (event, claim)) in events.iter().zip(claims).enumerate() {
            if index > 0 && stop(index) {
                tx.rollback().await;
                return Err(BatchFailure::Stopped);
            }
            match claim {
                Claim::Claimed => {}
                Claim::Unguarded => self.unguarded(event),
                Claim::Duplicate => {
                    outcomes.push(Outcome::Duplicate);
                    continue;
                }
                Claim::Conflict => {
                    tx.rollback().await;
                    return Err(BatchFailure::at(index, None));
                }
                Claim::Stale | Claim::Future => match self.refused(event, claim) {
                    Ok(skipped) => {
                        outcomes.push(skipped);
                        continue;
                    }
                    // Its own final failure: it goes to the DLQ alone.
                    Err(error) => {
                        tx.rollback().await;
                        return Err(BatchFailure::at(index, Some(error)));
                    }
                },
            }
            tx.renew(budget);
            let span = self.event_span(event);
            let (back, result) = self.invoke(tx, event, 1, true).instrument(span).await;
            tx = back;
            match result {
                Ok(outcome) => outcomes.push(outcome),
                Err(error) => return Err(self.failed_at(tx, index, error).await),
            }
        }
        // An error at COMMIT names no event: the caller resolves the first
        // alone (the claim then tells whether the batch committed after all).
        let span = tracing::trace_span!(target: TRACE, "idem.commit", events = events.len());
        tx.commit().instrument(span).await.map_err(BatchFailure::whole)?;
        if let Some(stats) = self.stats() {
            stats.transaction.observe_duration(began.elapsed());
            stats.batch_size.observe(events.len() as f64);
        }
        Ok(outcomes)
    }

    /// Begins the batch's transaction and claims its events in one
    /// statement.
    async fn begin_and_claim(&self, events: &[Event]) -> Result<(EventTx, Vec<Claim>), BatchFailure> {
        let mut tx = self.begin().await.map_err(BatchFailure::whole)?;
        let deadline = tx.statement_deadline();
        let claim = dedup::claim_many(tx.conn(), events, self.handler.version(), self.accept_stale());
        let span = tracing::trace_span!(target: TRACE, "idem.claim", events = events.len());
        match within(deadline, "claim", claim).instrument(span).await {
            Ok(claims) => Ok((tx, claims)),
            // Refused before it waited on anything: the connection is sound.
            Err(error @ (ExecError::StaleModule(_) | ExecError::Infrastructure(_))) => {
                tx.rollback().await;
                Err(BatchFailure::whole(error))
            }
            Err(error) => {
                tx.abandon(&self.pool);
                Err(BatchFailure::whole(error))
            }
        }
    }

    /// Each event's handler runs in its own trace (its record's
    /// `traceparent`); the batch's claim and commit are the batch's.
    fn event_span(&self, event: &Event) -> tracing::Span {
        let span = tracing::trace_span!(
            target: TRACE, "idem.event", handler = %self.handler.settings().name, topic = %event.topic,
            partition = event.partition, offset = event.offset, event_id = %event.id
        );
        crate::telemetry::traces::continue_from(&span, &event.headers);
        span
    }

    /// Ends the batch's transaction after the event at `index` failed with
    /// `error`; the failure keeps `error` as the event's own when it is the
    /// handler's doing.
    async fn failed_at(&self, tx: EventTx, index: usize, error: ExecError) -> BatchFailure {
        match error {
            // A statement may still run, or the connection is in an
            // unknown state: close it (see `execute`).
            ExecError::TimedOut(_) | ExecError::Database(_) | ExecError::Deadline(_) => tx.abandon(&self.pool),
            _ => tx.rollback().await,
        }
        let own = match error {
            ExecError::HandlerRetryable(_)
            | ExecError::HandlerPermanent(_)
            | ExecError::Trapped(_)
            | ExecError::TimedOut(_) => Some(error),
            _ => None,
        };
        BatchFailure::at(index, own)
    }
}
