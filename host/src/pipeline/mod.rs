//! `idem run`: for each handler, a Kafka consumer in its group feeding
//! per-partition workers that validate, execute and resolve records in
//! offset order; offsets are committed only for records whose transaction
//! committed (or that were skipped), never ahead of them.

mod attempts;
mod batch;
mod consumer;
pub mod dlq;
mod faults;
mod final_failure;
mod partition;
mod polling;
pub mod replay;
mod shutdown;

pub(crate) use dlq::DeadLetters;
pub use dlq::headers as dlq_headers;
pub use dlq::seal::Keys as DlqKeys;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use rdkafka::consumer::BaseConsumer;
use tokio::sync::{Semaphore, mpsc, watch};

use crate::config::{Config, HandlerConfig};
use crate::kafka_client::ProbeContext;
use crate::modules::Slot;
use crate::startup::Prepared;
use crate::stats::{HandlerReport, Stats};
use crate::validate::Validator;
use consumer::IdemContext;

/// A read-only view of one handler's consumer, for metrics and readiness.
#[derive(Clone)]
pub(crate) struct HandlerTap {
    context: Arc<IdemContext>,
}

/// One partition as a scrape sees it.
#[derive(Debug, Clone)]
pub(crate) struct PartitionView {
    pub topic: String,
    pub partition: i32,
    pub assigned: bool,
    /// The position idem commits (the next offset to process): every
    /// record before it is resolved.
    pub position: Option<i64>,
    /// The partition's end as librdkafka's statistics last said: the last
    /// stable offset under read_committed (librdkafka's default), else the
    /// high watermark (-1: unknown).
    pub high_watermark: i64,
    pub paused: bool,
    pub queued: usize,
}

impl HandlerTap {
    pub(crate) fn joined(&self) -> bool {
        self.context.joined.load(Ordering::SeqCst)
    }

    /// Every partition ever assigned to this consumer, the revoked ones
    /// with `assigned: false`.
    pub(crate) fn partitions(&self) -> Vec<PartitionView> {
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
                    queued: state.map_or(0, |s| s.queued.load(Ordering::SeqCst)),
                    topic,
                    partition,
                    high_watermark,
                }
            })
            .collect()
    }
}

/// How `run` behaves beyond the config file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Stop by itself once every assigned partition is consumed to its end
    /// and committed (the demo and tests use it).
    pub exit_when_drained: bool,
    /// Set before `shutdown` resolves: leave the consumer groups rather
    /// than keep the static membership for a restart (scale-in; `idem run`
    /// sets it on SIGUSR1). A drained run always leaves.
    pub leave: Arc<AtomicBool>,
}

/// What one handler's pipeline shares between its polling thread and its
/// partition workers.
pub(crate) struct Shared {
    pub name: String,
    /// The handler's current executor (swapped when a version is activated).
    pub slot: Arc<Slot>,
    pub validator: Validator,
    /// Partitions processed at once (`concurrency`).
    pub permits: Semaphore,
    /// Retries, backoffs, the DLQ topic.
    pub config: HandlerConfig,
    /// `None`: `on_failure = "block"`.
    pub dead_letters: Option<DeadLetters>,
    /// idem's own pool: execution counts that outlive the process.
    pub idem_pool: sqlx::PgPool,
    /// Held by an execution of a partition that has processed nothing yet
    /// in its assignment (see `attempts`).
    pub unproven: tokio::sync::Mutex<()>,
    pub stats: Arc<Stats>,
    fatal: mpsc::UnboundedSender<String>,
    /// The crash tests' fault points (`faults.rs`; none without the
    /// `test-hooks` feature).
    faults: faults::FaultPoints,
}

