//! What an operator configures for one handler, as the runtime and the
//! capabilities need it: built from its `[[handler]]` section.

use std::collections::BTreeMap;
use std::time::Duration;

use std::sync::Arc;

use crate::capabilities::emit::EmitPolicy;
use crate::capabilities::http::{Credential, HttpPolicy, RetryPolicy};
use crate::config::HandlerConfig;

/// What an operator configures for one handler, as the runtime needs it.
#[derive(Debug, Clone)]
pub struct HandlerSettings {
    /// The handler's name: its dedup namespace (`idem.processed_event.consumer`).
    pub name: String,
    /// Key/values the guest reads through the `config` import.
    pub config: BTreeMap<String, String>,
    pub http: HttpPolicy,
    /// Wall-clock limit of one invocation, host calls included.
    pub timeout: Duration,
    /// Linear memory one instance may grow to.
    pub max_memory_bytes: usize,
    /// Database statements one invocation may run.
    pub max_db_statements: u32,
    /// HTTP requests one invocation may send.
    pub max_http_requests: u32,
    /// What becomes of an event older than `dedup_retention` (see `retention`).
    pub stale_events: crate::config::StalePolicy,
    /// How long the handler's dedup rows are kept (for messages: the
    /// database holds the recorded value the claim applies).
    pub dedup_retention: Duration,
    /// CPU time compiling its component may take (`max_compile_seconds`).
    pub max_compile: Duration,
    /// Which events of a batch may run at the same time (`ordering`).
    pub ordering: crate::config::Ordering,
    /// How many of them at most (`[handler.batch] max_concurrent`).
    pub max_concurrent: usize,
    /// What it may emit (`[[handler.emit]]`, schemas compiled).
    pub emit: Arc<EmitPolicy>,
    /// Events one invocation may emit, and the bytes of each.
    pub max_emits: u32,
    pub max_emit_bytes: usize,
    /// Events one instance serves before a fresh one replaces it (1: a
    /// fresh instance per event; see `runtime::warm`).
    pub events_per_instance: u32,
    /// `trust_input_trace_headers`: emits carry on the input record's
    /// correlation id and trace (see `capabilities::emit::write::provenance`).
    pub trust_input_trace_headers: bool,
}

impl HandlerSettings {
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            config: BTreeMap::new(),
            http: HttpPolicy::default(),
            timeout: Duration::from_secs(30),
            max_memory_bytes: 256 << 20,
            max_db_statements: 1_000,
            max_http_requests: 16,
            stale_events: crate::config::StalePolicy::Dlq,
            dedup_retention: Duration::from_secs(7 * 86_400),
            max_compile: Duration::from_secs(crate::config::DEFAULT_MAX_COMPILE_SECONDS),
            ordering: crate::config::Ordering::Partition,
            max_concurrent: 1,
            emit: Arc::new(EmitPolicy::default()),
            max_emits: 16,
            max_emit_bytes: 64 << 10,
            events_per_instance: 1,
            trust_input_trace_headers: false,
        }
    }

    /// What `h` configures, as the runtime needs it (credentials read from
    /// the environment now, emit schemas read and compiled).
    pub fn of(h: &HandlerConfig) -> anyhow::Result<Self> {
        let emit = Arc::new(EmitPolicy::load(&h.emit)?);
        Ok(HandlerSettings {
            name: h.name.clone(),
            config: h.config.clone(),
            http: HttpPolicy {
                allow: h.http.allow.clone(),
                timeout: Duration::from_millis(h.http.timeout_ms),
                key_prefix: h.http.key_prefix.clone(),
                allow_private: h.http.allow_private.clone(),
                credentials: h
                    .http
                    .credentials
                    .iter()
                    .map(|c| Credential {
                        base: c.base.clone(),
                        header: c.header.clone(),
                        value: crate::env::get(&c.value_env).unwrap_or_default(),
                    })
                    .collect(),
                retry: RetryPolicy {
                    max_attempts: h.http.retry.max_attempts,
                    initial_backoff: Duration::from_millis(h.http.retry.initial_backoff_ms),
                    max_backoff: Duration::from_millis(h.http.retry.max_backoff_ms),
                },
            },
            timeout: Duration::from_millis(h.timeout_ms),
            max_memory_bytes: h.max_memory_mib << 20,
            max_db_statements: h.limits.max_db_statements,
            max_http_requests: h.limits.max_http_requests,
            stale_events: h.stale_events,
            dedup_retention: h.dedup_retention.0,
            max_compile: Duration::from_secs(h.max_compile_seconds),
            ordering: h.ordering,
            max_concurrent: h.batch.max_concurrent,
            emit,
            max_emits: h.limits.max_emits,
            max_emit_bytes: h.limits.max_emit_bytes,
            events_per_instance: h.events_per_instance,
            trust_input_trace_headers: h.trust_input_trace_headers,
        })
    }
}
