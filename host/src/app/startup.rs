//! Every start-up check, shared by `idem check` and `idem run`: each failure
//! names what is wrong, and nothing is consumed before all pass.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail};
use rdkafka::consumer::Consumer as _;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::config::{Config, HandlerConfig, OnFailure};
use crate::executor::{Executor, Pins};
use crate::modules::Slot;
use crate::runtime::{ArtifactCache, Handler, NativeHandlers, PoolSize, Runtime};
use crate::sandbox::Place;
use crate::validate::Validator;

/// Everything `run` needs, checked.
pub struct Prepared {
    pub config: Config,
    /// idem's own pool (`[database] url`); handlers have pools of their own.
    pub pool: PgPool,
    pub handlers: Vec<PreparedHandler>,
    /// What the checks found worth saying that does not stop a start
    /// (`idem check` prints them, `idem run` logs them).
    pub warnings: Vec<String>,
    /// The contract check's findings: each registered writer schema a
    /// handler's reader schema cannot read. `idem check` refuses the config
    /// for any; `idem run` logs them (the records written with one are
    /// dead-lettered, naming it).
    pub unreadable: Vec<String>,
}

pub use crate::pipeline::PreparedHandler;

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared").field("handlers", &self.handlers.len()).finish_non_exhaustive()
    }
}

/// Loads the config at `path` and runs every start-up check.
pub async fn prepare(path: &Path) -> anyhow::Result<Prepared> {
    prepare_with(path, &NativeHandlers::default()).await
}

/// As [`prepare`], for a program that registers native handlers.
pub async fn prepare_with(path: &Path, natives: &NativeHandlers) -> anyhow::Result<Prepared> {
    let config = crate::app::loading::load_config(path)?;
    prepare_config(config, natives).await
}

pub async fn prepare_config(config: Config, natives: &NativeHandlers) -> anyhow::Result<Prepared> {
    prepare_as(config, natives, Seed::Yes).await
}

/// Whether a handler's `component` file is stored as version 1 when the
/// module store has none for it (`idem run`), or only checked (`idem check`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seed {
    Yes,
    No,
}

/// Every start-up check, in the order that names the first problem before
/// anything connects where it can: `seed` says whether a handler's
/// `component` file becomes its version 1 (`idem run`) or is only checked.
pub async fn prepare_as(config: Config, natives: &NativeHandlers, seed: Seed) -> anyhow::Result<Prepared> {
    // Before anything connects: each capability's keys in range (a config
    // handed over already loaded may not have been through `load_config`),
    // and a DLQ without its key is a config error.
    crate::app::loading::check_capabilities(&config)?;
    let dlq_keys = if config.handlers.iter().any(|h| h.retry.on_failure == OnFailure::Dlq) {
        Some(std::sync::Arc::new(crate::pipeline::DlqKeys::load(&config.dlq)?))
    } else {
        None
    };
    let runtime = open_runtime(&config)?;
    let validators = Validator::for_config(&config)?;
    // The schemas emit topics register, read and compiled (the relay
    // reads them again when it starts).
    for h in &config.handlers {
        crate::formats::Emitting::new(&h.emit, None).with_context(|| format!("handler `{}`", h.name))?;
    }
    let pool = open_database(&config, seed).await?;
    let unreadable = if seed == Seed::No { contract(&config, &validators, &pool).await? } else { Vec::new() };
    crate::outbox::provision::check(&pool, &config).await?;
    check_broker(&config)?;
    crate::outbox::check_producer(&config)?;
    // `idem run` logs these from a task of its own (see `app::run`):
    // a broker without DescribeConfigs makes them wait for a timeout.
    let mut warnings = Vec::new();
    if seed == Seed::No {
        warnings.extend(crate::retention::topic::warnings(&config).await);
        warnings.extend(identity_in_use(&config, &pool).await?);
        for h in config.handlers.iter().filter(|h| h.retry.on_failure == OnFailure::Dlq) {
            warnings.extend(crate::pipeline::dlq::check(&config, h)?);
        }
    }
    let database = config.database_name()?;
    let shared = Preparing { config: &config, database, pool: &pool, runtime: &runtime, natives, seed, dlq_keys };
    let mut handlers = Vec::new();
    for (h, validator) in config.handlers.iter().cloned().zip(validators) {
        handlers.push(shared.handler(h, validator).await?);
    }
    Ok(Prepared { config, pool, handlers, warnings, unreadable })
}

