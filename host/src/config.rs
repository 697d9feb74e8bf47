//! The host's configuration file (TOML). Every key is documented in the
//! README; unknown keys are refused, so a typo never silently falls back to
//! a default.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::Deserialize;

use crate::runtime::{HandlerSettings, HttpPolicy};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub kafka: KafkaConfig,
    pub database: DatabaseConfig,
    #[serde(rename = "handler", default)]
    pub handlers: Vec<HandlerConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap servers, `host:port[,host:port…]`. `IDEM_KAFKA_BROKERS` overrides.
    pub brokers: String,
    /// Extra librdkafka properties for every consumer (security.protocol, ssl.*, sasl.*, …).
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// PostgreSQL URL. `IDEM_DATABASE_URL` overrides.
    pub url: String,
    /// Connections in the pool shared by all handlers.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
}

fn default_max_connections() -> u32 {
    10
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerConfig {
    /// The handler's name: its dedup namespace. Unique in the file.
    pub name: String,
    pub topic: String,
    /// The Kafka consumer group. Unique in the file.
    pub group_id: String,
    /// Path of the component (`.wasm`), relative to the config file.
    pub component: PathBuf,
    /// The `eventType`s this handler accepts; any other is invalid.
    pub event_types: Vec<String>,
    /// JSON Schema (draft 2020-12) of the payload, relative to the config file.
    pub schema: PathBuf,
    /// Partitions processed at once.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Events per transaction. Only 1 is supported for now.
    #[serde(default = "default_max_events")]
    pub max_events: usize,
    /// Executions of an event that fails retryably before it is given up.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Wall-clock limit of one execution, in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Linear memory one instance may grow to, in MiB.
    #[serde(default = "default_max_memory_mib")]
    pub max_memory_mib: usize,
    /// `cooperative-sticky` (default), `range` or `roundrobin`.
    #[serde(default = "default_assignor")]
    pub assignor: String,
    /// Where a group without committed offsets starts: `earliest` (default) or `latest`.
    #[serde(default = "default_auto_offset_reset")]
    pub auto_offset_reset: String,
    /// Extra librdkafka properties for this handler's consumer.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    #[serde(default)]
    pub http: HandlerHttp,
    /// Key/values the guest reads through `config`.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

fn default_concurrency() -> usize {
    1
}
fn default_max_events() -> usize {
    1
}
fn default_max_attempts() -> u32 {
    5
}
fn default_timeout_ms() -> u64 {
    30_000
}
fn default_max_memory_mib() -> usize {
    256
}
fn default_assignor() -> String {
    "cooperative-sticky".into()
}
fn default_auto_offset_reset() -> String {
    "earliest".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerHttp {
    /// Base URLs the handler may call. Empty: none.
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default = "default_http_timeout_ms")]
    pub timeout_ms: u64,
    /// Prepended to every Idempotency-Key as `<prefix>:`.
    #[serde(default)]
    pub key_prefix: Option<String>,
}

impl Default for HandlerHttp {
    fn default() -> Self {
        Self { allow: Vec::new(), timeout_ms: default_http_timeout_ms(), key_prefix: None }
    }
}

fn default_http_timeout_ms() -> u64 {
    5_000
}

/// librdkafka properties idem owns: it commits explicit offsets itself.
const OWNED_PROPERTIES: &[&str] = &["enable.auto.commit", "enable.auto.offset.store", "group.id"];

impl Config {
    /// Reads `path`, applies the environment overrides, resolves relative
    /// paths against the file's folder and checks the whole.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("failed to read config {}", path.display()))?;
        let mut config: Config = toml::from_str(&text).with_context(|| format!("invalid config {}", path.display()))?;
        if let Ok(brokers) = std::env::var("IDEM_KAFKA_BROKERS") {
            config.kafka.brokers = brokers;
        }
        if let Ok(url) = std::env::var("IDEM_DATABASE_URL") {
            config.database.url = url;
        }
        let base = path.parent().unwrap_or(Path::new("."));
        for h in &mut config.handlers {
            h.component = base.join(&h.component);
            h.schema = base.join(&h.schema);
        }
        config.check().with_context(|| format!("invalid config {}", path.display()))?;
        Ok(config)
    }

    fn check(&self) -> anyhow::Result<()> {
        if self.handlers.is_empty() {
            bail!("no [[handler]]: nothing to run");
        }
        check_properties("[kafka.properties]", &self.kafka.properties)?;
        let (mut names, mut groups) = (HashSet::new(), HashSet::new());
        let concurrency: usize = self.handlers.iter().map(|h| h.concurrency).sum();
        if concurrency > self.database.max_connections as usize {
            // Not an error: events would wait for a connection, not fail.
            tracing::warn!(
                "the handlers process {concurrency} partitions at once but [database] max_connections is {}: \
                 events will wait for connections",
                self.database.max_connections
            );
        }
        for h in &self.handlers {
            let at = format!("handler `{}`", h.name);
            if h.name.is_empty() || !h.name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
                bail!("{at}: a name is letters, digits, `-`, `_` or `.`");
            }
            if !names.insert(&h.name) {
                bail!("{at}: two handlers have this name; it is the dedup namespace and must be unique");
            }
            if !groups.insert(&h.group_id) {
                bail!("{at}: group_id `{}` is used by another handler", h.group_id);
            }
            if h.event_types.is_empty() {
                bail!("{at}: event_types is empty, so every event would be invalid");
            }
            if h.concurrency == 0 {
                bail!("{at}: concurrency must be at least 1");
            }
            if h.max_events != 1 {
                bail!("{at}: max_events = {} is not supported yet (only 1)", h.max_events);
            }
            if h.max_attempts == 0 {
                bail!("{at}: max_attempts must be at least 1");
            }
            if !matches!(h.assignor.as_str(), "cooperative-sticky" | "range" | "roundrobin") {
                bail!("{at}: assignor `{}`: use cooperative-sticky, range or roundrobin", h.assignor);
            }
            if !matches!(h.auto_offset_reset.as_str(), "earliest" | "latest") {
                bail!("{at}: auto_offset_reset `{}`: use earliest or latest", h.auto_offset_reset);
            }
            check_properties(&format!("{at} properties"), &h.properties)?;
            for base in &h.http.allow {
                let url =
                    reqwest::Url::parse(base).with_context(|| format!("{at}: http.allow `{base}` is not a URL"))?;
                if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                    bail!("{at}: http.allow `{base}` must be an http(s) URL with a host");
                }
            }
        }
        Ok(())
    }
}

