//! What a store holds while one event runs: the WASI context the guest's std
//! needs, its limits, and the capabilities bound to this event (which the
//! linker reaches through [`HasCapabilities`]).

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::limits::GuestLimits;
use crate::capabilities::log::LOGGED_OUTPUT;
use crate::capabilities::{Capabilities, HasCapabilities};

/// Bytes of guest stdout and of stderr kept per invocation (a panic
/// message lands in stderr and explains the trap). A guest that writes more
/// traps on the write.
const OUTPUT_CAPACITY: usize = 64 << 10;

pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
    pub(crate) limits: GuestLimits,
    pub(crate) caps: Capabilities,
}

impl HostState {
    pub(crate) fn new(limits: GuestLimits, caps: Capabilities) -> Self {
        let stdout = MemoryOutputPipe::new(OUTPUT_CAPACITY);
        let stderr = MemoryOutputPipe::new(OUTPUT_CAPACITY);
        // WASI with nothing behind it: no preopened directory, an empty
        // environment, no arguments, stdin closed, every socket and name
        // lookup denied (the defaults, spelled out so that a change of
        // defaults cannot open anything). Output is captured for the log.
        let mut wasi = WasiCtx::builder();
        wasi.stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }));
        Self { wasi: wasi.build(), table: ResourceTable::new(), stdout, stderr, limits, caps }
    }

    /// The tail of what the guest wrote to stderr, for error messages.
    pub(crate) fn stderr_tail(&self) -> String {
        let bytes = self.stderr.contents();
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim();
        let start = text.char_indices().rev().nth(1999).map_or(0, |(i, _)| i);
        text[start..].to_owned()
    }

    /// Logs what the guest wrote to stdout and stderr, under its handler's
    /// name, at most [`LOGGED_OUTPUT`] bytes of each.
    pub(crate) fn log_output(&self) {
        for (stream, pipe) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let bytes = pipe.contents();
            if bytes.is_empty() {
                continue;
            }
            // Escaped: a newline in it cannot start a line of its own.
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(LOGGED_OUTPUT)]);
            let cut = if bytes.len() > LOGGED_OUTPUT { " (truncated)" } else { "" };
            let shown = crate::text::shown(text.trim_end(), LOGGED_OUTPUT);
            tracing::info!(
                target: "guest", handler = %self.caps.log.handler(), event_id = %self.caps.log.event_id(), stream,
                "{shown}{cut}"
            );
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl HasCapabilities for HostState {
    fn capabilities(&mut self) -> &mut Capabilities {
        &mut self.caps
    }
}
