//! The host's configuration file (TOML). Every key is documented in the
//! docs/configuration.md; unknown keys are refused, so a typo never silently falls back to
//! a default.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context as _;
use serde::Deserialize;

mod admin;
mod audit;
mod canary;
mod capture;
mod check;
mod dlq;
mod failure;
mod format;
mod group;
mod handler;
mod identifiers;
mod ordering;
mod outbox;
mod properties;
mod ranges;
pub(crate) use ranges::MAX_TIMEOUT_MS;
mod rates;
mod registry;
mod retention;
mod runtime;

pub use admin::AdminConfig;
pub use audit::HandlerAudit;
pub use canary::HandlerCanary;
pub use capture::{HandlerCapture, RedactStep, redact_path};
pub use dlq::DlqConfig;
pub use failure::{HandlerFailure, OnExhausted};
pub use format::{Envelope, Format};
pub use group::GroupProtocol;
pub use handler::{
    HandlerBatch, HandlerConfig, HandlerDatabase, HandlerHttp, HandlerLimits, HandlerRetry, HttpCredential, HttpRetry,
    OnFailure,
};
pub(crate) use identifiers::is_reserved_schema;
pub use ordering::{DEFAULT_MAX_IN_FLIGHT, MAX_IN_FLIGHT, Ordering, key_lane};
pub use outbox::{HandlerEmit, OutboxConfig, OutboxProducer, ProducerTopic};
pub use rates::{HttpRate, MAX_PER_SECOND, check_rate};
pub use registry::RegistryConfig;
pub use retention::{RetentionConfig, RetentionMode, Span, StalePolicy};
pub use runtime::RuntimeConfig;

/// `[[handler]] max_compile_seconds` by default: over 3× what the largest
/// component the suite builds takes (componentize-py's, 18 MB: 17.6 CPU
/// seconds in a debug build on 2 cores; a release build takes less).
pub const DEFAULT_MAX_COMPILE_SECONDS: u64 = 60;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub kafka: KafkaConfig,
    pub database: DatabaseConfig,
    #[serde(default)]
    pub admin: AdminConfig,
    #[serde(default)]
    pub runtime: RuntimeConfig,
    #[serde(default)]
    pub retention: RetentionConfig,
    #[serde(default)]
    pub dlq: DlqConfig,
    #[serde(default)]
    pub shutdown: ShutdownConfig,
    #[serde(default)]
    pub outbox: OutboxConfig,
    /// The schema registry (`[registry]`), for handlers whose `format` needs one.
    #[serde(default)]
    pub registry: Option<RegistryConfig>,
    #[serde(rename = "handler", default)]
    pub handlers: Vec<HandlerConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap servers, `host:port[,host:port…]`. `IDEM_KAFKA_BROKERS` overrides.
    pub brokers: String,
    /// Extra librdkafka properties for every client (security.protocol,
    /// ssl.*, sasl.*, …). Secrets are refused here: see `properties_env`.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// librdkafka properties whose values come from the environment:
    /// property → name of the variable (e.g. `"sasl.password" =
    /// "KAFKA_PASSWORD"`). Only the name is kept; the value is read when a
    /// client is created and never printed.
    #[serde(default)]
    pub properties_env: BTreeMap<String, String>,
    /// The host's identity in its groups (static membership, see
    /// `identity`): a stable name unique among live hosts, `"auto"`
    /// (default: hostname and a local slot) or `"off"`. `IDEM_INSTANCE_ID`
    /// overrides.
    #[serde(default = "default_instance_id")]
    pub instance_id: String,
}

fn default_instance_id() -> String {
    "auto".into()
}

/// `[shutdown]`: how `idem run` ends on SIGTERM (see `pipeline::shutdown`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownConfig {
    /// From the signal to the process's exit, whatever the group is doing
    /// (1s to 10m; default 10s, inside Kubernetes' 30 s grace period).
    #[serde(default = "default_shutdown_timeout")]
    pub timeout: Span,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        Self { timeout: default_shutdown_timeout() }
    }
}

fn default_shutdown_timeout() -> Span {
    Span(std::time::Duration::from_secs(10))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// PostgreSQL URL of idem's own role (start-up checks, `idem migrate`).
    /// `IDEM_DATABASE_URL` overrides. Handlers never use it: each logs in
    /// as its own role (`[handler.database]`), on the same server and database.
    pub url: String,
    /// Connections of idem's own pool (handlers have pools of their own).
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// `synchronous_commit` pinned in every event's transaction: `on`
    /// (default), `remote_apply`, `remote_write` or `local`. `off` is
    /// refused: a commit reported as processed could be lost in a crash.
    #[serde(default = "default_synchronous_commit")]
    pub synchronous_commit: String,
}

