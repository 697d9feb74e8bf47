//! The `log` import: the host's log, tagged with handler and event, and
//! bounded (a guest may not flood it or forge its lines).

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use super::{After, Call, Capability, HasCapabilities};
use crate::config::HandlerConfig;
use crate::wit::log;

/// Lines the `log` import writes per invocation; later ones are dropped
/// (one line says so). Each line is cut at [`LOGGED_OUTPUT`] bytes.
pub(crate) const MAX_LOG_LINES: u32 = 100;

/// Bytes of one guest log line, and of each of its output streams, that
/// reach the host's log per invocation.
pub(crate) const LOGGED_OUTPUT: usize = 4 << 10;

/// One invocation's log: whose lines, and how many it may still write.
pub(crate) struct LogCapability {
    handler: String,
    event_id: String,
    lines_left: u32,
}

impl Capability for LogCapability {
    const INTERFACE: &'static str = "log";
    /// Nothing to configure: the bounds are the host's.
    type Settings = ();
    type Left = ();

    fn settings(_handler: &HandlerConfig) -> anyhow::Result<()> {
        Ok(())
    }

    fn prepare(_settings: &Arc<()>, call: &Call<'_>) -> Self {
        Self { handler: call.handler.to_owned(), event_id: call.event_id.to_owned(), lines_left: MAX_LOG_LINES }
    }

    fn husk(&self) -> Self {
        Self { handler: String::new(), event_id: String::new(), lines_left: 0 }
    }

    fn finish(&mut self, _after: &mut After<'_>) {}

    fn link<T: HasCapabilities>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
        log::add_to_linker::<T, HasSelf<Self>>(linker, |t| &mut t.capabilities().log)
    }
}

impl LogCapability {
    /// The handler whose invocation this is.
    pub(crate) fn handler(&self) -> &str {
        &self.handler
    }

    /// The event being handled.
    pub(crate) fn event_id(&self) -> &str {
        &self.event_id
    }
}

impl log::Host for LogCapability {
    async fn log(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
        // A guest may not flood the host's log: a bounded number of lines,
        // each cut to a bounded length.
        match self.lines_left {
            0 => return Ok(()),
            1 => {
                self.lines_left = 0;
                let (handler, event_id) = (&self.handler, &self.event_id);
                tracing::warn!(target: "idem::guest", handler, event_id, "more than {MAX_LOG_LINES} log lines: the rest of this invocation's are dropped");
                return Ok(());
            }
            _ => self.lines_left -= 1,
        }
        // Data, not log lines: a newline or an escape sequence in it cannot
        // start a line that looks like the host's own.
        let message = crate::text::shown(&message, LOGGED_OUTPUT);
        let (handler, event_id) = (&self.handler, &self.event_id);
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