impl Shared {
    pub(crate) fn fatal(&self, message: String) {
        let _ = self.fatal.send(message);
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

/// Runs every handler until `shutdown` resolves (or, with
/// `exit_when_drained`, until all are drained), then finishes in-flight
/// events, commits and returns each handler's counters. A fatal error stops
/// every handler and is returned.
pub async fn run(
    prepared: Prepared,
    options: RunOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<Vec<HandlerReport>> {
    let (stop_tx, stop_rx) = watch::channel(false);
    // Bound before anything consumes: a taken port fails start-up.
    let slots: Vec<Arc<Slot>> = prepared.handlers.iter().map(|h| h.slot.clone()).collect();
    // Counting starts before anything may swap a slot's executor (the
    // module watcher), so no version runs uncounted.
    let mut counted: Vec<Arc<Stats>> = Vec::new();
    for slot in &slots {
        let stats = Arc::new(Stats::default());
        slot.count_into(stats.clone());
        counted.push(stats);
    }
    let telemetry = crate::telemetry::Telemetry::new(prepared.pool.clone());
    let admin =
        crate::admin::Admin::bind(&prepared.config.admin, prepared.pool.clone(), slots.clone(), telemetry.clone())
            .await?;
    let mut services = Vec::new();
    // Test-only (`IDEM_TEST_NO_MODULE_WATCH`): a host that hears of no
    // activation, as one whose notifications and polls were lost would.
    if std::env::var_os("IDEM_TEST_NO_MODULE_WATCH").is_none() {
        services.push(tokio::spawn(crate::modules::watch::run(prepared.pool.clone(), slots, stop_rx.clone())));
    }
    if let Some(admin) = admin {
        services.push(tokio::spawn(admin.serve(stop_rx.clone())));
    }
    let config = prepared.config.clone();
    services.push(tokio::spawn(async move {
        for warning in crate::retention::topic::warnings(&config).await {
            tracing::warn!("{warning}");
        }
    }));
    // Start-up ran the first pass (see `startup`).
    let maintenance = crate::retention::Maintenance::new(prepared.pool.clone(), prepared.config.retention.clone());
    services.push(tokio::spawn(maintenance.run_after(prepared.config.retention.interval.0, stop_rx.clone())));
    let (fatal_tx, mut fatal_rx) = mpsc::unbounded_channel();
    // Held until every consumer is closed: an automatic identity's slot.
    let identity = crate::identity::Identity::resolve(&prepared.config.kafka.instance_id)?;
    // Every consumer is created and subscribed before any thread starts, so
    // a failure here leaves nothing running behind.
    let mut all_stats = Vec::new();
    let mut pipelines = Vec::new();
    for (handler, stats) in prepared.handlers.into_iter().zip(counted) {
        let crate::startup::PreparedHandler { config, slot, validator, dead_letters } = handler;
        all_stats.push((config.name.clone(), stats.clone()));
        let shared = Arc::new(Shared {
            name: config.name.clone(),
            slot: slot.clone(),
            validator,
            permits: Semaphore::new(config.concurrency),
            config: config.clone(),
            dead_letters,
            stats,
            fatal: fatal_tx.clone(),
            faults: faults::FaultPoints::from_env(),
            idem_pool: prepared.pool.clone(),
            unproven: tokio::sync::Mutex::new(()),
        });
        // See `identity`: an automatic identity only under the classic protocol.
        let kip848 = config.group_protocol == crate::config::GroupProtocol::Consumer;
        let instance = if kip848 && identity.automatic() { None } else { identity.instance_id(&config.name) };
        let recipe = polling::Recipe::new(&prepared.config, &config, instance, shared.clone())?;
        let consumer = recipe.make()?;
        telemetry.register(crate::telemetry::HandlerTelemetry {
            name: config.name.clone(),
            stats: shared.stats.clone(),
            slot,
            tap: HandlerTap { context: recipe.context.clone() },
        });
        let probe = if options.exit_when_drained { Some(probe_client(&prepared.config, Some(&config))?) } else { None };
        tracing::info!(
            handler = %config.name, topic = %config.topic, group = %config.group_id, instance = ?recipe.instance,
            "consuming"
        );
        pipelines.push((config, recipe, consumer, probe));
    }
    let shutdown_bound = prepared.config.shutdown.timeout.0;
    let mut threads = Vec::new();
    for (config, recipe, consumer, probe) in pipelines {
        let drained = Arc::new(AtomicBool::new(false));
        if let Some(probe) = probe {
            let (context, drained, stop) = (recipe.context.clone(), drained.clone(), stop_rx.clone());
            let watcher = std::thread::Builder::new()
                .name(format!("idem-drain-{}", config.name))
                .spawn(move || watch_drained(&context, &probe, &drained, &stop));
            if let Err(e) = watcher {
                // Without the watcher the handler simply runs until stopped.
                tracing::error!(handler = %config.name, "failed to start the drain watcher: {e}");
            }
        }
        let stop = stop_rx.clone();
        let how = polling::Stopping {
            // A little under the whole: the process exits after the loops.
            timeout: shutdown_bound.saturating_sub(Duration::from_millis(300)),
            leave: options.leave.clone(),
        };
        threads.push(tokio::task::spawn_blocking(move || polling::poll_loop(&recipe, consumer, stop, &drained, how)));
    }
    drop(fatal_tx);

    let all = futures::future::join_all(threads);
    tokio::pin!(all, shutdown);
    let mut fatal = None;
    let mut stopping = false;
    let mut log_every = tokio::time::interval(Duration::from_secs(30));
    log_every.tick().await;
    let joined = loop {
        tokio::select! {
            joined = &mut all => break joined,
            () = &mut shutdown, if !stopping => {
                tracing::info!("shutting down: finishing in-flight events");
                stopping = true;
                let _ = stop_tx.send(true);
            }
            Some(message) = fatal_rx.recv(), if fatal.is_none() => {
                fatal = Some(message);
                let _ = stop_tx.send(true);
            }
            _ = log_every.tick() => {
                for (name, stats) in &all_stats {
                    tracing::info!(report = ?stats.report(name), "progress");
                }
            }
        }
    };
    let _ = stop_tx.send(true);
    drop(identity);
    // The services stop on `stop_tx` too; one still busy (a retention pass
    // mid-statement) is cut off rather than let hold the exit.
    for mut service in services {
        if tokio::time::timeout(Duration::from_secs(1), &mut service).await.is_err() {
            service.abort();
        }
    }
    for result in joined {
        result.context("a polling thread panicked")?;
    }
    if let Some(message) = fatal {
        anyhow::bail!("stopped on a fatal error: {message}");
    }
    Ok(all_stats.iter().map(|(name, stats)| stats.report(name)).collect())
}

/// Switches the handler to the store's active module version after a claim
/// on `failed` (the version that claim named) was refused; true if the
/// handler now runs another version, so the work can run again at once.
pub(crate) async fn switch_module(shared: &Shared, failed: Option<i32>) -> bool {
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

/// A group-less client for metadata look-ups off the polling thread, with
/// the handler's own properties (its credentials) when one is given.
pub(crate) fn probe_client(
    config: &Config,
    handler: Option<&HandlerConfig>,
) -> anyhow::Result<BaseConsumer<ProbeContext>> {
    let client = crate::kafka_client::client_config(config, handler, crate::kafka_client::ClientKind::Consumer)?;
    crate::kafka_client::create(&client, ProbeContext::default(), "a Kafka client")
}
