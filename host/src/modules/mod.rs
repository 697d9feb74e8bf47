//! Handler modules: uploaded components, stored and versioned in
//! PostgreSQL ([`store`]), validated before anything is stored
//! ([`Slot::validate`]), and swapped into a running handler between
//! batches ([`Slot`], [`watch`]).
//!
//! A handler whose config names a `component` file seeds version 1 from it
//! when the store has none; from then on the store wins (`idem deploy`
//! uploads the next version). The executor's claim names the version it
//! runs and the database refuses it unless that version is the active one
//! (`idem_api.claim_events`), so a host that has not yet switched never
//! processes an event with a version that was replaced.

pub mod canaries;
mod canary;
mod shadowing;
pub mod store;
pub mod watch;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use sqlx::PgPool;

use crate::executor::{Executor, Outcome};
use crate::runtime::{Handler, LoadError, Runtime};
pub use crate::stats::VersionCounts;

/// Why an upload was refused. Every variant is the uploader's to fix, and
/// nothing was stored.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("the module is {size} bytes; the limit is {limit} (`max_module_mib`)")]
    TooLarge { size: usize, limit: usize },
    #[error("{0}")]
    Invalid(#[from] LoadError),
    #[error("the component cannot be instantiated under the handler's limits: {0}")]
    Instantiation(String),
    #[error("handler `{0}` is native: it has no module to upload")]
    Native(String),
    /// The database failed while checking: nothing is known about the module.
    #[error("the database failed while checking the module: {0}")]
    Unavailable(String),
}

/// How often an active version that failed this host's checks is tried
/// again (a check may fail for a while: an instantiation timeout under load).
const RETRY_FAILED: std::time::Duration = std::time::Duration::from_secs(30);

/// An active version this host could not run, and why.
#[derive(Debug, Clone)]
struct Failed {
    version: i32,
    sha256: String,
    reason: String,
    at: std::time::Instant,
}

/// One handler's current executor, swapped whole when another version is
/// activated. Workers take a clone per batch, so a batch runs on one
/// version from its start to its commit.
pub struct Slot {
    name: String,
    runtime: Runtime,
    current: RwLock<Executor>,
    /// Swaps of this handler, one at a time.
    swapping: tokio::sync::Mutex<()>,
    /// Validations (compilations) of this handler, one at a time.
    validating: tokio::sync::Mutex<()>,
    /// An active version that failed this host's checks: not fetched and
    /// compiled again on every refused claim, only every [`RETRY_FAILED`].
    failed: Mutex<Option<Failed>>,
    counts: Mutex<BTreeMap<i32, VersionCounts>>,
    max_module_bytes: usize,
    /// The handler's shadow version on this host (`shadowing`).
    shadow: RwLock<Option<Arc<crate::shadow::Shadow>>>,
    /// A shadow version that failed this host's checks, as `failed`.
    shadow_failed: Mutex<Option<Failed>>,
    /// The handler's canary on this host (`canary`).
    canary: RwLock<Option<Arc<canary::Canary>>>,
    /// A canary that failed this host's checks, as `failed`.
    canary_failed: Mutex<Option<Failed>>,
    /// Follows of the canary's row, one at a time.
    canary_refresh: tokio::sync::Mutex<()>,
    /// The module (SHA-256) of each version this host ran, active or
    /// canary: what a dead letter names as the module that failed it.
    modules: Mutex<BTreeMap<i32, String>>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("name", &self.name).finish_non_exhaustive()
    }
}

impl Slot {
    pub fn new(runtime: Runtime, executor: Executor, max_module_bytes: usize) -> Arc<Self> {
        let modules = executor.handler().version().map(|v| (v, executor.handler().sha256().to_owned()));
        Arc::new(Self {
            name: executor.handler().settings().name.clone(),
            runtime,
            current: RwLock::new(executor),
            swapping: tokio::sync::Mutex::new(()),
            validating: tokio::sync::Mutex::new(()),
            failed: Mutex::new(None),
            counts: Mutex::new(BTreeMap::new()),
            max_module_bytes,
            shadow: RwLock::new(None),
            shadow_failed: Mutex::new(None),
            canary: RwLock::new(None),
            canary_failed: Mutex::new(None),
            canary_refresh: tokio::sync::Mutex::new(()),
            modules: Mutex::new(modules.into_iter().collect()),
        })
    }

    /// Remembers `handler`'s module as its version's ([`Slot::module_of`]).
    fn remember(&self, handler: &Handler) {
        if let Some(version) = handler.version() {
            let mut modules = self.modules.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            modules.insert(version, handler.sha256().to_owned());
        }
    }

