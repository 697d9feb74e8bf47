//! The `config` and `log` imports: the handler's configured key/values, and
//! the host's log tagged with handler and event.

use crate::runtime::bindings::{config, log};
use crate::runtime::{HostState, LOGGED_OUTPUT, MAX_LOG_LINES};

impl config::Host for HostState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(self.settings.config.get(&key).cloned())
    }
}

impl log::Host for HostState {
    async fn log(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
        // A guest may not flood the host's log: a bounded number of lines,
        // each cut to a bounded length.
        match self.log_lines_left {
            0 => return Ok(()),
            1 => {
                self.log_lines_left = 0;
                let (handler, event_id) = (&self.settings.name, &self.event_id);
                tracing::warn!(target: "idem::guest", handler, event_id, "more than {MAX_LOG_LINES} log lines: the rest of this invocation's are dropped");
                return Ok(());
            }
            _ => self.log_lines_left -= 1,
        }
        // Data, not log lines: a newline or an escape sequence in it cannot
        // start a line that looks like the host's own.
        let message = crate::text::shown(&message, LOGGED_OUTPUT);
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
