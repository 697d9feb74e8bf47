//! Checking a loaded config as a whole: every key in its range (but a
//! capability's own, see `Config::load`), what two
//! handlers may not share (names, groups, DLQ topics, schemas, roles), and
//! the warnings that are not errors. `Config::load` calls it last.

use std::collections::HashSet;

use anyhow::{Context as _, bail};

use super::identifiers::{check_identifier, is_reserved_schema};
use super::properties::check_properties;
use super::{Config, HandlerConfig, failure, format, group, ordering, outbox, ranges, rates, retention};

impl Config {
    pub(super) fn check(&self) -> anyhow::Result<()> {
        if self.handlers.is_empty() {
            bail!("no [[handler]]: nothing to run");
        }
        self.admin.address()?;
        self.retention.check()?;
        if let Some(registry) = &self.registry {
            registry.check()?;
        }
        let timeout = self.shutdown.timeout.0;
        if !(std::time::Duration::from_secs(1)..=std::time::Duration::from_secs(600)).contains(&timeout) {
            bail!("[shutdown] timeout = \"{}\" must be between 1s and 10m", self.shutdown.timeout);
        }
        if !matches!(self.kafka.instance_id.as_str(), "auto" | "off") {
            crate::identity::check(&self.kafka.instance_id).context("[kafka] instance_id")?;
        }
        ranges::check(self)?;
        check_properties("[kafka.properties]", &self.kafka.properties, &self.kafka.properties_env)?;
        if !matches!(self.database.synchronous_commit.as_str(), "on" | "remote_apply" | "remote_write" | "local") {
            bail!(
                "[database] synchronous_commit `{}`: use on, remote_apply, remote_write or local (off could lose \
                 a commit reported as processed)",
                self.database.synchronous_commit
            );
        }
        let names: Vec<String> = self.handlers.iter().map(|h| h.name.clone()).collect();
        self.outbox.check(&names)?;
        let database = self.database_name()?;
        let mut taken = Taken::default();
        for h in &self.handlers {
            self.check_handler(h, &database, &mut taken)?;
        }
        self.warn_shared_keys();
        Ok(())
    }

