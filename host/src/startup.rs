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
use crate::runtime::{Handler, NativeHandlers, PoolSize, Runtime};
use crate::sandbox::Place;
use crate::validate::Validator;

/// Everything `run` needs, checked.
pub struct Prepared {
    pub config: Config,
    /// idem's own pool (`[database] url`); handlers have pools of their own.
    pub pool: PgPool,
    pub handlers: Vec<PreparedHandler>,
}

/// One handler, checked and ready.
pub struct PreparedHandler {
    pub config: HandlerConfig,
    pub executor: Executor,
    pub validator: Validator,
    /// Its dead-letter topic's producer (`on_failure = "dlq"`).
    pub(crate) dead_letters: Option<crate::pipeline::DeadLetters>,
}

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
    let config = Config::load(path)?;
    prepare_config(config, natives).await
}

pub async fn prepare_config(config: Config, natives: &NativeHandlers) -> anyhow::Result<Prepared> {
    let concurrency = config.handlers.iter().map(|h| h.concurrency).sum();
    let max_memory = config.handlers.iter().map(|h| h.max_memory_mib.saturating_mul(1 << 20)).max().unwrap_or_default();
    let runtime = Runtime::with_pool(PoolSize::for_concurrency(concurrency, max_memory))?;
    let mut loaded = Vec::new();
    for h in &config.handlers {
        let validator = Validator::load(&h.schema, &h.event_types).with_context(|| format!("handler `{}`", h.name))?;
        let handler = load(&runtime, h, natives).with_context(|| format!("handler `{}`", h.name))?;
        loaded.push((h.clone(), handler, validator));
    }

    let pool = PgPoolOptions::new()
        .max_connections(config.database.max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect(&config.database.url)
        .await
        .with_context(|| format!("database unreachable at {}", redact(&config.database.url)))?;
    crate::migrate::check(&pool).await?;

    check_broker(&config)?;

    let database = config.database_name()?;
    let schemas: Vec<String> = config.handlers.iter().map(|h| h.schema_name()).collect();
    let mut handlers = Vec::new();
    for (h, handler, validator) in loaded {
        let place = Place::of(&h, &database)?;
        let others: Vec<String> = schemas.iter().filter(|s| **s != place.schema).cloned().collect();
        crate::sandbox::rights::check(&pool, &place, &others).await?;
        let max_connections = u32::try_from(h.concurrency).unwrap_or(u32::MAX).saturating_add(1);
        let handler_pool = crate::sandbox::pool::connect(&config.database.url, &place, max_connections).await?;
        let pins =
            Pins { schema: place.schema.clone(), synchronous_commit: config.database.synchronous_commit.clone() };
        let http = crate::capabilities::http::client(&handler.settings().http)
            .with_context(|| format!("handler `{}`: failed to build its HTTP client", h.name))?;
        let executor = Executor::new(handler, handler_pool, http, pins);
        executor.check_instantiation().await.with_context(|| format!("handler `{}`", h.name))?;
        let dead_letters = match h.retry.on_failure {
            OnFailure::Dlq => Some(crate::pipeline::DeadLetters::open(&config, &h, executor.handler().sha256()).await?),
            OnFailure::Block => None,
        };
        handlers.push(PreparedHandler { config: h, executor, validator, dead_letters });
    }
    Ok(Prepared { config, pool, handlers })
}

/// The handler's body: its component, or a native handler registered here.
fn load(runtime: &Runtime, h: &HandlerConfig, natives: &NativeHandlers) -> anyhow::Result<Handler> {
    if let Some(path) = &h.component {
        return Ok(Handler::load(runtime, path, h.settings())?);
    }
    let name = h.native.as_deref().unwrap_or_default();
    let Some(native) = natives.get(name) else {
        let known = natives.names();
        let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
        bail!("no native handler `{name}` is registered in this program (registered: {known})");
    };
    Ok(Handler::native(runtime, name, native, h.settings()))
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
    }
    Ok(())
}

fn fetch_metadata(config: &Config, handler: &HandlerConfig) -> anyhow::Result<rdkafka::metadata::Metadata> {
    let probe = crate::pipeline::probe_client(config, Some(handler))?;
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