    /// The module (SHA-256) `version` ran here (`None`, or one this host
    /// never ran: the active one's).
    pub fn module_of(&self, version: Option<i32>) -> String {
        let modules = self.modules.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match version.and_then(|v| modules.get(&v)) {
            Some(sha256) => sha256.clone(),
            None => self.executor().handler().sha256().to_owned(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn max_module_bytes(&self) -> usize {
        self.max_module_bytes
    }

    /// The executor to run the next batch or event on.
    pub fn executor(&self) -> Executor {
        match self.current.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The module version running now (`None`: a native handler).
    pub fn version(&self) -> Option<i32> {
        self.executor().handler().version()
    }

    /// Counts an outcome of an execution on `version`: a failure only
    /// when it is the version's own (its handler failed, trapped or
    /// overran), not an outage, a throttle or a refused claim: the canary's
    /// judgement compares these (`canary`).
    pub fn count(&self, version: Option<i32>, outcome: Result<Outcome, &crate::error::ExecError>) {
        use crate::error::ExecError::{HandlerPermanent, HandlerRetryable, TimedOut, Trapped};
        let Some(version) = version else { return };
        let mut counts = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let c = counts.entry(version).or_default();
        match outcome {
            Ok(Outcome::Processed) => c.processed += 1,
            Ok(Outcome::Duplicate) => c.duplicates += 1,
            // It never ran on any version.
            Ok(Outcome::Skipped) => {}
            Err(HandlerRetryable(_) | HandlerPermanent(_) | Trapped(_) | TimedOut(_)) => c.failed += 1,
            Err(_) => {}
        }
    }

    /// Counts a failure of `version`'s own (a batch's event failed).
    pub fn count_failed(&self, version: Option<i32>) {
        let Some(version) = version else { return };
        let mut counts = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        counts.entry(version).or_default().failed += 1;
    }

    pub fn counts(&self) -> BTreeMap<i32, VersionCounts> {
        self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Compiles `bytes` as this handler's component and instantiates it once
    /// under the handler's limits: what an upload must pass before it is
    /// stored, and what a stored version must pass before it runs. One at
    /// a time per handler (compiling takes a core).
    pub async fn validate(&self, bytes: &[u8], what: &str) -> Result<Handler, UploadError> {
        let current = self.executor();
        if current.handler().is_native() {
            return Err(UploadError::Native(self.name.clone()));
        }
        if bytes.len() > self.max_module_bytes {
            return Err(UploadError::TooLarge { size: bytes.len(), limit: self.max_module_bytes });
        }
        let _one = self.validating.lock().await;
        let settings = current.handler().settings().clone();
        // Off the runtime's worker threads: a large component compiles for seconds.
        let (runtime, owned, what) = (self.runtime.clone(), bytes.to_vec(), what.to_owned());
        let handler = tokio::task::spawn_blocking(move || Handler::from_bytes(&runtime, &what, &owned, settings))
            .await
            .map_err(|e| UploadError::Instantiation(format!("the compilation panicked: {e}")))??;
        match current.with_handler(handler.clone()).instantiation().await {
            Ok(Ok(())) => Ok(handler),
            Ok(Err(reason)) => Err(UploadError::Instantiation(reason)),
            Err(e) => Err(UploadError::Unavailable(e.to_string())),
        }
    }

    /// Runs `handler` (validated, with its store version) from the next
    /// batch on.
    pub async fn install(&self, handler: Handler) {
        let _one = self.swapping.lock().await;
        self.put(handler);
    }

    /// From now on this handler's executions count timings and guest calls
    /// into `stats` (every version swapped in after keeps it).
    pub fn count_into(&self, stats: Arc<crate::stats::Stats>) {
        let mut current = self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        *current = current.with_stats(stats);
    }

    fn put(&self, handler: Handler) {
        self.remember(&handler);
        let swapped = self.executor().with_handler(handler);
        let (from, to) = (self.version(), swapped.handler().version());
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = swapped;
        tracing::info!(handler = %self.name, ?from, ?to, "switched module version");
    }

    /// Loads the store's active version of this handler if it is not the
    /// one running, and swaps it in. Returns the version now running. A
    /// version that failed this host's validation is not tried again (nor
    /// its bytes fetched) until another one is activated.
    pub async fn refresh(&self, pool: &PgPool) -> anyhow::Result<Option<i32>> {
        let _one = self.swapping.lock().await;
        let running = self.version();
        if self.executor().handler().is_native() {
            return Ok(None);
        }
        let Some((version, sha256)) = store::active_version(pool, &self.name).await? else {
            anyhow::bail!("handler `{}` has no active module in the store", self.name);
        };
        if Some(version) == running {
            return Ok(running);
        }
        let failed = self.failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if let Some(f) = failed
            && f.version == version
            && f.sha256 == sha256
            && f.at.elapsed() < RETRY_FAILED
        {
            anyhow::bail!("active version {version} failed this host's checks: {}", f.reason);
        }
        let Some(active) = store::active(pool, &self.name).await? else {
            anyhow::bail!("handler `{}` has no active module in the store", self.name);
        };
        let what = format!("{} version {}", self.name, active.version);
        match self.validate(&active.bytes, &what).await {
            Ok(handler) => {
                self.put(handler.with_version(active.version));
                Ok(Some(active.version))
            }
            Err(e @ UploadError::Unavailable(_)) => Err(e.into()),
            Err(e) => {
                let reason = e.to_string();
                tracing::error!(handler = %self.name, version = active.version, "the active version cannot run on this host: {reason}");
                *self.failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Failed {
                    version: active.version,
                    sha256: active.sha256,
                    reason,
                    at: std::time::Instant::now(),
                });
                Err(e.into())
            }
        }
    }
}

/// What a scrape and the console read of a slot.
impl crate::telemetry::ModuleView for Slot {
    fn version(&self) -> Option<i32> {
        Slot::version(self)
    }
    fn pool(&self) -> PgPool {
        self.executor().pool().clone()
    }
    fn counts(&self) -> BTreeMap<i32, VersionCounts> {
        Slot::counts(self)
    }
}