/// Each registry-format handler's reader schema against every version of
/// its subject and every schema id its hosts met on the topic within its
/// dedup retention (docs/formats.md, "The contract check").
async fn contract(config: &Config, validators: &[Validator], pool: &PgPool) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    for (h, validator) in config.handlers.iter().zip(validators) {
        if let Some(reading) = validator.reading() {
            found.extend(crate::pipeline::schemas_seen::unreadable(pool, h, reading).await?);
        }
    }
    Ok(found)
}

/// The Wasm runtime, its instance pool sized for every handler's
/// concurrency, and the compiled-artifact cache if it opens.
pub(crate) fn open_runtime(config: &Config) -> anyhow::Result<Runtime> {
    // Each of a handler's `concurrency` executions may run a batch's
    // events `max_concurrent` at a time, each in an instance of its own.
    let concurrency = config.handlers.iter().map(|h| h.concurrency.saturating_mul(h.batch.max_concurrent)).sum();
    let max_memory = config.handlers.iter().map(|h| h.max_memory_mib.saturating_mul(1 << 20)).max().unwrap_or_default();
    let cache = match config.runtime.cache_dir() {
        Some(dir) => match ArtifactCache::open(&dir) {
            Ok(cache) => Some(cache),
            // A start-up without the cache is slower, not wrong.
            Err(e) => {
                tracing::warn!("{e}; compiling every component at start-up");
                None
            }
        },
        None => None,
    };
    Runtime::with_pool_and_cache(PoolSize::for_concurrency(concurrency, max_memory), cache)
}

/// idem's own pool, its schema checked; for `idem run`, the retentions
/// recorded and a maintenance pass run before anything is claimed.
async fn open_database(config: &Config, seed: Seed) -> anyhow::Result<PgPool> {
    let pool = PgPoolOptions::new()
        .max_connections(config.database.max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect(&config.database.url)
        .await
        .with_context(|| format!("database unreachable at {}", redact(&config.database.url)))?;
    crate::migrate::check(&pool).await?;
    crate::retention::check_mode(&pool, &config.retention).await?;
    if seed == Seed::Yes {
        // The claim and maintenance read these, and the pass makes sure
        // today's window exists.
        crate::retention::record(&pool, config).await?;
        match crate::retention::Maintenance::new(pool.clone(), config.retention.clone()).pass().await {
            Ok(report) => report.lines().iter().for_each(|line| tracing::info!("retention: {line}")),
            Err(e) => tracing::warn!(
                "retention: the start-up maintenance pass failed (claims use the windows created earlier): {e:#}"
            ),
        }
    }
    Ok(pool)
}

/// What every handler's preparation reads.
struct Preparing<'a> {
    config: &'a Config,
    /// The database `[database] url` names (each handler's place is in it).
    database: String,
    pool: &'a PgPool,
    runtime: &'a Runtime,
    natives: &'a NativeHandlers,
    seed: Seed,
    dlq_keys: Option<std::sync::Arc<crate::pipeline::DlqKeys>>,
}