fn default_synchronous_commit() -> String {
    "on".into()
}

fn default_max_connections() -> u32 {
    10
}

impl Config {
    /// Reads `path`, applies the environment overrides, resolves relative
    /// paths against the file's folder and checks the whole, except each
    /// capability's own keys (`[handler.http]`, the limits of its calls):
    /// those are the capabilities' to check, a layer above this one. A
    /// command loads with `app::loading::load_config`, which checks both.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text =
            crate::files::read_text(path).with_context(|| format!("failed to read config {}", path.display()))?;
        // toml's own message quotes the offending line, which may hold a
        // secret: say where and what, not the line.
        let mut config: Config = toml::from_str(&text).map_err(|e| {
            let at = e.span().map(|span| where_in(&text, span.start)).unwrap_or_default();
            anyhow::anyhow!("invalid config {}{at}: {}", path.display(), e.message().trim_end())
        })?;
        if let Some(brokers) = crate::env::get(crate::env::KAFKA_BROKERS) {
            config.kafka.brokers = brokers;
        }
        if let Some(url) = crate::env::get(crate::env::DATABASE_URL) {
            config.database.url = url;
        }
        if let (Some(url), Some(registry)) = (crate::env::get("IDEM_REGISTRY_URL"), &mut config.registry) {
            registry.url = url;
        }
        let base = path.parent().unwrap_or(Path::new("."));
        if let Some(ca) = config.registry.as_mut().and_then(|r| r.ca_file.as_mut()) {
            *ca = base.join(&*ca);
        }
        for file in [&mut config.dlq.key_file, &mut config.dlq.previous_key_file].into_iter().flatten() {
            *file = base.join(&*file);
        }
        for h in &mut config.handlers {
            if let Some(component) = &mut h.component {
                *component = base.join(&*component);
            }
            h.schema = base.join(&h.schema);
            for emit in &mut h.emit {
                emit.schema = base.join(&emit.schema);
                if let Some(file) = &mut emit.register {
                    *file = base.join(&*file);
                }
            }
            if let Some(m) = &mut h.database.migrations {
                *m = base.join(&*m);
            }
        }
        config.check().with_context(|| format!("invalid config {}", path.display()))?;
        Ok(config)
    }
}

impl Config {
    /// The database name in `[database] url` (roles are named after it).
    pub fn database_name(&self) -> anyhow::Result<String> {
        let options: sqlx::postgres::PgConnectOptions =
            self.database.url.parse().context("[database] url is not a PostgreSQL URL")?;
        Ok(options.get_database().unwrap_or(options.get_username()).to_owned())
    }
}

/// Where a parse error at byte `offset` of `text` is: its line, and the key
/// and table of that line when it has them (` at line 12, key
/// `concurrency` of [[handler]]`). The value is never quoted: it may be a
/// secret.
fn where_in(text: &str, offset: usize) -> String {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_text = text.lines().nth(line - 1).unwrap_or_default();
    let key = line_text.split_once('=').map(|(k, _)| k.trim().trim_matches('"')).filter(|k| !k.is_empty());
    let table = before.lines().rev().map(str::trim).find(|l| l.starts_with('['));
    match (key, table) {
        (Some(key), Some(table)) => format!(" at line {line}, key `{key}` of {table}"),
        (Some(key), None) => format!(" at line {line}, key `{key}`"),
        _ => format!(" at line {line}"),
    }
}

