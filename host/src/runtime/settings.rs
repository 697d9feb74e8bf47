//! What an operator configures for one handler, as the runtime and the
//! capabilities need it: built from its `[[handler]]` section.

use std::time::Duration;

use crate::config::HandlerConfig;

/// What an operator configures for one handler, as the runtime needs it.
#[derive(Debug, Clone)]
pub struct HandlerSettings {
    /// The handler's name: its dedup namespace (`idem.processed_event.consumer`).
    pub name: String,
    /// What each capability makes of the handler's config (`[handler.http]`,
    /// `[handler.config]`, `[[handler.emit]]`, their limits).
    pub caps: crate::capabilities::Settings,
    /// Wall-clock limit of one invocation, host calls included.
    pub timeout: Duration,
    /// Linear memory one instance may grow to.
    pub max_memory_bytes: usize,
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
    /// Events one instance serves before a fresh one replaces it (1: a
    /// fresh instance per event; see `runtime::warm`); 0: not configured,
    /// chosen by the component (`runtime::policy`).
    pub events_per_instance: u32,
    /// `trust_input_trace_headers`: emits carry on the input record's
    /// correlation id and trace (see `capabilities::emit::write::provenance`).
    pub trust_input_trace_headers: bool,
    /// The configured rates, by target (`events`, a destination host):
    /// where `crate::throttle` starts from.
    pub rates: std::collections::BTreeMap<String, crate::throttle::Rate>,
    /// When its canary is rolled back (`[handler.canary]`).
    pub canary: crate::config::HandlerCanary,
}

impl HandlerSettings {
    /// A handler named `name` with every default of the config
    /// (`HandlerConfig::named`): the defaults are written there only.
    pub fn new(name: impl Into<String>) -> Self {
        let config = HandlerConfig::named(name.into());
        Self::with(&config, crate::capabilities::Settings::default())
    }

    /// What `h` configures, as the runtime needs it (credentials read from
    /// the environment now, emit schemas read and compiled).
    pub fn of(h: &HandlerConfig) -> anyhow::Result<Self> {
        Ok(Self::with(h, crate::capabilities::Settings::of(h)?))
    }

    fn with(h: &HandlerConfig, caps: crate::capabilities::Settings) -> Self {
        HandlerSettings {
            name: h.name.clone(),
            caps,
            timeout: Duration::from_millis(h.timeout_ms),
            max_memory_bytes: h.max_memory_mib << 20,
            stale_events: h.stale_events,
            dedup_retention: h.dedup_retention.0,
            max_compile: Duration::from_secs(h.max_compile_seconds),
            ordering: h.ordering,
            max_concurrent: h.batch.max_concurrent,
            events_per_instance: h.events_per_instance.unwrap_or(0),
            trust_input_trace_headers: h.trust_input_trace_headers,
            rates: h.rates(),
            canary: h.canary,
        }
    }
}