    /// One `[[handler]]`'s keys, and what it may not share with the ones
    /// before it (`taken`).
    fn check_handler<'a>(&'a self, h: &'a HandlerConfig, database: &str, taken: &mut Taken<'a>) -> anyhow::Result<()> {
        let at = format!("handler `{}`", h.name);
        let Taken { names, groups, dlqs, .. } = &mut *taken;
        if h.name.is_empty() || !h.name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
            bail!("{at}: a name is letters, digits, `-`, `_` or `.`");
        }
        if !names.insert(&h.name) {
            bail!("{at}: two handlers have this name; it is the dedup namespace and must be unique");
        }
        if !groups.insert(&h.group_id) {
            bail!("{at}: group_id `{}` is used by another handler", h.group_id);
        }
        match (&h.component, h.module.as_deref(), &h.native) {
            (Some(_), None, None) | (None, Some("store"), None) | (None, None, Some(_)) => {}
            (None, Some(other), None) => bail!("{at}: module = `{other}`: the only value is \"store\""),
            (None, None, None) => {
                bail!("{at}: no `component` (the handler's .wasm), `module = \"store\"` or `native`")
            }
            _ => bail!("{at}: more than one of `component`, `module` and `native`: a handler has one body"),
        }
        if h.max_module_mib == 0 || h.max_module_mib > 256 {
            bail!("{at}: max_module_mib = {} must be between 1 and 256", h.max_module_mib);
        }
        if h.event_types.is_empty() {
            bail!("{at}: event_types is empty, so every event would be invalid");
        }
        retention::check_dedup_retention(&at, h.dedup_retention)?;
        if h.concurrency == 0 {
            bail!("{at}: concurrency must be at least 1");
        }
        ordering::check(&at, h.ordering, h.max_in_flight)?;
        if h.max_events.is_some() {
            bail!("{at}: max_events moved to [handler.batch] max_events");
        }
        if !(1..=10_000).contains(&h.batch.max_events) {
            bail!("{at}: batch.max_events = {} must be between 1 and 10000", h.batch.max_events);
        }
        if h.batch.max_wait_ms > 10_000 {
            bail!("{at}: batch.max_wait_ms = {} is more than 10000", h.batch.max_wait_ms);
        }
        ordering::check_concurrent(&at, h.batch.max_concurrent)?;
        outbox::check_topics(&at, h.emit.iter().map(|e| (e.topic.as_str(), e.event_types.as_slice())))?;
        if h.max_attempts.is_some() {
            bail!("{at}: max_attempts moved to [handler.retry] max_attempts");
        }
        if h.retry.max_attempts == 0 {
            bail!("{at}: retry.max_attempts must be at least 1");
        }
        if h.retry.initial_backoff_ms == 0 || h.retry.max_backoff_ms < h.retry.initial_backoff_ms {
            bail!("{at}: retry backoffs must satisfy 0 < initial_backoff_ms <= max_backoff_ms");
        }
        let dlq = h.dlq_topic();
        if dlq == h.topic {
            bail!("{at}: retry.dlq_topic is the handler's own topic");
        }
        failure::check(&at, &h.failure, h.ordering, h.retry.on_failure)?;
        super::audit::check(&at, &h.audit)?;
        super::capture::check(&at, &h.capture)?;
        super::canary::check(&at, &h.canary)?;
        format::check(&at, h.format, h.message.as_deref(), &h.envelope, self.registry.is_some())?;
        outbox::check_emit_formats(&at, &h.emit, self.registry.is_some())?;
        rates::check(&at, h.max_events_per_second, &h.http.rate)?;
        if !ranges::is_topic_name(&dlq) {
            bail!("{at}: retry.dlq_topic `{dlq}` is not a valid topic name");
        }
        if !dlqs.insert(dlq.clone()) {
            bail!("{at}: retry.dlq_topic `{dlq}` is another handler's: handlers never share a dead-letter topic");
        }
        if h.timeout_ms == 0 {
            bail!("{at}: timeout_ms must be at least 1 (0 would fail every event)");
        }
        // [handler.http], [handler.emit] and the limits of each capability
        // are its own module's to check (`capabilities`, `app::load_config`).
        self.check_storage(&at, h, database, taken)?;
        self.check_consumer(&at, h)
    }

    /// A handler's schema and role: valid, not reserved, its own.
    fn check_storage(&self, at: &str, h: &HandlerConfig, database: &str, taken: &mut Taken<'_>) -> anyhow::Result<()> {
        let schema = h.schema_name();
        check_identifier(at, "database.schema", &schema)?;
        if is_reserved_schema(&schema) {
            bail!("{at}: database.schema `{schema}` is reserved (idem's own, PostgreSQL's or `public`)");
        }
        if !taken.schemas.insert(schema.clone()) {
            bail!("{at}: database.schema `{schema}` is another handler's: each handler owns its schema");
        }
        let role = h.role_name(database);
        check_identifier(at, "database.role", &role)?;
        if !taken.roles.insert(role.clone()) {
            bail!("{at}: database.role `{role}` is another handler's: each handler logs in as its own role");
        }
        Ok(())
    }

    /// A handler's consumer: its group protocol's settings, its offset
    /// reset, its librdkafka properties.
    fn check_consumer(&self, at: &str, h: &HandlerConfig) -> anyhow::Result<()> {
        let consumer_properties = [
            ("[kafka.properties]", &self.kafka.properties),
            ("[kafka.properties_env]", &self.kafka.properties_env),
            ("properties", &h.properties),
            ("properties_env", &h.properties_env),
        ];
        group::check(at, h.group_protocol, h.assignor.as_deref(), &consumer_properties)?;
        if !matches!(h.auto_offset_reset.as_str(), "earliest" | "latest") {
            bail!("{at}: auto_offset_reset `{}`: use earliest or latest", h.auto_offset_reset);
        }
        check_properties(&format!("{at} properties"), &h.properties, &h.properties_env)?;
        Ok(())
    }
}

/// What two handlers may not share: names, groups, DLQ topics, schemas, roles.
#[derive(Default)]
struct Taken<'a> {
    names: HashSet<&'a String>,
    groups: HashSet<&'a String>,
    dlqs: HashSet<String>,
    schemas: HashSet<String>,
    roles: HashSet<String>,
}

impl Config {
    /// Two handlers that may call the same origin with the same key prefix
    /// send the same Idempotency-Key for one event: the provider would
    /// answer the second with the first's result. Not an error (they may
    /// call different operations), a warning.
    fn warn_shared_keys(&self) {
        let origin = |base: &String| reqwest::Url::parse(base).ok().map(|u| u.origin().ascii_serialization());
        for (i, a) in self.handlers.iter().enumerate() {
            for b in &self.handlers[i + 1..] {
                if a.http.key_prefix != b.http.key_prefix {
                    continue;
                }
                let shared = a
                    .http
                    .allow
                    .iter()
                    .filter_map(origin)
                    .find(|o| b.http.allow.iter().filter_map(origin).any(|p| p == *o));
                if let Some(shared) = shared {
                    tracing::warn!(
                        "handlers `{}` and `{}` may both call {shared} with the same http.key_prefix: their \
                         Idempotency-Keys for one event would collide; give each its own key_prefix",
                        a.name,
                        b.name
                    );
                }
            }
        }
    }
}