#[cfg(test)]
mod generated;

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{Config, DEFAULT_MAX_IN_FLIGHT, Ordering};

    #[test]
    fn the_billing_example_config_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/billing/idem.toml");
        let config = Config::load(&path).expect("the example config is valid");
        let billing = &config.handlers[0];
        assert_eq!((billing.name.as_str(), billing.concurrency, billing.batch.max_events), ("billing", 3, 100));
        assert!(
            billing.schema.ends_with("examples/billing/order-confirmed.v1.schema.json"),
            "resolved against the file"
        );
        assert_eq!(billing.assignor, None);
        assert_eq!(billing.group_protocol, super::GroupProtocol::Classic);
        assert_eq!(billing.auto_offset_reset, "earliest");
    }

    /// The smallest config that loads; each case adds to it.
    const BASE: &str = "[kafka]\nbrokers = \"b\"\n[database]\nurl = \"postgres://u@h/db\"\n[[handler]]\nname = \"h\"\n\
                        topic = \"t\"\ngroup_id = \"g\"\ncomponent = \"c\"\nevent_types = [\"e\"]\nschema = \"s\"\n";

    /// `text` loaded from a config file of its own (the tests run at once).
    fn load_text(text: &str) -> Result<Config, String> {
        static FILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("idem-config-test-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("idem.toml");
        std::fs::write(&path, text).expect("write");
        let loaded = Config::load(&path).map_err(|e| format!("{e:#}"));
        std::fs::remove_dir_all(&dir).ok();
        loaded
    }

    /// [`BASE`] with `extra` after it.
    fn load(extra: &str) -> Result<Config, String> {
        load_text(&format!("{BASE}{extra}"))
    }

    /// [`BASE`] with `extra` is refused, the error saying `expected`.
    fn refused(extra: &str, expected: &str) {
        let err = load(extra).expect_err(extra);
        assert!(err.contains(expected), "{extra}: {err}");
    }

    #[test]
    fn unknown_keys_and_owned_properties_are_refused() {
        assert!(load("").is_ok());
        refused("colour = \"red\"\n", "unknown field `colour`");
        refused("[handler.properties]\n\"enable.auto.commit\" = \"true\"\n", "enable.auto.commit");
        let off = load("[handler.properties]\n\"enable.auto.offset.store\" = \"false\"\n");
        assert!(off.is_ok(), "turning it off explicitly is harmless");
        refused("concurrency = 0\n", "concurrency");
        refused("timeout_ms = 0\n", "timeout_ms");
        let sync_off = BASE.replace("[database]\n", "[database]\nsynchronous_commit = \"off\"\n");
        assert!(load_text(&sync_off).expect_err("off").contains("synchronous_commit"));
    }

    #[test]
    fn ordering_lanes_and_events_at_once_are_checked() {
        refused("max_in_flight = 4\n", "needs ordering = \"key\" or \"none\"");
        refused("ordering = \"key\"\nmax_in_flight = 0\n", "max_in_flight = 0 must be between 1 and 256");
        refused("ordering = \"none\"\nmax_in_flight = 257\n", "max_in_flight = 257");
        refused("ordering = \"keys\"\n", "ordering");
        refused(
            "ordering = \"key\"\n[handler.batch]\nmax_concurrent = 0\n",
            "max_concurrent = 0 must be between 1 and 64",
        );
        refused("ordering = \"none\"\n[handler.batch]\nmax_concurrent = 65\n", "max_concurrent = 65");
        let concurrent = load("ordering = \"key\"\n[handler.batch]\nmax_concurrent = 8\n").expect("8 at once");
        assert_eq!(concurrent.handlers[0].batch.max_concurrent, 8);
        let keyed = load("ordering = \"key\"\n").expect("ordering by key");
        assert_eq!((keyed.handlers[0].ordering, keyed.handlers[0].lanes()), (Ordering::Key, DEFAULT_MAX_IN_FLIGHT));
        assert_eq!(load("ordering = \"none\"\nmax_in_flight = 3\n").expect("3 lanes").handlers[0].lanes(), 3);
        assert_eq!(load("").expect("default").handlers[0].lanes(), 1, "one lane by default");
    }

    #[test]
    fn a_handler_has_exactly_one_body() {
        refused("native = \"billing\"\n", "more than one of `component`, `module` and `native`");
        let bodiless = BASE.replace("component = \"c\"\n", "");
        assert!(load_text(&bodiless).expect_err("no body").contains("no `component`"));
        assert!(load_text(&format!("{bodiless}module = \"store\"\n")).is_ok(), "from the store only");
        let disk = load_text(&format!("{bodiless}module = \"disk\"\n")).expect_err("store only");
        assert!(disk.contains("\"store\""), "{disk}");
        assert!(load_text(&format!("{bodiless}native = \"billing\"\n")).is_ok(), "a native handler instead");
    }

    #[test]
    fn database_and_retention_keys_are_checked() {
        refused("[handler.database]\nschema = \"idem\"\n", "reserved");
        refused("[handler.database]\nschema = \"pg_catalog\"\n", "reserved");
        refused("[handler.database]\nschema = \"Bad-Name\"\n", "lowercase");
        refused("[handler.database]\nrole = \"x\\\"; DROP\"\n", "lowercase");
        refused("dedup_retention = \"30m\"\n", "dedup_retention = \"30m\" must be between 1h and 3650d");
        refused("dedup_retention = \"7 days\"\n", "the unit is one of");
        refused("stale_events = \"drop\"\n", "unknown variant `drop`");
        let ok = load("dedup_retention = \"30d\"\nstale_events = \"process\"\n").expect("retention keys");
        assert_eq!(ok.handlers[0].dedup_retention, super::Span::days(30));
        assert_eq!(ok.handlers[0].stale_events, super::StalePolicy::Process);
        let retention = |text: &str| load(&format!("[retention]\n{text}")).map(|c| c.retention);
        assert_eq!(retention("mode = \"delete\"\n").expect("delete").mode, super::RetentionMode::Delete);
        assert_eq!(retention("retention_mode = \"delete\"\n").expect("the alias").mode, super::RetentionMode::Delete);
        assert!(retention("future_skew = \"3d\"\n").expect_err("skew").contains("future_skew"));
        assert!(retention("interval = \"1d\"\n").expect_err("interval").contains("interval"));
        assert!(retention("vacuum = true\n").expect_err("unknown").contains("unknown field `vacuum`"));
        let two = "[handler.database]\nschema = \"s\"\n[[handler]]\nname = \"h2\"\ntopic = \"t\"\ngroup_id = \"g2\"\n\
                   component = \"c\"\nevent_types = [\"e\"]\nschema = \"s\"\n[handler.database]\nschema = \"s\"\n";
        refused(two, "another handler's");
    }

    #[test]
    fn the_quarantine_and_the_rates_are_checked() {
        let quarantine = "ordering = \"key\"\n[handler.failure]\non_exhausted = \"quarantine\"\n";
        let keyed = load(quarantine).expect("quarantine by key");
        assert!(keyed.handlers[0].quarantines());
        assert_eq!(keyed.handlers[0].failure.max_parked, 100_000);
        refused("[handler.failure]\non_exhausted = \"quarantine\"\n", "ordering = \"partition\" forbids");
        refused(
            &quarantine.replace("[handler.failure]", "[handler.retry]\non_failure = \"block\"\n[handler.failure]"),
            "needs retry.on_failure = \"dlq\"",
        );
        refused(&format!("{quarantine}max_parked = 0\n"), "max_parked = 0");
        refused("[handler.failure]\non_exhausted = \"park\"\n", "unknown variant `park`");
        let rated = load("max_events_per_second = 250.0\n[handler.http]\nrate = { \"API.example.com\" = { per_second = 5, burst = 9 } }\n")
            .expect("rates");
        let rates = rated.handlers[0].rates();
        assert_eq!(rates["events"].per_second, 250.0);
        assert_eq!(
            (rates["api.example.com"].per_second, rates["api.example.com"].burst),
            (5.0, 9),
            "host names in lowercase"
        );
        refused("max_events_per_second = 0.0\n", "max_events_per_second: per_second = 0 must be between 0.001");
        refused("max_events_per_second = 1e-20\n", "must be between 0.001");
        refused("max_events_per_second = 2000000.0\n", "must be between 0.001 and 1000000");
        refused("[handler.http]\nrate = { \"h\" = { per_second = 1, burst = 0 } }\n", "burst must be at least 1");
        refused("[handler.http]\nrate = { \"https://h\" = { per_second = 1 } }\n", "without scheme, port or path");
        refused("[handler.http]\nrate = { \"events\" = { per_second = 1 } }\n", "name a destination host");
    }

    #[test]
    fn emit_topics_and_outbox_producers_are_checked() {
        let emit = "[[handler.emit]]\ntopic = \"payments.requested\"\nevent_types = [\"p.v1\"]\nschema = \"p.json\"\n";
        let emitting = load(emit).expect("an emit topic");
        assert!(emitting.handlers[0].emit[0].schema.ends_with("p.json"), "relative to the config file");
        refused(
            &emit.replace("payments.requested", "payments requested"),
            "emit topic `payments requested` is not a Kafka topic",
        );
        refused(&format!("{emit}{emit}"), "emit topic `payments.requested` is named twice");
        refused(&emit.replace("[\"p.v1\"]", "[]"), "needs event_types");
        let producer = "[[outbox.producer]]\nname = \"h\"\nrole = \"app\"\n[[outbox.producer.topic]]\ntopic = \"t\"\n\
                        event_types = [\"e\"]\n";
        refused(producer, "the name is taken");
        let without_topics =
            producer.split("[[outbox.producer.topic]]").next().unwrap_or_default().replace("\"h\"", "\"o\"");
        refused(&without_topics, "topic");
    }
}
