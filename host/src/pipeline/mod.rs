//! `idem run`: for each handler, a Kafka consumer in its group feeding
//! per-partition workers that validate, execute and resolve records in
//! offset order; offsets are committed only for records whose transaction
//! committed (or that were skipped), never ahead of them.

mod attempts;
mod audit;
mod combine;
mod consumer;
pub mod dlq;
mod ends;
mod faults;
mod follow;
mod incident;
mod partition;
pub mod pauses;
mod polling;
pub mod quarantine;
pub mod replay;
pub mod rewinds;
pub(crate) mod schemas_seen;
pub mod throttles;
mod shutdown;
mod stall;
mod window;
mod worker;

pub(crate) use dlq::DeadLetters;
#[cfg(feature = "test-hooks")]
pub use dlq::headers as dlq_headers;
pub use dlq::seal::Keys as DlqKeys;
pub(crate) use faults::no_module_watch;
pub(crate) use polling::Stopping;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rdkafka::consumer::BaseConsumer;
use tokio::sync::{Semaphore, watch};

use crate::config::{Config, HandlerConfig};
use crate::kafka_client::ProbeContext;
use crate::modules::Slot;
use crate::stats::Stats;
use crate::telemetry::PartitionView;
use crate::validate::Validator;
use consumer::IdemContext;

/// A read-only view of one handler's consumer, for metrics and readiness.
#[derive(Clone)]
pub(crate) struct HandlerTap {
    context: Arc<IdemContext>,
}

impl crate::telemetry::ConsumerView for HandlerTap {
    fn joined(&self) -> bool {
        self.context.joined.load(Ordering::SeqCst)
    }

    fn partitions(&self) -> Vec<PartitionView> {
        let states = self.context.states();
        let watermarks = self.context.watermarks.lock().unwrap_or_else(|e| e.into_inner()).clone();
        watermarks
            .into_iter()
            .map(|((topic, partition), high_watermark)| {
                let state = states.iter().find(|s| s.topic == topic && s.partition == partition);
                PartitionView {
                    assigned: state.is_some(),
                    position: state.and_then(|s| s.tracker().position().or(s.start().committed.flatten())),
                    paused: state.is_some_and(|s| s.paused.load(Ordering::SeqCst)),
                    held: state.is_some_and(|s| s.is_held()),
                    queued: state.map_or(0, |s| s.queued.load(Ordering::SeqCst)),
                    topic,
                    partition,
                    high_watermark,
                }
            })
            .collect()
    }
}

/// What one handler's pipeline shares between its polling thread and its
/// partition workers.
pub(crate) struct HandlerContext {
    pub name: String,
    /// The handler's current executor (swapped when a version is activated).
    pub slot: Arc<Slot>,
    pub validator: Validator,
    /// Executions at once (`concurrency`): each holds one of the handler's
    /// connections.
    pub permits: Arc<Semaphore>,
    /// Batches waiting for a permit, merged by whoever gets one.
    pub combiner: combine::Combiner,
    /// Retries, backoffs, the DLQ topic.
    pub config: HandlerConfig,
    /// `None`: `on_failure = "block"`.
    pub dead_letters: Option<DeadLetters>,
    /// idem's own pool: execution counts that outlive the process.
    pub idem_pool: sqlx::PgPool,
    /// The same role, for the batches' marks (`attempts::marks_pool`).
    pub marks: sqlx::PgPool,
    /// Held by an execution of a partition that has processed nothing yet
    /// in its assignment (see `attempts`).
    pub unproven: tokio::sync::Mutex<()>,
    pub stats: Arc<Stats>,
    /// Operators' pauses, as this host last read them.
    pub pauses: pauses::Pauses,
    /// Operators' rewinds pending, as this host last read them.
    pub rewinds: rewinds::Rewinds,
    /// The keys parked in the handler's quarantine, as this host knows them.
    pub quarantine: quarantine::Quarantine,
    /// An incident a worker reported, for the polling thread to act on.
    incident: incident::Reported,
    /// The crash tests' fault points (`faults.rs`; none without the
    /// `test-hooks` feature).
    faults: faults::FaultPoints,
}

impl HandlerContext {
    /// Reports an incident of this handler (see `incident`): its
    /// consumer is made again; no other handler stops.
    pub(crate) fn incident(&self, kind: crate::stats::IncidentKind, account: String) {
        tracing::error!(handler = %self.name, kind = kind.as_str(), "incident: {account}");
        self.incident.report(kind, account);
    }

    /// The incident a worker reported, if any, once.
    pub(crate) fn taken_incident(&self) -> Option<(crate::stats::IncidentKind, String)> {
        self.incident.take()
    }

