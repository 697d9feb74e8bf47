//! The composition root of `idem run`, as a binary's `main` is in
//! mini-redis: [`run`] starts what serves beside the consumers (the admin
//! API with telemetry, the module watcher, retention) and one pipeline per
//! handler, supervises them (a shutdown, progress), and stops them all. No
//! handler's failure stops the others or the host: each is that handler's
//! incident (`pipeline::incident`). The pipeline only consumes; `startup` checks everything before
//! anything starts, and `cli` is the command line over both.

pub mod cli;
pub mod loading;
pub mod startup;
pub mod trial;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::watch;

use crate::modules::Slot;
use crate::pipeline::{Pipeline, Stopping, Wiring};
use crate::stats::{HandlerReport, Stats};
use crate::telemetry::{HandlerTelemetry, Telemetry};
use startup::Prepared;

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

/// Runs every handler until `shutdown` resolves (or, with
/// `exit_when_drained`, until all are drained), then finishes in-flight
/// events, commits and returns each handler's counters.
pub async fn run(
    mut prepared: Prepared,
    options: RunOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<Vec<HandlerReport>> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let slots: Vec<Arc<Slot>> = prepared.handlers.iter().map(|h| h.slot.clone()).collect();
    let counted = counting(&slots);
    let telemetry = Telemetry::new(prepared.pool.clone());
    // Bound before anything consumes: a taken port fails start-up.
    let producers = crate::outbox::producers(&prepared.config);
    let admin = crate::admin::Admin::bind(
        &prepared.config.admin,
        producers,
        prepared.pool.clone(),
        slots.clone(),
        telemetry.clone(),
    )
    .await?;
    // Held until every consumer is closed: an automatic identity's slot.
    let identity =
        crate::identity::Identity::resolve(&prepared.config.kafka.instance_id)?.with_secret(&prepared.pool).await?;
    // Read before any consumer polls: a paused partition never runs a record.
    let pauses = crate::pipeline::pauses::follow(prepared.pool.clone(), stop_rx.clone()).await?;
    let host = host_name(&identity);
    let rewinds = crate::pipeline::rewinds::follow(prepared.pool.clone(), stop_rx.clone(), host.clone()).await?;
    // Every consumer is made and subscribed before any polls, so a
    // failure here leaves nothing running behind.
    let handlers = std::mem::take(&mut prepared.handlers);
    let wired =
        Wired { identity: &identity, pauses: &pauses, rewinds: &rewinds, telemetry: &telemetry, options: &options };
    let Built { pipelines, desks, reports } = build(&prepared, handlers, counted, &wired)?;
    // The services start once every handler is registered: the admin API
    // (bound above, so its clients wait in the listen queue meanwhile) then
    // answers `/readyz` with each handler's own state from its first answer.
    let mut services = services(&prepared, slots, admin.map(|a| (a, desks, host.clone())), &stop_rx);
    services.push(fleet(&prepared, host, telemetry.clone(), &stop_rx));
    let (relays, relay_stats) = crate::outbox::start(&prepared.config, &prepared.pool, &stop_rx)?;
    for (producer, stats) in relay_stats {
        telemetry.register_relay(producer, stats);
    }
    services.extend(relays);
    let bound = prepared.config.shutdown.timeout.0;
    let threads: Vec<_> = pipelines
        .into_iter()
        .map(|pipeline| {
            // A little under the whole: the process exits after the loops.
            let how =
                Stopping { timeout: bound.saturating_sub(Duration::from_millis(300)), leave: options.leave.clone() };
            pipeline.spawn(stop_rx.clone(), how)
        })
        .collect();
    let joined = supervise(threads, shutdown, &stop_tx, &reports).await;
    let _ = stop_tx.send(true);
    drop(identity);
    stop_services(services).await;
    for result in joined {
        result.context("a polling thread panicked")?;
    }
    Ok(reports.iter().map(|(name, stats)| stats.report(name)).collect())
}

/// What every handler's pipeline is wired to.
struct Wired<'a> {
    identity: &'a crate::identity::Identity,
    pauses: &'a crate::pipeline::pauses::Pauses,
    rewinds: &'a crate::pipeline::rewinds::Rewinds,
    telemetry: &'a Arc<Telemetry>,
    options: &'a RunOptions,
}

/// Every handler's pipeline, made and subscribed (none polls yet), with its
/// DLQ desk, and each handler's counters by name.
struct Built {
    pipelines: Vec<Pipeline>,
    desks: Vec<crate::pipeline::replay::Desk>,
    reports: Vec<(String, Arc<Stats>)>,
}

