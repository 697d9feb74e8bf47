//! Executes one event: claim, handler, commit, all in one transaction on a
//! connection of the handler's own pool (logged in as its role).

mod answer;
mod batch;
mod chains;
mod rehearsal;
mod replay;
mod trial;

use std::sync::Arc;

use sqlx::PgPool;

use crate::capabilities::tape::Tape;
use crate::capabilities::{Call, Capabilities, Left, Shared};
use crate::config::StalePolicy;
use crate::dedup::{self, Claim};
use crate::error::ExecError;
use crate::event::Event;
use crate::runtime::{Handler, Returned};
use crate::stats::Stats;
use crate::traces::TARGET as TRACE;
use answer::result;

use crate::transaction::Lent;
pub use crate::transaction::{EventTx, GRACE, Pins};
pub use batch::BatchFailure;
pub use rehearsal::{Rehearsal, Writes};
pub use replay::Replayed;

use tracing::Instrument as _;
pub use trial::Trial;

/// What became of an event that did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The handler ran and its effect committed with the claim.
    Processed,
    /// The event was already processed by this handler: skipped.
    Duplicate,
    /// Older than the dedup retention with no dedup row, or too far in the
    /// future, under `stale_events = "skip"`: skipped, logged.
    Skipped,
}

/// Runs events through one handler against its own pool.
#[derive(Debug, Clone)]
pub struct Executor {
    handler: Handler,
    pool: PgPool,
    /// What the handler's invocations share (the HTTP client, the keys
    /// sent when its events run side by side).
    shared: Shared,
    pins: Arc<Pins>,
    /// Stale events run regardless of `stale_events` (`idem dlq replay --force`).
    force_stale: bool,
    /// Where timings and guest calls are counted (`idem run`'s metrics).
    stats: Option<Arc<Stats>>,
    /// Invocations keep a line per statement (`idem test`).
    transcribe: bool,
    /// A sample of the events is captured (`[handler.capture]`).
    capture: Option<Arc<crate::capture::Capturing>>,
    /// This version's invocations and their time on this host (a canary's
    /// judgement compares two versions').
    tally: Arc<Tally>,
}

/// Invocations of one version and the time they took.
#[derive(Debug, Default)]
pub struct Tally {
    runs: std::sync::atomic::AtomicU64,
    micros: std::sync::atomic::AtomicU64,
}

impl Tally {
    /// Invocations so far, and their time in microseconds.
    pub fn read(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.runs.load(Relaxed), self.micros.load(Relaxed))
    }

    fn add(&self, took: std::time::Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        self.runs.fetch_add(1, Relaxed);
        self.micros.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Relaxed);
    }
}

impl Executor {
    /// `pool` must be the handler's own (see `sandbox::pool`), never a
    /// privileged one: its role is the sandbox's boundary.
    pub fn new(handler: Handler, pool: PgPool, http: reqwest::Client, pins: Pins) -> Self {
        // Keys are checked across events only where events run side by
        // side in one transaction (see `http::SentKeys`).
        let side_by_side = handler.settings().max_concurrent > 1;
        let throttles = Arc::new(crate::throttle::Throttles::new(handler.settings().rates.clone()));
        let shared =
            Shared { http_client: http, sent_keys: side_by_side.then(Arc::default), throttles, recording: false };
        let pins = Arc::new(pins);
        let (capture, tally) = (None, Arc::default());
        Self { handler, pool, shared, pins, force_stale: false, stats: None, transcribe: false, capture, tally }
    }

    /// The same executor, capturing a sample of its events.
    #[must_use]
    pub fn with_capture(&self, capture: Option<Arc<crate::capture::Capturing>>) -> Self {
        Self { capture, ..self.clone() }
    }

    /// The same executor, counting into `stats`.
    #[must_use]
    pub fn with_stats(&self, stats: Arc<Stats>) -> Self {
        Self { stats: Some(stats), ..self.clone() }
    }

    /// The handler's rates on this host (its events', its destinations').
    pub fn throttles(&self) -> &Arc<crate::throttle::Throttles> {
        &self.shared.throttles
    }

    pub(crate) fn stats(&self) -> Option<&Stats> {
        self.stats.as_deref()
    }

    /// The same executor, running events older than the dedup retention as
    /// `stale_events = "process"` does, whatever the handler's policy.
    #[must_use]
    pub fn forcing_stale(&self) -> Self {
        // Its runs (replays of dead letters) are not the version's live
        // executions a canary is judged against.
        Self { force_stale: true, tally: Arc::default(), ..self.clone() }
    }

    /// The same executor, its invocations keeping a line per statement
    /// (see [`Executor::execute_within`]).
    #[must_use]
    pub fn transcribing(&self) -> Self {
        Self { transcribe: true, ..self.clone() }
    }

