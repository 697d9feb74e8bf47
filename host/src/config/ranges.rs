//! The range of every value whose wrong setting would panic the host, fail
//! every event, or be refused later by a server in words that do not name
//! the key: each is checked when the config loads, naming the key, the
//! value and what is accepted. docs/configuration.md lists them. A
//! capability's own keys (`[handler.http]`, the limits of its calls) are
//! its module's to check (`Capability::check`), when `app::load_config`
//! loads the file.

use std::time::Duration;

use anyhow::bail;

use super::{AdminConfig, Config, HandlerConfig};

/// Longest wall-clock budget of one execution (and so of one statement:
/// PostgreSQL's `statement_timeout` is a 32-bit count of milliseconds).
pub(crate) const MAX_TIMEOUT_MS: u64 = 24 * 3600 * 1000;
/// Partitions one handler may process at once (each holds a connection and
/// an instance slot, sized at start-up).
const MAX_CONCURRENCY: usize = 1024;
/// Linear memory of one instance.
const MAX_MEMORY_MIB: usize = 16 * 1024;
/// idem's own pool.
/// What one host holds of idem's own pool at once, at most: the module
/// watcher's LISTEN, a retention pass's lock and its work, one more.
const MIN_CONNECTIONS: u32 = 4;
const MAX_CONNECTIONS: u32 = 1000;
/// The admin listener's connections: each is a file descriptor, and the
/// listener must never take those the consumers and pools need.
const MAX_ADMIN_CONNECTIONS: usize = 4096;
/// `[admin] header_timeout`: under 100 ms a client on a slow link could not
/// send its headers; over 10 minutes an idle client holds its slot for long.
const ADMIN_HEADER_TIMEOUT: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(600));
/// `[admin] body_timeout`: the largest module (256 MiB) needs time.
const ADMIN_BODY_TIMEOUT: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(3600));

pub(super) fn check(config: &Config) -> anyhow::Result<()> {
    if config.kafka.brokers.trim().is_empty() {
        bail!("[kafka] brokers is empty: name at least one host:port");
    }
    let url = &config.database.url;
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        bail!("[database] url must be a postgres:// or postgresql:// URL (idem runs on PostgreSQL only)");
    }
    let max = config.database.max_connections;
    if max < MIN_CONNECTIONS {
        bail!(
            "[database] max_connections = {max} is too few: a host needs at least {MIN_CONNECTIONS} of its own \
             (the module watcher's LISTEN holds one, a retention pass two, its lock and its work, and one serves \
             the rest)"
        );
    }
    if max > MAX_CONNECTIONS {
        bail!("[database] max_connections = {max} must be between {MIN_CONNECTIONS} and {MAX_CONNECTIONS}");
    }
    admin(&config.admin)?;
    config.handlers.iter().try_for_each(handler)
}

fn admin(a: &AdminConfig) -> anyhow::Result<()> {
    let (low, high) = ADMIN_HEADER_TIMEOUT;
    if !(low..=high).contains(&a.header_timeout.0) {
        bail!("[admin] header_timeout = \"{}\" must be between 100ms and 10m", a.header_timeout);
    }
    let (low, high) = ADMIN_BODY_TIMEOUT;
    if !(low..=high).contains(&a.body_timeout.0) {
        bail!("[admin] body_timeout = \"{}\" must be between 1s and 1h", a.body_timeout);
    }
    let (day, century) = (Duration::from_secs(86_400), Duration::from_secs(100 * 365 * 86_400));
    if !(day..=century).contains(&a.audit_retention.0) {
        bail!("[admin] audit_retention = \"{}\" must be between 1d and 36500d (100 years)", a.audit_retention);
    }
    if !(1..=MAX_ADMIN_CONNECTIONS).contains(&a.max_connections) {
        bail!("[admin] max_connections = {} must be between 1 and {MAX_ADMIN_CONNECTIONS}", a.max_connections);
    }
    if !(1..=a.max_connections).contains(&a.max_connections_per_peer) {
        bail!(
            "[admin] max_connections_per_peer = {} must be between 1 and max_connections ({})",
            a.max_connections_per_peer,
            a.max_connections
        );
    }
    Ok(())
}

fn handler(h: &HandlerConfig) -> anyhow::Result<()> {
    let at = format!("handler `{}`", h.name);
    if !is_topic_name(&h.topic) {
        bail!("{at}: topic `{}` is not a Kafka topic name (1 to 249 of a-z, A-Z, 0-9, `.`, `_`, `-`)", h.topic);
    }
    if h.group_id.trim().is_empty() || h.group_id.chars().any(char::is_control) {
        bail!("{at}: group_id must be a non-empty name without control characters");
    }
    if h.event_types.iter().any(|t| t.trim().is_empty()) {
        bail!("{at}: event_types has an empty entry, which no event could match");
    }
    if h.concurrency > MAX_CONCURRENCY {
        bail!("{at}: concurrency = {} must be between 1 and {MAX_CONCURRENCY}", h.concurrency);
    }
    if h.timeout_ms > MAX_TIMEOUT_MS {
        bail!("{at}: timeout_ms = {} must be at most {MAX_TIMEOUT_MS} (24 hours)", h.timeout_ms);
    }
    if h.max_memory_mib == 0 || h.max_memory_mib > MAX_MEMORY_MIB {
        bail!("{at}: max_memory_mib = {} must be between 1 and {MAX_MEMORY_MIB}", h.max_memory_mib);
    }
    if let Some(n) = h.events_per_instance.filter(|n| !(1..=1_000_000).contains(n)) {
        bail!("{at}: events_per_instance = {n} must be between 1 (a fresh instance per event) and 1000000");
    }
    let limits = &h.limits;
    if !(1..=65_536).contains(&limits.temp_file_limit_mib) || !(1..=4_096).contains(&limits.work_mem_mib) {
        bail!(
            "{at}: limits.temp_file_limit_mib must be 1 to 65536 and limits.work_mem_mib 1 to 4096 (MiB; \
             0 would fail every statement that sorts)"
        );
    }
    if !(1..=3_600).contains(&h.max_compile_seconds) {
        bail!("{at}: max_compile_seconds must be 1 to 3600");
    }
    if let Some(migrations) = &h.database.migrations
        && !migrations.is_dir()
    {
        bail!("{at}: database.migrations {} is not a folder", migrations.display());
    }
    Ok(())
}

/// Kafka's rule for topic names.
pub(super) fn is_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}