    pub(crate) fn abort_point(&self, payload: &str) {
        self.faults.before(payload);
    }

    pub(crate) fn mid_batch_point(&self, ran: &str) {
        self.faults.after_in_batch(ran);
    }

    pub(crate) fn fault_point(&self) {
        self.faults.committed();
    }
}

/// One handler, checked and ready (by `app::startup`): what its pipeline
/// is made of.
pub struct PreparedHandler {
    pub config: HandlerConfig,
    /// Its executor, swapped when another module version is activated.
    pub slot: Arc<Slot>,
    pub validator: Validator,
    /// Its dead-letter topic's producer (`on_failure = "dlq"`).
    pub(crate) dead_letters: Option<DeadLetters>,
}

/// One handler's pipeline: its consumer made and subscribed, not yet polling.
pub(crate) struct Pipeline {
    config: HandlerConfig,
    slot: Arc<Slot>,
    recipe: polling::Recipe,
    consumer: consumer::HandlerConsumer,
    /// What the console's replays run records through.
    shared: Arc<HandlerContext>,
    /// A group-less client for the drain watcher (`exit_when_drained`).
    probe: Option<BaseConsumer<ProbeContext>>,
}

/// What a pipeline reports to the process it runs in.
pub(crate) struct Wiring {
    /// idem's own pool: execution counts that outlive the process.
    pub idem_pool: sqlx::PgPool,
    pub stats: Arc<Stats>,
    /// The consumer's `group.instance.id` (`None`: dynamic membership).
    pub instance: Option<String>,
    /// Watch for the end of every assigned partition.
    pub watch_drain: bool,
    /// Operators' pauses, as this host last read them.
    pub pauses: pauses::Pauses,
    /// Operators' rewinds pending, as this host last read them.
    pub rewinds: rewinds::Rewinds,
}

impl Pipeline {
    /// Makes `handler`'s consumer and subscribes it; nothing polls yet, so
    /// a failure here leaves nothing running.
    pub(crate) fn new(kafka: &Config, handler: PreparedHandler, wiring: Wiring) -> anyhow::Result<Self> {
        let PreparedHandler { config, slot, validator, dead_letters } = handler;
        let shared = Arc::new(HandlerContext {
            name: config.name.clone(),
            slot: slot.clone(),
            validator,
            permits: Arc::new(Semaphore::new(config.concurrency)),
            combiner: combine::Combiner::default(),
            config: config.clone(),
            dead_letters,
            stats: wiring.stats,
            pauses: wiring.pauses,
            quarantine: quarantine::Quarantine::new(&config, wiring.rewinds.host().to_owned()),
            rewinds: wiring.rewinds,
            incident: incident::Reported::default(),
            faults: faults::FaultPoints::from_env(),
            marks: attempts::marks_pool(&wiring.idem_pool),
            idem_pool: wiring.idem_pool,
            unproven: tokio::sync::Mutex::new(()),
        });
        let recipe = polling::Recipe::new(kafka, &config, wiring.instance, shared.clone())?;
        let consumer = recipe.make()?;
        let probe = if wiring.watch_drain { Some(crate::kafka_client::probe(kafka, Some(&config))?) } else { None };
        tracing::info!(
            handler = %config.name, topic = %config.topic, group = %config.group_id, instance = ?recipe.instance,
            ordering = config.ordering.as_str(), lanes = config.lanes(), "consuming"
        );
        if config.lanes() as usize > config.concurrency {
            tracing::warn!(
                handler = %config.name,
                "ordering = \"{}\" gives each partition {} lanes, but concurrency = {} bounds the executions at once \
                 over all of them: raise concurrency for the lanes to run side by side",
                config.ordering.as_str(), config.lanes(), config.concurrency
            );
        }
        Ok(Self { config, slot, recipe, consumer, shared, probe })
    }

    /// The handler's slot (its current executor).
    pub(crate) fn slot(&self) -> Arc<Slot> {
        self.slot.clone()
    }

    /// The console's desk for this handler's dead letters: it replays them
    /// through this pipeline's executor, validator and DLQ.
    pub(crate) fn desk(&self, config: &Arc<Config>) -> replay::Desk {
        replay::Desk::new(config.clone(), self.shared.clone())
    }

    /// What telemetry reads of this pipeline's consumer.
    pub(crate) fn tap(&self) -> HandlerTap {
        HandlerTap { context: self.recipe.context.clone() }
    }