    /// Whether the claim accepts stale events (see `dedup::claim_many`).
    fn accept_stale(&self) -> bool {
        self.force_stale || self.handler.settings().stale_events == StalePolicy::Process
    }

    /// What a claim that refused `event` (`Stale` or `Future`) comes to: a
    /// failure that goes to the DLQ with the reason, or, for a stale event
    /// under `stale_events = "skip"`, skipped.
    fn refused(&self, event: &Event, claim: Claim) -> Result<Outcome, ExecError> {
        let settings = self.handler.settings();
        let created = event.created_at().map_or_else(|| "unknown".to_owned(), |t| t.to_rfc3339());
        let error = match claim {
            Claim::Future => ExecError::FutureEvent(format!(
                "its id was created at {created}, further ahead of the database's clock than [retention] future_skew"
            )),
            _ => ExecError::StaleEvent(format!(
                "its id was created at {created}; this handler keeps dedup rows for {} (dedup_retention), so it \
                 may have been processed before; `idem dlq replay --force` runs it",
                crate::config::Span(settings.dedup_retention)
            )),
        };
        // A future id was never processed (no window held it yet): it is
        // never skipped, whatever the policy, so nothing unprocessed is lost.
        if settings.stale_events == StalePolicy::Skip && claim == Claim::Stale {
            tracing::warn!(
                handler = %settings.name, topic = %event.topic, partition = event.partition, offset = event.offset,
                event_id = %event.id, "skipped (stale_events = \"skip\"): {error}"
            );
            return Ok(Outcome::Skipped);
        }
        Err(error)
    }

    /// Says that `event` runs with no dedup row.
    fn unguarded(&self, event: &Event) {
        tracing::warn!(
            handler = %self.handler.settings().name, topic = %event.topic, partition = event.partition,
            offset = event.offset, event_id = %event.id,
            "older than the dedup retention and its window is gone: running it with no dedup row"
        );
    }

    pub fn handler(&self) -> &Handler {
        &self.handler
    }

    /// The same executor (pool, HTTP client, pins) running `handler`, its
    /// tally its own.
    #[must_use]
    pub fn with_handler(&self, handler: Handler) -> Self {
        Self { handler, tally: Arc::default(), ..self.clone() }
    }

    /// This version's invocations and their time on this host.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Executes `event` in a transaction of its own. `attempt` is 1 for the
    /// first execution in this process, then 2, 3, …
    ///
    /// `Ok(Processed)` is returned only after COMMIT succeeded. Every guest
    /// statement ran under a savepoint, so the transaction cannot be in the
    /// aborted state that would make PostgreSQL turn COMMIT into ROLLBACK.
    /// Whatever happens, this returns within the handler's timeout plus
    /// [`GRACE`] for each host statement after it (twice that after a trap
    /// on a kept instance, which a version meets a few times at most:
    /// `runtime::warm::MOST_KEPT_TRAPS`).
    ///
    /// A trap on an instance kept from earlier events is not yet the
    /// event's: it runs again, in a new transaction, on a fresh instance,
    /// whose answer is the event's ([`ExecError::KeptTrapped`]).
    pub async fn execute(&self, event: &Event, attempt: u32) -> Result<Outcome, ExecError> {
        match self.execute_on(event, attempt, false).await {
            Err(ExecError::KeptTrapped(_)) => self.execute_on(event, attempt, true).await,
            result => result,
        }
    }

    /// [`Executor::execute`] once, on a `fresh` instance or a kept one.
    async fn execute_on(&self, event: &Event, attempt: u32, fresh: bool) -> Result<Outcome, ExecError> {
        let began = std::time::Instant::now();
        let tx = self.begin().await?;
        let (lent, result, left) = self.run_in(tx, event, Run { fresh, ..Run::alone(attempt) }).await;
        let mut tx = taken_back(lent)?;
        match result {
            Ok(Outcome::Processed) => {
                if let Err(e) = crate::capabilities::before_commit(&mut tx, &[(event.id, &left)]).await {
                    tx.abandon(&self.pool);
                    return Err(e);
                }
                tx.commit().instrument(tracing::trace_span!(target: TRACE, "idem.commit")).await?;
                if let Some(stats) = self.stats() {
                    stats.transaction.observe_duration(began.elapsed());
                    stats.batch_size.observe(1.0);
                }
                Ok(Outcome::Processed)
            }
            Err(ExecError::TimedOut(_) | ExecError::Database(_) | ExecError::Deadline(_)) => {
                // A statement may still be running, or the connection is in
                // an unknown state: close it rather than wait on it, and have
                // the server end its backend (and the claim's row lock) now.
                tx.abandon(&self.pool);
                result
            }
            other => {
                // A duplicate wrote nothing; a failure must leave nothing.
                tx.rollback().await;
                other
            }
        }
    }

