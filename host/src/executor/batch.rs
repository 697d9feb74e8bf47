//! Executes a batch of events of one handler in one transaction: one BEGIN,
//! one set-based claim, the handler once per claimed event (each with its
//! own capabilities, on a fresh instance or a kept one), one COMMIT.
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

use std::borrow::Borrow;

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use tracing::Instrument as _;

use super::chains::Schedule;
use super::{Executor, Outcome};
use crate::capabilities::Left;
use crate::dedup::{self, Claim};
use crate::error::{ErrorClass, ExecError};
use crate::event::Event;
use crate::traces::TARGET as TRACE;
use crate::transaction::{EventTx, SharedTx, within};

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
    /// before each event after the first, with one past the index of the
    /// event started last; when it answers true (the partition was revoked, the host is
    /// stopping), the batch is rolled back at once, so that the
    /// partition's next owner finds its events unclaimed instead of waiting
    /// for up to `max_events` executions; they run again there (HTTP calls
    /// with the same keys).
    ///
    /// Events run one at a time in their order, or up to the handler's
    /// `max_concurrent` at once where its `ordering` lets them
    /// (`chains`): each holds a share of the transaction, and their
    /// statements take it in turn. A failure ends the batch as soon as it
    /// is seen, whatever else is running.
    pub async fn execute_batch<E: Borrow<Event> + Sync>(
        &self,
        events: &[E],
        stop: impl Fn(usize) -> bool,
    ) -> Result<Vec<Outcome>, BatchFailure> {
        let began = std::time::Instant::now();
        let (tx, claims) = self.begin_and_claim(events).await?;
        let shared = SharedTx::new(tx);
        let ran = self.run_claimed(&shared, events, &claims, stop).await;
        // Every share went with the invocations (ended or dropped).
        let Some(tx) = shared.into_whole() else {
            return Err(BatchFailure::Whole(None));
        };
        let (outcomes, lefts) = match ran {
            Ok(ran) => ran,
            Err(halt) => return Err(self.halted(tx, halt).await),
        };
        let mut tx = tx;
        // What the events left (their emits), each with its cause. A
        // failure names no one event: the batch's events then run alone,
        // each sealing its own.
        let lefts: Vec<(uuid::Uuid, &Left)> =
            lefts.iter().map(|(index, left)| (events[*index].borrow().id, left)).collect();
        if let Err(error) = crate::capabilities::before_commit(&mut tx, &lefts).await {
            tx.abandon(&self.pool);
            return Err(BatchFailure::whole(error));
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

    /// Runs the claimed events, as many at once as the handler allows and
    /// its ordering lets; the outcomes in the events' order.
    async fn run_claimed<E: Borrow<Event> + Sync>(
        &self,
        shared: &SharedTx,
        events: &[E],
        claims: &[Claim],
        stop: impl Fn(usize) -> bool,
    ) -> Result<(Vec<Outcome>, Lefts), Halt> {
        let settings = self.handler.settings();
        let (budget, max) = (settings.timeout, settings.max_concurrent.max(1));
        let mut schedule =
            if max == 1 { Schedule::in_order(events.len()) } else { Schedule::new(events, settings.ordering) };
        let mut outcomes = vec![None; events.len()];
        let mut running = FuturesUnordered::new();
        let mut last_started = None;
        let mut lefts = Vec::new();
        loop {
            while running.len() < max {
                let Some(index) = schedule.take_ready() else { break };
                let (event, claim) = (events[index].borrow(), claims[index]);
                let guarded = match self.claimed(event, claim, index) {
                    Claimed::Skip(outcome) => {
                        outcomes[index] = Some(outcome);
                        schedule.done(index);
                        continue;
                    }
                    Claimed::Refused(failure) => return Err(Halt { failure, abandon: shared.in_use() }),
                    Claimed::Run(guarded) => guarded,
                };
                if last_started.is_some_and(|last: usize| stop(last + 1)) {
                    return Err(Halt { failure: BatchFailure::Stopped, abandon: shared.in_use() });
                }
                last_started = Some(index);
                let lent = shared.lend(budget);
                let span = self.event_span(event);
                let invoked = async move {
                    let run = super::Run { batched: true, guarded, ..super::Run::alone(1) };
                    let (_, result, left) = self.invoke(lent, event, run).instrument(span).await;
                    (index, result, left)
                };
                // One at a time (the default): awaited here, sparing a
                // task node per event and a hop per wake-up.
                if max == 1 {
                    let (index, result, left) = invoked.await;
                    settle(&mut schedule, (&mut outcomes, &mut lefts), index, (result, left), (shared, max))?;
                } else {
                    running.push(invoked);
                }
            }
            let Some((index, result, left)) = running.next().await else { break };
            settle(&mut schedule, (&mut outcomes, &mut lefts), index, (result, left), (shared, max))?;
        }
        // Every event has its outcome, or the batch must not commit.
        let outcomes = outcomes
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or(Halt { failure: BatchFailure::Whole(None), abandon: false })?;
        // What the events left, in the events' order.
        lefts.sort_by_key(|(index, _)| *index);
        Ok((outcomes, lefts))
    }

    /// What `claim` means for `event`, the batch's `index`th.
    fn claimed(&self, event: &Event, claim: Claim, index: usize) -> Claimed {
        match claim {
            Claim::Claimed => Claimed::Run(true),
            Claim::Unguarded => {
                self.unguarded(event);
                Claimed::Run(false)
            }
            Claim::Duplicate => Claimed::Skip(Outcome::Duplicate),
            Claim::Conflict => Claimed::Refused(BatchFailure::at(index, None)),
            Claim::Stale | Claim::Future => match self.refused(event, claim) {
                Ok(skipped) => Claimed::Skip(skipped),
                // Its own final failure: it goes to the DLQ alone.
                Err(error) => Claimed::Refused(BatchFailure::at(index, Some(error))),
            },
        }
    }

    /// Ends the batch's transaction after `halt`: rolled back, or closed
    /// when a statement may still be running on it (an invocation overran
    /// or was dropped mid-flight, the connection failed).
    async fn halted(&self, tx: EventTx, halt: Halt) -> BatchFailure {
        if halt.abandon {
            tx.abandon(&self.pool);
        } else {
            tx.rollback().await;
        }
        halt.failure
    }

    /// Begins the batch's transaction and claims its events in one
    /// statement.
    async fn begin_and_claim<E: Borrow<Event> + Sync>(
        &self,
        events: &[E],
    ) -> Result<(EventTx, Vec<Claim>), BatchFailure> {
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
        crate::traces::continue_from(&span, &event.headers);
        span
    }
}

/// What each event of a batch that ran left, by its index in the batch.
type Lefts = Vec<(usize, Left)>;

/// Takes the result of the batch's `index`th event, run with up to `max`
/// at once: its outcome kept and the next of its chain ready, or the halt
/// its error means.
fn settle(
    schedule: &mut Schedule,
    (outcomes, lefts): (&mut [Option<Outcome>], &mut Lefts),
    index: usize,
    (result, left): (Result<Outcome, ExecError>, Left),
    (shared, max): (&SharedTx, usize),
) -> Result<(), Halt> {
    let outcome = result.map_err(|error| Halt::at(index, error, shared.in_use(), max > 1))?;
    outcomes[index] = Some(outcome);
    lefts.push((index, left));
    schedule.done(index);
    Ok(())
}

/// What a claim means for its event in a batch.
enum Claimed {
    /// Run it: with a dedup row (`true`), or without (unguarded).
    Run(bool),
    /// Resolved without running: a duplicate, or skipped as stale.
    Skip(Outcome),
    /// The batch cannot commit with it.
    Refused(BatchFailure),
}

/// Why a batch stopped before its end.
struct Halt {
    failure: BatchFailure,
    /// The connection is closed rather than rolled back: a statement may
    /// still run on it (an invocation overran mid-statement, or one still
    /// running is dropped mid-statement), or its state is unknown.
    abandon: bool,
}

impl Halt {
    /// The event at `index` failed with `error`, a statement of another
    /// still on the connection if `in_use`; the failure keeps `error` as the
    /// event's own when it is the handler's doing.
    ///
    /// With events running `at_once`, no failure is counted as the event's
    /// own: it may have read another event's unfinished writes, or spent its
    /// budget while others' statements held the transaction (a guest's long
    /// statement would get innocent events blamed). It runs again alone, on
    /// committed state and with its time its own, before any final decision.
    /// So does an event that trapped on a kept instance (`KeptTrapped`):
    /// alone, a trap on a kept instance again sends it to a fresh one.
    fn at(index: usize, error: ExecError, in_use: bool, at_once: bool) -> Self {
        let unknown = matches!(error, ExecError::TimedOut(_) | ExecError::Database(_) | ExecError::Deadline(_));
        let own = match error {
            _ if at_once => None,
            ExecError::HandlerRetryable(_)
            | ExecError::HandlerPermanent(_)
            | ExecError::Trapped(_)
            | ExecError::TimedOut(_) => Some(error),
            _ => None,
        };
        Self { failure: BatchFailure::at(index, own), abandon: unknown || in_use }
    }
}