    /// Polls on a thread of its own until `stop` (or, with a drain
    /// watcher, until drained), then closes as `how` says.
    pub(crate) fn spawn(self, stop: watch::Receiver<bool>, how: Stopping) -> tokio::task::JoinHandle<()> {
        let Self { config, recipe, consumer, probe, shared, .. } = self;
        follow_throttles(&shared, &stop);
        let seen = shared.validator.reads_registry().then(|| (shared.clone(), tokio::spawn(schemas_seen::record(shared.clone()))));
        if shared.config.audit.enabled {
            audit::spawn(shared.clone(), recipe.probe.clone(), recipe.context.clone(), stop.clone());
        }
        if shared.quarantine.on() {
            quarantine::spawn(shared, stop.clone());
        }
        let drained = Arc::new(AtomicBool::new(false));
        if let Some(probe) = probe {
            let (context, drained, stop) = (recipe.context.clone(), drained.clone(), stop.clone());
            let watcher = std::thread::Builder::new()
                .name(format!("idem-drain-{}", config.name))
                .spawn(move || watch_drained(&context, &probe, &drained, &stop));
            if let Err(e) = watcher {
                // Without the watcher the handler simply runs until stopped.
                tracing::error!(handler = %config.name, "failed to start the drain watcher: {e}");
            }
        }
        let recipe = Arc::new(recipe);
        let (watched, group, stopping) = (recipe.clone(), config.group_id.clone(), stop.clone());
        let watcher = std::thread::Builder::new()
            .name(format!("idem-stall-{}", config.name))
            .spawn(move || polling::watch_stall(&watched, &group, &stopping));
        if let Err(e) = watcher {
            // Without the watcher a stalled consumer goes unnoticed; the handler runs.
            tracing::error!(handler = %config.name, "failed to start the stall watcher: {e}");
        }
        let polling = tokio::task::spawn_blocking(move || polling::poll_loop(&recipe, consumer, stop, &drained, how));
        let Some((shared, seen)) = seen else { return polling };
        // The schema ids' last pass ends before the pipeline does.
        tokio::spawn(async move {
            let polled = polling.await;
            seen.abort();
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), schemas_seen::last_pass(&shared)).await;
            if let Err(e) = polled
                && e.is_panic()
            {
                std::panic::resume_unwind(e.into_panic());
            }
        })
    }
}

/// Switches the handler to the store's active module version after a claim
/// on `failed` (the version that claim named) was refused; true if the
/// handler now runs another version, so the work can run again at once.
pub(crate) async fn switch_module(shared: &HandlerContext, failed: Option<i32>) -> bool {
    // A canary ended (rolled back, aborted, promoted): its events run again
    // on whatever the store says now.
    if failed.is_some() && shared.slot.canary().is_some_and(|c| Some(c.version()) == failed) {
        if let Err(e) = shared.slot.refresh_canary(&shared.idem_pool).await {
            tracing::warn!(handler = %shared.name, "cannot follow the canary: {e:#}");
        }
        return shared.slot.canary().is_none_or(|c| Some(c.version()) != failed);
    }
    if shared.slot.version() != failed {
        // Another task (the watcher, a sibling partition) switched already.
        return true;
    }
    match shared.slot.refresh(&shared.idem_pool).await {
        Ok(now) => now != failed,
        Err(e) => {
            tracing::error!(handler = %shared.name, "cannot switch to the active module version: {e:#}");
            false
        }
    }
}

/// Applies the operators' rates for the handler (`throttles`) from now
/// until `stop`; a first reading that fails is tried again each second.
fn follow_throttles(shared: &HandlerContext, stop: &watch::Receiver<bool>) {
    let (pool, name, stop) = (shared.idem_pool.clone(), shared.name.clone(), stop.clone());
    let limits = shared.slot.executor().throttles().clone();
    tokio::spawn(async move {
        for attempt in 0u32.. {
            match throttles::follow(pool.clone(), stop.clone(), name.clone(), limits.clone()).await {
                Ok(()) => return,
                Err(e) if attempt == 0 => tracing::warn!(handler = %name, "{e:#} (trying again each second)"),
                Err(_) => {}
            }
            if *stop.borrow() {
                return;
            }
            tokio::time::sleep(follow::REFRESH).await;
        }
    });
}

/// Sets `drained` once every assigned partition is resolved to its end.
fn watch_drained(
    context: &IdemContext,
    probe: &BaseConsumer<ProbeContext>,
    drained: &AtomicBool,
    stop: &watch::Receiver<bool>,
) {
    while !*stop.borrow() {
        std::thread::sleep(Duration::from_millis(300));
        if context.drained(probe) {
            drained.store(true, Ordering::SeqCst);
            return;
        }
    }
}