fn build(
    prepared: &Prepared,
    handlers: Vec<crate::pipeline::PreparedHandler>,
    counted: Vec<Arc<Stats>>,
    wired: &Wired<'_>,
) -> anyhow::Result<Built> {
    let mut built = Built { pipelines: Vec::new(), desks: Vec::new(), reports: Vec::new() };
    let shared_config = Arc::new(prepared.config.clone());
    for (handler, stats) in handlers.into_iter().zip(counted) {
        let name = handler.config.name.clone();
        built.reports.push((name.clone(), stats.clone()));
        // See `identity`: an automatic identity only under the classic protocol.
        let kip848 = handler.config.group_protocol == crate::config::GroupProtocol::Consumer;
        let instance = if kip848 && wired.identity.automatic() { None } else { wired.identity.instance_id(&name) };
        let wiring = Wiring {
            idem_pool: prepared.pool.clone(),
            stats: stats.clone(),
            instance,
            watch_drain: wired.options.exit_when_drained,
            pauses: wired.pauses.clone(),
            rewinds: wired.rewinds.clone(),
        };
        let pipeline = Pipeline::new(&prepared.config, handler, wiring)?;
        built.desks.push(pipeline.desk(&shared_config));
        let tap = Arc::new(pipeline.tap());
        let throttles = pipeline.slot().executor().throttles().clone();
        wired.telemetry.register(HandlerTelemetry { name, stats, slot: pipeline.slot(), tap, throttles });
        built.pipelines.push(pipeline);
    }
    Ok(built)
}

/// The services stop on the stop signal too; one still busy (a retention
/// pass mid-statement) is cut off rather than let hold the exit.
async fn stop_services(services: Vec<tokio::task::JoinHandle<()>>) {
    for mut service in services {
        if tokio::time::timeout(Duration::from_secs(1), &mut service).await.is_err() {
            service.abort();
        }
    }
}

/// This host's name in the fleet and the audit trail: its
/// static-membership identity (stable across restarts), else the machine's
/// name and this process's id.
fn host_name(identity: &crate::identity::Identity) -> String {
    identity.name.clone().unwrap_or_else(|| {
        let machine = crate::identity::hostname().unwrap_or_else(|| "unnamed".into());
        format!("{machine}:{}", std::process::id())
    })
}

/// This host in the fleet (`telemetry::fleet`), recorded until `stop`.
fn fleet(
    prepared: &Prepared,
    host: String,
    telemetry: Arc<Telemetry>,
    stop: &watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let me = crate::telemetry::fleet::Member {
        host,
        admin: Some(prepared.config.admin.listen.clone()),
        started_at: chrono::Utc::now(),
    };
    tokio::spawn(crate::telemetry::fleet::serve(prepared.pool.clone(), me, telemetry, stop.clone()))
}

/// Each handler's counters, counting from now: before anything may swap a
/// slot's executor (the module watcher), so no version runs uncounted.
fn counting(slots: &[Arc<Slot>]) -> Vec<Arc<Stats>> {
    slots
        .iter()
        .map(|slot| {
            let stats = Arc::new(Stats::default());
            slot.count_into(stats.clone());
            stats
        })
        .collect()
}

/// What serves beside the consumers, each a task that ends on `stop`.
fn services(
    prepared: &Prepared,
    slots: Vec<Arc<Slot>>,
    admin: Option<(crate::admin::Admin, Vec<crate::pipeline::replay::Desk>, String)>,
    stop: &watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut services = Vec::new();
    if !crate::pipeline::no_module_watch() {
        services.push(tokio::spawn(crate::modules::watch::follow_activations(
            prepared.pool.clone(),
            slots,
            stop.clone(),
        )));
    }
    if let Some((admin, desks, host)) = admin {
        services.push(tokio::spawn(admin.serve(host, stop.clone(), desks)));
    }
    let config = prepared.config.clone();
    services.push(tokio::spawn(async move {
        for warning in crate::retention::topic::warnings(&config).await {
            tracing::warn!("{warning}");
        }
    }));
    // Start-up ran the first pass (see `startup`).
    let maintenance = crate::retention::Maintenance::new(prepared.pool.clone(), prepared.config.retention.clone());
    services.push(tokio::spawn(maintenance.run_after(prepared.config.retention.interval.0, stop.clone())));
    services
}

/// Waits for every polling thread to end, stopping them all on `shutdown`
/// and logging progress meanwhile.
async fn supervise(
    threads: Vec<tokio::task::JoinHandle<()>>,
    shutdown: impl std::future::Future<Output = ()>,
    stop_tx: &watch::Sender<bool>,
    reports: &[(String, Arc<Stats>)],
) -> Vec<Result<(), tokio::task::JoinError>> {
    let all = futures::future::join_all(threads);
    tokio::pin!(all, shutdown);
    let mut stopping = false;
    let mut log_every = tokio::time::interval(Duration::from_secs(30));
    log_every.tick().await;
    loop {
        tokio::select! {
            joined = &mut all => return joined,
            () = &mut shutdown, if !stopping => {
                tracing::info!("shutting down: finishing in-flight events");
                stopping = true;
                let _ = stop_tx.send(true);
            }
            _ = log_every.tick() => {
                for (name, stats) in reports {
                    tracing::info!(report = ?stats.report(name), "progress");
                }
            }
        }
    }
}