    /// Begins an event's transaction with the handler's pins and budget.
    pub async fn begin(&self) -> Result<EventTx, ExecError> {
        EventTx::begin(&self.pool, &self.pins, self.handler.settings().timeout).await
    }

    /// Instantiates the handler once, in a transaction rolled back at once.
    /// A start-up check: a component that cannot be instantiated under its
    /// limits would fail every event.
    pub async fn check_instantiation(&self) -> anyhow::Result<()> {
        match self.instantiation().await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(reason)) => Err(anyhow::anyhow!("cannot be instantiated under its limits: {reason}")),
            Err(e) => Err(anyhow::anyhow!("failed to begin a transaction: {e}")),
        }
    }

    /// [`Executor::check_instantiation`], telling the database's failure
    /// (`Err`: nothing is known about the component) from the component's
    /// (`Ok(Err(reason))`).
    pub async fn instantiation(&self) -> Result<Result<(), String>, ExecError> {
        let tx = self.begin().await?;
        // A component's start functions run here and may call imports: as
        // in a shadow run, its requests are recorded, never sent (and the
        // transaction is rolled back, its emits never written).
        let checking = self.rehearsing();
        let deadline = tx.deadline();
        let ids = (uuid::Uuid::nil().to_string(), None);
        let caps = checking.capabilities(Lent::Whole(tx), deadline, &ids, false, None, None);
        let (caps, result) = checking.handler.try_instantiate(caps).await;
        if let Some(tx) = caps.tx.into_whole() {
            tx.rollback().await;
        }
        match result {
            Ok(()) => Ok(Ok(())),
            // The host's shortage says nothing about the component.
            Err(e) if e.chain().any(|c| c.is::<wasmtime::PoolConcurrencyLimitError>()) => {
                Err(ExecError::Infrastructure(format!("no instance slot free: {e}")))
            }
            Err(e) => Ok(Err(format!("{e:#}"))),
        }
    }

    /// One invocation's capabilities (`batched`: see `DbCapability`), for
    /// the event `(id, origin)`, until `deadline`.
    fn capabilities(
        &self,
        tx: Lent,
        deadline: tokio::time::Instant,
        (event_id, origin): &(String, Option<&crate::event::Origin>),
        batched: bool,
        provenance: Option<Vec<(String, String)>>,
        tape: Option<Arc<Tape>>,
    ) -> Capabilities {
        let call = Call {
            handler: &self.handler.settings().name,
            event_id,
            origin: *origin,
            batched,
            deadline,
            provenance,
            transcript: self.transcribe,
            tape,
            shared: &self.shared,
        };
        Capabilities::new(tx, self.handler.policies(), &call)
    }

    /// Claims `event` and runs the handler inside `tx`, which the caller
    /// takes back ([`taken_back`]) and commits or rolls back.
    /// `run` says whether the event is guarded: it is, unless the claim
    /// finds its dedup row unguarded.
    async fn run_in(&self, mut tx: EventTx, event: &Event, run: Run) -> Invoked {
        let deadline = tx.statement_deadline();
        let claim = dedup::claim(tx.conn(), event, self.handler.version(), self.accept_stale());
        let span = tracing::trace_span!(target: TRACE, "idem.claim");
        let early = match crate::transaction::within(deadline, "claim", claim).instrument(span).await {
            Ok(Claim::Claimed) => {
                return self.invoke(Lent::Whole(tx), event, run).await;
            }
            Ok(Claim::Unguarded) => {
                self.unguarded(event);
                return self.invoke(Lent::Whole(tx), event, Run { guarded: false, ..run }).await;
            }
            Ok(Claim::Duplicate) => Ok(Outcome::Duplicate),
            Ok(Claim::Conflict) => Err(ExecError::Conflict),
            Ok(refused @ (Claim::Stale | Claim::Future)) => self.refused(event, refused),
            Err(e) => Err(e),
        };
        (Lent::Whole(tx), early, Left::default())
    }

    /// Runs the handler on a claimed `event` inside `tx` (the whole
    /// transaction, or a share of a batch's), and hands `tx` back with what
    /// its capabilities left (the caller seals them if it commits). A
    /// sampled event is captured with what it got and came to.
    async fn invoke(&self, tx: Lent, event: &Event, run: Run) -> Invoked {
        let deadline = tx.deadline();
        let capturing = self.capture.as_ref().filter(|c| c.sampled(&event.id));
        let tape = capturing.map(|_| Tape::recording());
        let invoked = self.invoke_on(tx, deadline, event, run, tape.clone()).await;
        // An attempt the infrastructure cut short (a batch's failed
        // statement, the database, a throttle) says nothing of the handler,
        // nor does a trap on a kept instance: the event's next run is the
        // one captured.
        let cut_short = matches!(&invoked.1,
            Err(e) if e.class() == crate::error::ErrorClass::Unavailable || matches!(e, ExecError::KeptTrapped(_)));
        if let (Some(capturing), Some(tape)) = (capturing, tape.filter(|_| !cut_short)) {
            match tape.overflowed() {
                true => capturing.too_large(),
                false => capturing.keep(self.captured(event, &tape, &invoked)),
            }
        }
        invoked
    }

    /// [`Executor::invoke`] until `deadline`, on `tape` if any.
    async fn invoke_on(
        &self,
        tx: Lent,
        deadline: tokio::time::Instant,
        event: &Event,
        run: Run,
        tape: Option<Arc<Tape>>,
    ) -> Invoked {
        let Run { attempt, batched, guarded, fresh } = run;
        // An event run without a dedup row emits nothing: its emits could
        // not name it as their cause (docs/outbox.md). A handler with no
        // emit topic emits nothing either, so its events skip the headers.
        let settings = self.handler.settings();
        let (trust, emits) = (settings.trust_input_trace_headers, settings.caps.emit.policy.any());
        let provenance = (guarded && emits).then(|| crate::capabilities::emit::write::provenance(event, trust));
        let ids = (event.id.hyphenated().to_string(), event.origin.as_ref());
        let caps = self.capabilities(tx, deadline, &ids, batched, provenance, tape);
        let started = std::time::Instant::now();
        let span = tracing::trace_span!(target: TRACE, "idem.handler", event_id = %event.id, attempt);
        let Returned { mut caps, invocation, stderr, kept } =
            self.handler.invoke(caps, &event.to_wit(attempt), deadline, fresh).instrument(span).await;
        let took = started.elapsed();
        if let Some(stats) = self.stats() {
            stats.execution.observe_duration(took);
        }
        let (verdict, left) = caps.finish(self.stats());
        let result = match result(invocation, verdict, &stderr) {
            Err(ExecError::Trapped(trap)) if kept => {
                self.handler.kept_trapped();
                if let Some(stats) = self.stats() {
                    Stats::add(&stats.kept_traps);
                }
                let handler = &self.handler.settings().name;
                tracing::warn!(
                    handler = %handler, event_id = %event.id,
                    "the handler trapped on an instance kept from earlier events; the event runs again on a fresh \
                     instance: {trap}"
                );
                Err(ExecError::KeptTrapped(trap))
            }
            result => result,
        };
        // The version's time is its successful executions' (a failure is
        // judged as one; a timeout's or an outage's time would say nothing
        // of how long the version takes).
        if result.is_ok() {
            self.tally.add(took);
        }
        (caps.tx, result, left)
    }

    /// A captured event: what it got from `tape`, what it emitted and came to.
    fn captured(&self, event: &Event, tape: &Tape, (_, result, left): &Invoked) -> crate::capture::Capture {
        use crate::capture::{CapturedEmit, CapturedEvent, Outcome as Came};
        crate::capture::Capture {
            handler: self.handler.settings().name.clone(),
            version: self.handler.version(),
            captured_at: chrono::Utc::now().to_rfc3339(),
            event: CapturedEvent::of(event),
            recorded: tape.take().0,
            emits: left.emit.iter().map(CapturedEmit::of).collect(),
            outcome: result.as_ref().map_or_else(Came::failed, |_| Came::ok()),
        }
    }
}

/// How an event is invoked: its attempt, in a batch or alone, whether
/// it has a dedup row (claimed, not unguarded), and whether on a fresh
/// instance whatever the handler keeps (after a trap on a kept one).
#[derive(Debug, Clone, Copy)]
struct Run {
    attempt: u32,
    batched: bool,
    guarded: bool,
    fresh: bool,
}

impl Run {
    /// An event run alone, first on a kept instance if one is idle.
    fn alone(attempt: u32) -> Self {
        Self { attempt, batched: false, guarded: true, fresh: false }
    }
}

/// What an invocation hands back: the transaction (or its share), its
/// result, and what its capabilities left (for the commit, or for `idem
/// test` to show).
type Invoked = (Lent, Result<Outcome, ExecError>, Left);

/// The transaction back from an invocation that held it whole. It always
/// is: only a batch shares one, and it takes its own back.
fn taken_back(lent: Lent) -> Result<EventTx, ExecError> {
    lent.into_whole().ok_or_else(|| ExecError::Infrastructure("the transaction was still lent out".into()))
}