fn check_properties(at: &str, properties: &BTreeMap<String, String>) -> anyhow::Result<()> {
    for (key, value) in properties {
        let harmless = key != "group.id" && value == "false";
        if OWNED_PROPERTIES.contains(&key.as_str()) && !harmless {
            bail!(
                "{at}: `{key} = {value}` is refused: idem commits offsets itself, only after each event's \
                 transaction (enable.auto.commit and enable.auto.offset.store stay false; group.id is `group_id`)"
            );
        }
    }
    Ok(())
}

impl HandlerConfig {
    pub fn settings(&self) -> HandlerSettings {
        HandlerSettings {
            name: self.name.clone(),
            config: self.config.clone(),
            http: HttpPolicy {
                allow: self.http.allow.clone(),
                timeout: Duration::from_millis(self.http.timeout_ms),
                key_prefix: self.http.key_prefix.clone(),
            },
            timeout: Duration::from_millis(self.timeout_ms),
            max_memory_bytes: self.max_memory_mib << 20,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::Config;

    #[test]
    fn the_billing_example_config_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/billing/idem.toml");
        let config = Config::load(&path).expect("the example config is valid");
        let billing = &config.handlers[0];
        assert_eq!((billing.name.as_str(), billing.concurrency, billing.max_events), ("billing", 3, 1));
        assert!(
            billing.schema.ends_with("examples/billing/order-confirmed.v1.schema.json"),
            "resolved against the file"
        );
        assert_eq!(billing.assignor, "cooperative-sticky");
        assert_eq!(billing.auto_offset_reset, "earliest");
    }

    #[test]
    fn unknown_keys_and_owned_properties_are_refused() {
        let base = "[kafka]\nbrokers = \"b\"\n[database]\nurl = \"u\"\n[[handler]]\nname = \"h\"\ntopic = \"t\"\n\
                    group_id = \"g\"\ncomponent = \"c\"\nevent_types = [\"e\"]\nschema = \"s\"\n";
        let dir = std::env::temp_dir().join(format!("idem-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let load = |text: String| {
            let path = dir.join("idem.toml");
            std::fs::write(&path, text).expect("write");
            Config::load(&path).map_err(|e| format!("{e:#}"))
        };
        assert!(load(base.to_owned()).is_ok());
        assert!(load(format!("{base}colour = \"red\"\n")).expect_err("unknown").contains("unknown field `colour`"));
        let on = format!("{base}[handler.properties]\n\"enable.auto.commit\" = \"true\"\n");
        assert!(load(on).expect_err("auto commit").contains("enable.auto.commit"));
        let off = format!("{base}[handler.properties]\n\"enable.auto.offset.store\" = \"false\"\n");
        assert!(load(off).is_ok(), "turning it off explicitly is harmless");
        assert!(load(format!("{base}concurrency = 0\n")).expect_err("zero").contains("concurrency"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
