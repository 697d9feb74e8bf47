//! What a store holds: the WASI context the guest's std needs, its limits,
//! and the capabilities bound to the event that runs (which the linker
//! reaches through [`HasCapabilities`]). A kept instance's store
//! (`warm.rs`) outlives its events: the WASI context and its handles stay
//! (a guest's libc keeps the handles of its standard streams), the
//! capabilities are the event's, lent in and taken back.

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::limits::GuestLimits;
use crate::capabilities::log::LOGGED_OUTPUT;
use crate::capabilities::{Capabilities, HasCapabilities};

/// Bytes of guest stdout and of stderr an invocation may write (a panic
/// message lands in stderr and explains the trap). A guest that writes more
/// traps on the write. (On a kept instance's first invocation, up to twice
/// this: its pipes hold two invocations' worth.)
pub(super) const OUTPUT_CAPACITY: usize = 64 << 10;

/// WASI handles (streams, pollables) a store may hold at once: a few tens
/// for any toolchain's runtime; the cap bounds the host memory a guest
/// holds through them, which its memory limit does not count (wasmtime's
/// own default is a million).
const MAX_HANDLES: usize = 16_384;

pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
    /// What each pipe held when the last invocation (or the instance's
    /// start) ended: where the next invocation's output starts.
    marks: (usize, usize),
    pub(crate) limits: GuestLimits,
    pub(crate) caps: Capabilities,
}

impl HostState {
    /// A store's state whose pipes hold `invocations` invocations' output:
    /// one for a fresh instance, two for a kept one (which is retired once
    /// one invocation's worth is used, so the next still has a whole one).
    pub(crate) fn new(limits: GuestLimits, caps: Capabilities, invocations: usize) -> Self {
        let stdout = MemoryOutputPipe::new(OUTPUT_CAPACITY * invocations);
        let stderr = MemoryOutputPipe::new(OUTPUT_CAPACITY * invocations);
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
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_HANDLES);
        Self { wasi: wasi.build(), table, stdout, stderr, marks: (0, 0), limits, caps }
    }

    /// Lends `caps` to the store for an invocation; hands back what it held.
    pub(crate) fn lend(&mut self, caps: Capabilities) -> Capabilities {
        std::mem::replace(&mut self.caps, caps)
    }

    /// Output bytes the store's pipes held when the last invocation ended,
    /// the larger of the two.
    pub(crate) fn output_used(&self) -> usize {
        self.marks.0.max(self.marks.1)
    }

    /// Marks what the pipes hold now (an instance's start wrote it) as
    /// before the next invocation.
    pub(crate) fn mark_output(&mut self) {
        self.marks = (self.stdout.contents().len(), self.stderr.contents().len());
    }

    /// Ends an invocation's output: logs what the guest wrote to stdout and
    /// stderr in it, marks where the next one's starts, and returns the
    /// tail of its stderr for error messages. Each pipe is read once
    /// (reading one copies all it holds: a kept instance's pipes hold
    /// every invocation's output since it started).
    pub(crate) fn settle_output(&mut self) -> String {
        let (stdout, stderr) = (self.stdout.contents(), self.stderr.contents());
        let new_out = stdout.get(self.marks.0..).unwrap_or_default();
        let new_err = stderr.get(self.marks.1..).unwrap_or_default();
        self.log_output(new_out, new_err);
        let text = String::from_utf8_lossy(new_err);
        let text = text.trim();
        let start = text.char_indices().rev().nth(1999).map_or(0, |(i, _)| i);
        self.marks = (stdout.len(), stderr.len());
        text[start..].to_owned()
    }

    /// Logs an invocation's output under its handler's name, at most
    /// [`LOGGED_OUTPUT`] bytes of each stream.
    fn log_output(&self, stdout: &[u8], stderr: &[u8]) {
        for (stream, bytes) in [("stdout", stdout), ("stderr", stderr)] {
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