impl Preparing<'_> {
    /// One handler: its rights checked, its pool, its module (the store's
    /// active version, else its file or native body), its DLQ.
    async fn handler(&self, h: HandlerConfig, validator: Validator) -> anyhow::Result<PreparedHandler> {
        let (config, pool) = (self.config, self.pool);
        let place = Place::of(&h, &self.database)?;
        let others: Vec<String> =
            config.handlers.iter().map(|h| h.schema_name()).filter(|s| *s != place.schema).collect();
        crate::sandbox::rights::check(pool, &place, &others).await?;
        let max_connections = u32::try_from(h.concurrency).unwrap_or(u32::MAX).saturating_add(1);
        let handler_pool = crate::sandbox::pool::connect(&config.database.url, &place, max_connections).await?;
        let pins =
            Pins { schema: place.schema.clone(), synchronous_commit: config.database.synchronous_commit.clone() };
        let at = || format!("handler `{}`", h.name);
        let settings = crate::runtime::HandlerSettings::of(&h).with_context(at)?;
        let http = crate::capabilities::http::client(&settings.caps.http)
            .with_context(|| format!("handler `{}`: failed to build its HTTP client", h.name))?;
        let stored = crate::modules::store::active(pool, &h.name).await.with_context(at)?;
        let body = match (&stored, &h.native) {
            (_, Some(_)) | (None, None) => load(self.runtime, &h, self.natives, settings).with_context(at)?,
            (Some(active), None) => {
                let what = format!("{} version {} (module store)", h.name, active.version);
                Handler::from_bytes(self.runtime, &what, &active.bytes, settings)
                    .with_context(at)?
                    .with_version(active.version)
            }
        };
        let executor = Executor::new(body, handler_pool, http, pins);
        executor.check_instantiation().await.with_context(at)?;
        // `idem check` captures nothing: it runs no event.
        let capturing = if self.seed == Seed::Yes { crate::capture::Capturing::start(pool.clone(), &h)? } else { None };
        let executor = executor.with_capture(capturing);
        let executor = match (&stored, &h.component) {
            (None, Some(path)) if self.seed == Seed::Yes => {
                seed_version_1(pool, self.runtime, executor, path).await.with_context(at)?
            }
            (Some(active), Some(path)) => {
                note_file_differs(&h.name, path, active);
                executor
            }
            _ => executor,
        };
        let dead_letters = match h.retry.on_failure {
            // `idem check` changes nothing: it looked the topic up (`prepare_as`).
            OnFailure::Dlq if self.seed == Seed::No => None,
            OnFailure::Dlq => {
                let keys = self.dlq_keys.clone().context("DLQ keys are loaded when a handler has a DLQ")?;
                Some(crate::pipeline::DeadLetters::open(config, &h, keys).await?)
            }
            OnFailure::Block => None,
        };
        let slot = Slot::new(self.runtime.clone(), executor, h.max_module_mib << 20);
        Ok(PreparedHandler { config: h, slot, validator, dead_letters })
    }
}

/// Stores the `component` file (checked) as the handler's version 1: from
/// now on the store is the handler's source. If another host seeded first,
/// its version is what runs here too.
async fn seed_version_1(pool: &PgPool, runtime: &Runtime, executor: Executor, path: &Path) -> anyhow::Result<Executor> {
    let name = executor.handler().settings().name.clone();
    let bytes = crate::files::read_bounded(path, crate::runtime::MAX_COMPONENT_BYTES)
        .with_context(|| format!("failed to read component {}", path.display()))?;
    let sha256 = executor.handler().sha256().to_owned();
    if hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes)) != sha256 {
        bail!("the component file {} changed while idem was starting; start again", path.display());
    }
    let note = format!("seeded from {}", path.display());
    let upload = crate::modules::store::Upload {
        handler: &name,
        bytes: &bytes,
        sha256: &sha256,
        uploaded_by: "idem run (component file)",
        note: Some(&note),
    };
    let seeded =
        crate::modules::store::seed(pool, &upload).await.context("failed to store the component as version 1")?;
    if let Some(version) = seeded {
        tracing::info!(handler = %name, version, %sha256, "component file stored in the module store");
        let handler = executor.handler().clone().with_version(version);
        return Ok(executor.with_handler(handler));
    }
    let active = crate::modules::store::active(pool, &name)
        .await?
        .context("the module store has versions of this handler but none active")?;
    let what = format!("{name} version {} (module store)", active.version);
    let handler = Handler::from_bytes(runtime, &what, &active.bytes, executor.handler().settings().clone())?
        .with_version(active.version);
    let executor = executor.with_handler(handler);
    executor.check_instantiation().await?;
    Ok(executor)
}

/// The store wins over the file; says so when they differ.
fn note_file_differs(name: &str, path: &Path, active: &crate::modules::store::ActiveModule) {
    let Ok(bytes) = std::fs::read(path) else { return };
    let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
    if sha256 != active.sha256 {
        tracing::warn!(
            handler = %name, file = %path.display(), active_version = active.version,
            "the component file differs from the active version in the module store, which wins; \
             `idem deploy` makes the file the next version"
        );
    }
}

/// The handler's body when the store has none: its component file, or a
/// native handler registered here.
fn load(
    runtime: &Runtime,
    h: &HandlerConfig,
    natives: &NativeHandlers,
    settings: crate::runtime::HandlerSettings,
) -> anyhow::Result<Handler> {
    if let Some(path) = &h.component {
        return Ok(Handler::load(runtime, path, settings)?);
    }
    if h.module.is_some() {
        bail!(
            "the module store holds no version of this handler (module = \"store\"); upload one with \
             `idem deploy --handler {} FILE.wasm`",
            h.name
        );
    }
    let name = h.native.as_deref().unwrap_or_default();
    let Some(native) = natives.get(name) else {
        let known = natives.names();
        let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
        bail!("no native handler `{name}` is registered in this program (registered: {known})");
    };
    Ok(Handler::native(runtime, name, native, settings))
}

