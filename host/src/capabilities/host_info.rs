//! The `config` and `log` imports: the handler's configured key/values, and
//! the host's log tagged with handler and event.

use crate::runtime::HostState;
use crate::runtime::bindings::{config, log};

impl config::Host for HostState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(self.settings.config.get(&key).cloned())
    }
}

impl log::Host for HostState {
    async fn log(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
        let (handler, event_id) = (&self.settings.name, &self.event_id);
        match level {
            log::Level::Trace => tracing::trace!(target: "idem::guest", handler, event_id, "{message}"),
            log::Level::Debug => tracing::debug!(target: "idem::guest", handler, event_id, "{message}"),
            log::Level::Info => tracing::info!(target: "idem::guest", handler, event_id, "{message}"),
            log::Level::Warn => tracing::warn!(target: "idem::guest", handler, event_id, "{message}"),
            log::Level::Error => tracing::error!(target: "idem::guest", handler, event_id, "{message}"),
        }
        Ok(())
    }
}
