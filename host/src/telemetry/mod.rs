//! What an operator sees without reading logs: `/metrics` (Prometheus text
//! format), `/healthz` and `/readyz`, served on the admin listener (see
//! `admin`); `idem status` reads `/metrics` (`admin::client::status`).
//!
//! Nothing here is on the events' path: the pipeline counts into each
//! handler's `Stats` (relaxed atomics, lock-free histograms) and the
//! partitions' own state; a scrape reads them.

pub mod fleet;
mod listener;
mod process;
mod render;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgPool;

use crate::stats::Stats;
pub use listener::{ListenerStats, Refused};

/// What a scrape reads of a handler's consumer; the pipeline implements it,
/// so telemetry knows nothing of the pipeline's types.
pub(crate) trait ConsumerView: Send + Sync {
    /// Whether the consumer is in its group (it has had an assignment).
    fn joined(&self) -> bool;
    /// Every partition ever assigned to the consumer, the revoked ones with
    /// `assigned: false`.
    fn partitions(&self) -> Vec<PartitionView>;
}

/// What a scrape reads of a handler's module slot; `modules` implements
/// it, so telemetry knows nothing of modules and executors.
pub trait ModuleView: Send + Sync {
    /// The active module version (`None`: the config's own component).
    fn version(&self) -> Option<i32>;
    /// The pool of the handler's database role.
    fn pool(&self) -> PgPool;
    /// Events resolved per version since the process started.
    fn counts(&self) -> std::collections::BTreeMap<i32, crate::stats::VersionCounts>;
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
    /// Fetching is paused: the queue is full, or an operator paused it.
    pub paused: bool,
    /// An operator paused it (`pipeline::pauses`): nothing of it runs.
    pub held: bool,
    pub queued: usize,
}

/// Everything a scrape reads, shared by the pipelines and the admin API.
#[derive(Debug)]
pub struct Telemetry {
    /// idem's own pool: readiness probes it.
    pool: PgPool,
    handlers: Mutex<Vec<Arc<HandlerTelemetry>>>,
    /// Each outbox producer's relay on this host.
    relays: Mutex<Vec<(String, Arc<crate::stats::RelayStats>)>>,
    /// The last database probe and when it ran: probes answer anyone, so
    /// at most one runs at a time and its answer serves for [`PROBE_FOR`].
    probe: tokio::sync::Mutex<Option<(std::time::Instant, Option<&'static str>)>>,
    /// The admin listener's connections, refusals and timeouts.
    listener: ListenerStats,
}

/// How long one database probe answers `/readyz`.
const PROBE_FOR: Duration = Duration::from_secs(1);

/// One handler, as the pipeline registers it.
pub struct HandlerTelemetry {
    pub name: String,
    pub stats: Arc<Stats>,
    /// Its module slot: the version running, its pool, counts per version.
    pub slot: Arc<dyn ModuleView>,
    /// Its consumer's partitions and group state.
    pub(crate) tap: Arc<dyn ConsumerView>,
    /// Its rates on this host (events, destinations) and their waits.
    pub throttles: Arc<crate::throttle::Throttles>,
}

/// The ledger audit's figures on this host (`pipeline::audit`).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(crate) struct AuditFigures {
    /// Records accounted for.
    pub checked: u64,
    /// Records nothing accounts for (each counted once).
    pub unaccounted: u64,
    /// When the last sweep that found none ended, in Unix seconds (`None`:
    /// none yet).
    pub clean_at: Option<u64>,
    /// Emitted rows unpublished 10 minutes after their commit, as the last
    /// sweep counted them.
    pub unpublished: u64,
}

impl HandlerTelemetry {
    pub(crate) fn audit(&self) -> AuditFigures {
        use std::sync::atomic::Ordering::Relaxed;
        let clean_at = self.stats.audit_clean_at.load(Relaxed);
        AuditFigures {
            checked: self.stats.audit_checked.load(Relaxed),
            unaccounted: self.stats.audit_unaccounted.load(Relaxed),
            clean_at: (clean_at > 0).then_some(clean_at),
            unpublished: self.stats.audit_unpublished.load(Relaxed),
        }
    }
}

impl std::fmt::Debug for HandlerTelemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerTelemetry").field("name", &self.name).finish_non_exhaustive()
    }
}

impl Telemetry {
    pub fn new(pool: PgPool) -> Arc<Self> {
        Arc::new(Self {
            pool,
            handlers: Mutex::default(),
            relays: Mutex::default(),
            probe: tokio::sync::Mutex::default(),
            listener: ListenerStats::default(),
        })
    }

    pub(crate) fn register(&self, handler: HandlerTelemetry) {
        self.handlers.lock().unwrap_or_else(|e| e.into_inner()).push(Arc::new(handler));
    }

    pub(crate) fn register_relay(&self, producer: String, stats: Arc<crate::stats::RelayStats>) {
        self.relays.lock().unwrap_or_else(|e| e.into_inner()).push((producer, stats));
    }

    pub(crate) fn handlers(&self) -> Vec<Arc<HandlerTelemetry>> {
        self.handlers.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The Prometheus text exposition (format 0.0.4) of every metric.
    pub fn render(&self) -> String {
        let relays = self.relays.lock().unwrap_or_else(|e| e.into_inner()).clone();
        render::render(&self.handlers(), &relays, &self.pool, &self.listener)
    }

    pub fn listener(&self) -> &ListenerStats {
        &self.listener
    }

    /// Why this host is not ready to take traffic; empty when it is: the
    /// database answers, idem's migrations are applied, and every handler's
    /// consumer has joined its group. The reasons are fixed phrases (they
    /// answer callers without a token); the database's own error is logged.
    pub async fn not_ready(&self) -> Vec<String> {
        // The consumers' state as the request found it, before the database
        // probe (which may take a connection's time): the answer describes
        // one moment, not a join that completed while the probe ran.
        let handlers = self.handlers();
        let mut consumers = Vec::new();
        if handlers.is_empty() {
            consumers.push("no handler is consuming yet".to_owned());
        }
        for h in handlers {
            if let Some(kind) = h.stats.incidents.current() {
                consumers.push(format!(
                    "handler `{}`: in an incident ({}): its consumer is being made again (see the log)",
                    h.name,
                    kind.as_str()
                ));
            } else if !h.tap.joined() {
                consumers.push(format!("handler `{}`: its consumer has not joined its group", h.name));
            }
            if h.stats.registry_waiting.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                consumers.push(format!(
                    "handler `{}`: the schema registry does not answer: its records wait (see the log)",
                    h.name
                ));
            }
        }
        let mut reasons: Vec<String> = self.database_problem().await.map(str::to_owned).into_iter().collect();
        reasons.extend(consumers);
        reasons
    }

    /// The database's state, probed at most once per [`PROBE_FOR`].
    async fn database_problem(&self) -> Option<&'static str> {
        let mut last = self.probe.lock().await;
        if let Some((at, problem)) = *last
            && at.elapsed() < PROBE_FOR
        {
            return problem;
        }
        let problem = match tokio::time::timeout(Duration::from_secs(2), crate::schema::applied(&self.pool)).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => {
                tracing::warn!("readiness: the database check failed: {e:#}");
                Some(match e {
                    crate::schema::Unfit::TooOld { .. } => "database: its schema requires a newer idem (see the log)",
                    _ => "database: unreachable, or idem's migrations are not applied",
                })
            }
            Err(_) => Some("database: no answer within 2 s"),
        };
        *last = Some((std::time::Instant::now(), problem));
        problem
    }
}
