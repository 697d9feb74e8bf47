//! Every start-up check, shared by `idem check` and `idem run`: each failure
//! names what is wrong, and nothing is consumed before all pass.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail};
use rdkafka::consumer::Consumer as _;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::config::{Config, HandlerConfig};
use crate::executor::Executor;
use crate::runtime::{Handler, Runtime};
use crate::validate::Validator;

/// Everything `run` needs, checked.
pub struct Prepared {
    pub config: Config,
    pub pool: PgPool,
    pub handlers: Vec<(HandlerConfig, Executor, Validator)>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared").field("handlers", &self.handlers.len()).finish_non_exhaustive()
    }
}

/// Loads the config at `path` and runs every start-up check.
pub async fn prepare(path: &Path) -> anyhow::Result<Prepared> {
    let config = Config::load(path)?;
    prepare_config(config).await
}

pub async fn prepare_config(config: Config) -> anyhow::Result<Prepared> {
    let runtime = Runtime::new()?;
    let mut loaded = Vec::new();
    for h in &config.handlers {
        let validator = Validator::load(&h.schema, &h.event_types).with_context(|| format!("handler `{}`", h.name))?;
        let handler =
            Handler::load(&runtime, &h.component, h.settings()).with_context(|| format!("handler `{}`", h.name))?;
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

    let http = crate::capabilities::http::client().context("failed to build the HTTP client")?;
    let handlers: Vec<_> = loaded
        .into_iter()
        .map(|(h, handler, validator)| (h, Executor::new(handler, pool.clone(), http.clone()), validator))
        .collect();
    for (h, executor, _) in &handlers {
        executor.check_instantiation().await.with_context(|| format!("handler `{}`", h.name))?;
    }
    Ok(Prepared { config, pool, handlers })
}

/// Fails unless the brokers answer a metadata request.
fn check_broker(config: &Config) -> anyhow::Result<()> {
    let probe = crate::pipeline::probe_client(config)?;
    let metadata = probe
        .fetch_metadata(None, Duration::from_secs(10))
        .with_context(|| format!("broker unreachable at {}", config.kafka.brokers))?;
    if metadata.brokers().is_empty() {
        bail!("broker at {} answered with no brokers", config.kafka.brokers);
    }
    for h in &config.handlers {
        if !metadata.topics().iter().any(|t| t.name() == h.topic) {
            tracing::warn!(handler = %h.name, topic = %h.topic, "topic does not exist (yet); consuming will wait for it");
        }
    }
    Ok(())
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_owned(),
    }
}