/// Fails unless the brokers answer a metadata request, with the `[kafka]`
/// properties and with each handler's own (its credentials, say).
fn check_broker(config: &Config) -> anyhow::Result<()> {
    let mut checked = Vec::new();
    for h in &config.handlers {
        let own = (&h.properties, &h.properties_env);
        if checked.contains(&own) {
            continue;
        }
        let at = if h.properties.is_empty() && h.properties_env.is_empty() {
            String::new()
        } else {
            format!(" (with handler `{}`'s properties)", h.name)
        };
        let metadata = fetch_metadata(config, h).map_err(|e| anyhow::anyhow!("{e}{at}"))?;
        checked.push(own);
        if !metadata.topics().iter().any(|t| t.name() == h.topic) {
            tracing::warn!(handler = %h.name, topic = %h.topic, "topic does not exist (yet); consuming will wait for it");
        }
        let emitted = config.outbox.producers.iter().flat_map(|p| p.topics.iter().map(|t| t.topic.as_str()));
        for topic in h.emit.iter().map(|e| e.topic.as_str()).chain(emitted) {
            // Present with no error: a topic being created has an error.
            if !metadata.topics().iter().any(|t| t.name() == topic && t.error().is_none()) {
                bail!(
                    "outbox topic `{topic}` does not exist on the broker: create it (idem publishes to topics, it \
                     does not create them)"
                );
            }
        }
    }
    Ok(())
}

fn fetch_metadata(config: &Config, handler: &HandlerConfig) -> anyhow::Result<rdkafka::metadata::Metadata> {
    let probe = crate::kafka_client::probe(config, Some(handler))?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let started = std::time::Instant::now();
        let fetched = probe.fetch_metadata(None, Duration::from_secs(1));
        // Serves librdkafka's queued logs and errors (one per call) to the
        // probe's context: they say why the request failed.
        for _ in 0..1000 {
            if let Some(Err(e)) = probe.poll(Duration::ZERO) {
                probe.context().note(&e);
            }
        }
        match fetched {
            Ok(metadata) if metadata.brokers().is_empty() => {
                bail!("broker at {} answered with no brokers", config.kafka.brokers)
            }
            Ok(metadata) => return Ok(metadata),
            // A refusal (TLS, SASL) will not change by waiting; anything
            // else (a broker starting, a slow network) may.
            Err(e) if probe.context().refused() || std::time::Instant::now() >= deadline => {
                // The request only says it failed; librdkafka's last error
                // says why (connection refused, TLS handshake, SASL).
                match probe.context().last_error() {
                    Some(reason) => bail!("broker unreachable at {}: {e}; last error: {reason}", config.kafka.brokers),
                    None => bail!("broker unreachable at {}: {e}", config.kafka.brokers),
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200).saturating_sub(started.elapsed())),
        }
    }
}

/// The URL without its password, for messages.
pub fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_owned(),
    }
}

/// What `idem check` can see of a named identity: a member of a handler's
/// classic group that holds it already. It is this host's own previous
/// process (crashed, not yet timed out) or another live host sharing the
/// identity; `check` cannot tell which, so it warns, naming the member's
/// client host. An automatic identity is not looked up: its slot lock keeps
/// it unique on its machine.
async fn identity_in_use(config: &Config, pool: &sqlx::PgPool) -> anyhow::Result<Vec<String>> {
    let Some(identity) = crate::identity::named(&config.kafka.instance_id)? else { return Ok(Vec::new()) };
    let identity = identity.with_secret(pool).await?;
    let mut warnings = Vec::new();
    for handler in &config.handlers {
        let Some(instance) = identity.instance_id(&handler.name) else { continue };
        let Ok(probe) = crate::kafka_client::probe(config, Some(handler)) else { continue };
        let Ok(list) = probe.fetch_group_list(Some(&handler.group_id), Duration::from_secs(5)) else { continue };
        let prefix = format!("{instance}-");
        for member in list.groups().iter().flat_map(|g| g.members()).filter(|m| m.id().starts_with(&prefix)) {
            warnings.push(format!(
                "handler `{}`: group `{}` has a member with instance id `{instance}` already (client host {}): \
                 unless it is this host's previous process, another live host shares this identity, and the two \
                 will fence each other; give each host its own IDEM_INSTANCE_ID",
                handler.name,
                handler.group_id,
                member.client_host()
            ));
        }
    }
    Ok(warnings)
}
